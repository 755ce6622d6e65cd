from typing import Dict

import torch
from mmengine.model import MMDistributedDataParallel
from mmengine.optim import OptimWrapper
from mmengine.registry import MODEL_WRAPPERS  # root: every scope finds it

from ..optimizers.nonfinite import update_unless_nonfinite


@MODEL_WRAPPERS.register_module()
class HPMDistributedDataParallel(MMDistributedDataParallel):
    """mmengine's DDP wrapper whose train step skips non-finite losses.

    Under a model wrapper mmengine calls the wrapper's ``train_step``, not
    the model's, so :meth:`HPM.train_step`'s guard would not run. This one
    takes the same decision on all ranks (see
    :func:`update_unless_nonfinite`). The HPM configs select it with
    ``model_wrapper_cfg = dict(type='HPMDistributedDataParallel')``.
    """

    def train_step(self, data: dict,
                   optim_wrapper: OptimWrapper) -> Dict[str, torch.Tensor]:
        with optim_wrapper.optim_context(self):
            data = self.module.data_preprocessor(data, training=True)
            losses = self._run_forward(data, mode='loss')
        parsed_loss, log_vars = self.module.parse_losses(losses)
        return update_unless_nonfinite(
            parsed_loss, log_vars, optim_wrapper,
            getattr(self.module, 'skip_nonfinite', True))
