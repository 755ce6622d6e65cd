from functools import partial
from typing import Dict

import torch
import torch.distributed as dist
import torch.nn as nn
from mmengine.model import MMFullyShardedDataParallel
from mmengine.optim import OptimWrapper
from mmengine.registry import MODEL_WRAPPERS  # root: every scope finds it


def _fsdp_clip_grad_norm(fsdp: 'HPMFullyShardedDataParallel',
                         params,
                         max_norm: float,
                         norm_type: float = 2.0,
                         **kwargs):
    """``clip_grad_norm_`` for an :class:`OptimWrapper`, over all shards.

    mmengine's optimizer wrappers clip with
    ``torch.nn.utils.clip_grad_norm_`` on the parameters they hold, which
    under FSDP are this rank's shards: every rank would clip by its own
    partial norm. FSDP's own method reduces the norm over the ranks.
    """
    return fsdp.clip_grad_norm_(max_norm, norm_type)


@torch.no_grad()
def _broadcast_from_rank0(module: nn.Module) -> None:
    """Copy rank 0's parameters and buffers to every rank."""
    device = torch.device('cuda', torch.cuda.current_device()) \
        if dist.get_backend() == 'nccl' else torch.device('cpu')
    for tensor in module.state_dict().values():
        buf = tensor.to(device)
        dist.broadcast(buf, src=0)
        tensor.copy_(buf)


@MODEL_WRAPPERS.register_module()
class HPMFullyShardedDataParallel(MMFullyShardedDataParallel):
    """mmengine's FSDP wrapper, made correct for HPM (and usable on a CPU).

    - The EMA teacher is an *ignored* module: replicated on every rank, not
      sharded, never all-gathered. Every rank updates it from the student
      inside the forward, where the (single, root) FSDP unit has gathered
      the full student parameters, so the teacher stays identical on all
      ranks with no communication of its own. Gradients and optimizer
      states of the student are sharded (ZeRO-2-like memory).
    - The student is therefore one FSDP unit: an ``auto_wrap_policy`` would
      leave block parameters sharded during the EMA update, and is refused.
    - ``use_orig_params=True`` (the student's parameters keep their names,
      which the EMA update and mmengine's paramwise optimizer configs need).
    - Gradient clipping of the optimizer wrapper goes through
      :meth:`FullyShardedDataParallel.clip_grad_norm_` (the norm over all
      shards), not the per-rank norm mmengine would compute.
    - Every rank starts from rank 0's weights, teacher included, as under
      DDP (ranks seeded differently would otherwise shard different
      initialisations); ``sync_module_states=False`` turns this off.
    - With the guarded optimizer wrappers, a non-finite loss or gradient
      shard on any rank skips the step on all ranks.
    - Without CUDA, ``device_id`` becomes the CPU (gloo process group).

    Use it through mmengine's ``FlexibleRunner``::

        runner_type = 'FlexibleRunner'
        strategy = dict(type='FSDPStrategy',
                        model_wrapper=dict(type='HPMFullyShardedDataParallel'))

    Args:
        module (nn.Module): The model (an :class:`HPM` or any model; the
            ``teacher`` submodule, when there is one, is ignored).
        device_id (int | torch.device, optional): As FSDP's; replaced by
            the CPU when CUDA is not available.
        **kwargs: The arguments of :class:`MMFullyShardedDataParallel`.
    """

    def __init__(self, module: nn.Module, device_id=None, **kwargs) -> None:
        if kwargs.get('auto_wrap_policy') is not None:
            raise ValueError(
                'HPMFullyShardedDataParallel keeps the student in one FSDP '
                'unit so that the EMA teacher update sees whole parameters; '
                'remove auto_wrap_policy from the model_wrapper config.')
        if not kwargs.get('use_orig_params', True):
            raise ValueError(
                'HPMFullyShardedDataParallel needs use_orig_params=True (the '
                'EMA update reads the student parameters by name).')
        if not torch.cuda.is_available():
            device_id = torch.device('cpu')
        ignored = list(kwargs.pop('ignored_modules', None) or [])
        if getattr(module, 'teacher', None) is not None and \
                'teacher' not in ignored and module.teacher not in ignored:
            ignored.append('teacher')
        if ignored:
            kwargs['ignored_modules'] = ignored
        # ranks may have built different initial weights (diff_rank_seed):
        # start from rank 0's, teacher included, as DDP does. FSDP's own
        # sync_module_states skips ignored modules and refuses CPU tensors.
        if kwargs.pop('sync_module_states', True) and dist.is_initialized():
            _broadcast_from_rank0(module)
        super().__init__(module, device_id=device_id, **kwargs)

    def train_step(self, data: dict,
                   optim_wrapper: OptimWrapper) -> Dict[str, torch.Tensor]:
        """mmengine's FSDP train step with FSDP-wide gradient clipping."""
        if getattr(optim_wrapper, 'grad_name', None) == 'grad_norm':
            optim_wrapper.clip_func = partial(_fsdp_clip_grad_norm, self)
        return super().train_step(data, optim_wrapper)
