from contextlib import contextmanager
from typing import Union

import torch
from mmengine.logging import print_log
from mmengine.optim import OptimWrapper
from mmengine.registry import OPTIM_WRAPPERS  # root: every scope finds it

from .guarded_optim_wrapper import NonFiniteGuardMixin


@OPTIM_WRAPPERS.register_module()
class AutocastOptimWrapper(NonFiniteGuardMixin, OptimWrapper):
    """Mixed precision by autocast alone, on any device, CPU included.

    mmengine's :class:`AmpOptimWrapper` refuses to build without a GPU
    (mmpretrain #1556). bf16 has fp32's exponent range, so it needs no loss
    scaling; this wrapper only runs the forward under ``torch.autocast``.
    HPM computes its losses in fp32 whatever the autocast. Guarded against
    non-finite steps like :class:`GuardedOptimWrapper`.

    Args:
        dtype (str): ``'bfloat16'`` (default) or ``'float16'`` (GPU only;
            prefer :class:`AmpOptimWrapper` there, which scales the loss).
        device_type (str, optional): ``'cpu'`` or ``'cuda'``. Defaults to
            CUDA when available, else CPU.
        **kwargs: The arguments of :class:`GuardedOptimWrapper`.
    """

    def __init__(self,
                 dtype: Union[str, torch.dtype] = 'bfloat16',
                 device_type: str = None,
                 **kwargs) -> None:
        super().__init__(**kwargs)
        self.cast_dtype = getattr(torch, dtype) if isinstance(dtype,
                                                              str) else dtype
        self.device_type = device_type or (
            'cuda' if torch.cuda.is_available() else 'cpu')

    @contextmanager
    def optim_context(self, model: torch.nn.Module):
        with super().optim_context(model), torch.autocast(
                device_type=self.device_type, dtype=self.cast_dtype):
            yield


AMP_TYPES = ('AmpOptimWrapper', 'GuardedAmpOptimWrapper')


def amp_optim_wrapper_cfg(optim_wrapper: dict,
                          cuda: bool = None) -> dict:
    """Mixed-precision version of an ``optim_wrapper`` config for this device.

    With CUDA: :class:`GuardedAmpOptimWrapper`, fp16 with dynamic loss scale
    (kept as configured if it already is an AMP wrapper). Without:
    :class:`AutocastOptimWrapper` in bf16, which also replaces an AMP
    wrapper from a GPU config. Both keep the non-finite guard.

    Args:
        optim_wrapper (dict): The config's ``optim_wrapper``.
        cuda (bool, optional): Override the CUDA detection (tests).

    Returns:
        dict: A new config dict.
    """
    cuda = torch.cuda.is_available() if cuda is None else cuda
    cfg = dict(optim_wrapper)
    if cuda:
        if cfg.get('type') not in AMP_TYPES:
            cfg.pop('dtype', None)
            cfg.update(type='GuardedAmpOptimWrapper', loss_scale='dynamic')
        return cfg
    if cfg.get('type') in AMP_TYPES:
        print_log(
            f'No GPU: {cfg["type"]} becomes AutocastOptimWrapper (bf16 '
            'autocast on the CPU, no loss scaling).',
            logger='current')
    for key in ('loss_scale', 'use_fsdp'):
        cfg.pop(key, None)
    cfg.update(type='AutocastOptimWrapper', dtype='bfloat16')
    return cfg
