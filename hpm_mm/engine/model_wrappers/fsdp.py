from typing import Dict

import torch
import torch.nn as nn
from mmengine._strategy import FSDPStrategy
from mmengine.dist import broadcast
from mmengine.model import MMFullyShardedDataParallel
from mmengine.optim import OptimWrapper
from mmengine.registry import MODEL_WRAPPERS, STRATEGIES  # root registries


@MODEL_WRAPPERS.register_module()
class HPMFullyShardedDataParallel(MMFullyShardedDataParallel):
    """mmengine's FSDP wrapper, correct for HPM and usable on a CPU: the EMA
    teacher is an ignored module (replicated, updated inside the forward
    while the single root unit holds the full student, so it needs no
    communication); the student is one unit (an ``auto_wrap_policy`` is
    refused); ``use_orig_params=True``; clipping by FSDP's global norm; every
    rank starts from rank 0's weights; without CUDA the device is the CPU;
    ``module.unsharded_state``: its state's shapes before sharding (meta
    tensors), for the resume's fit check. Use it through ``FlexibleRunner``
    with ``strategy=dict(type='HPMFSDPStrategy',
    model_wrapper=dict(type='HPMFullyShardedDataParallel'))`` (docs/
    distributed.md); its arguments are mmengine's wrapper's.

    Args:
        module (nn.Module): the HPM model (its teacher is left out of the
            sharding).
        device_id (int, optional): the device; without CUDA the CPU. Defaults
            to None: the current CUDA device.
        **kwargs: mmengine's ``MMFullyShardedDataParallel`` arguments (no
            ``auto_wrap_policy``).
    """

    def __init__(self, module: nn.Module, device_id=None, **kwargs) -> None:
        if kwargs.get('auto_wrap_policy') is not None:
            raise ValueError('HPMFullyShardedDataParallel keeps the student '
                             'in one unit: no auto_wrap_policy.')
        if not kwargs.get('use_orig_params', True):
            raise ValueError('HPMFullyShardedDataParallel needs '
                             'use_orig_params=True.')
        if not torch.cuda.is_available():
            device_id = torch.device('cpu')
        if getattr(module, 'teacher', None) is not None:  # (FSDP dedups)
            ignored = kwargs.get('ignored_modules') or []
            kwargs['ignored_modules'] = [*ignored, 'teacher']
        # ranks may have built different initial weights (diff_rank_seed):
        # start from rank 0's, teacher included, as DDP does. FSDP's own
        # sync_module_states skips ignored modules and refuses CPU tensors.
        # (mmengine's broadcast: through the backend's device, in place)
        if kwargs.pop('sync_module_states', True):
            for tensor in module.state_dict().values():  # (detached)
                broadcast(tensor, src=0)
        module.unsharded_state = {
            k: torch.empty_like(v, device='meta')
            for k, v in module.state_dict().items()
        }
        super().__init__(module, device_id=device_id, **kwargs)

    def train_step(self, data: dict,
                   optim_wrapper: OptimWrapper) -> Dict[str, torch.Tensor]:
        """mmengine's FSDP train step, clipping by FSDP's norm over all
        shards (mmengine's is this rank's shards' norm)."""
        if getattr(optim_wrapper, 'grad_name', None) == 'grad_norm':
            optim_wrapper.clip_func = self._clip_grad_norm
        return super().train_step(data, optim_wrapper)

    def _clip_grad_norm(self, params, max_norm, norm_type=2.0, **kwargs):
        return self.clip_grad_norm_(max_norm, norm_type)


@STRATEGIES.register_module()
class HPMFSDPStrategy(FSDPStrategy):
    """mmengine's ``FSDPStrategy``, whose resume loads the optimizer's
    state: mmengine 0.10.7 calls torch's ``optim_state_dict_to_load`` with
    torch 1's argument order (a resume failed: "unhashable type: 'dict'").

    Args:
        model_wrapper (dict, optional): the FSDP wrapper
            (``HPMFullyShardedDataParallel``).
        skip_init_weights (bool): Defaults to False.
        state_dict_cfg (str | dict): 'full' keeps the usual key layout in
            checkpoints. Defaults to 'local'.
        activation_checkpointing (dict, optional): Defaults to None.
        **kwargs: mmengine's ``DDPStrategy`` arguments.
    """

    def load_optim_state_dict(self, state_dict: dict) -> None:
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
        self.optim_wrapper.load_state_dict(
            FSDP.optim_state_dict_to_load(self.model,
                                          self.optim_wrapper.optimizer,
                                          state_dict))
