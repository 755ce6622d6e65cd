from typing import Dict

import torch
from mmengine.model import MMDistributedDataParallel
from mmengine.optim import OptimWrapper
from mmengine.registry import MODEL_WRAPPERS  # root: every scope finds it

from ..optimizers.nonfinite import guarded_train_step


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
        return guarded_train_step(self, self.module, data,
                                  optim_wrapper)
