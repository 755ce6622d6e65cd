from contextlib import contextmanager
from typing import Union

import torch
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
        self.device_type = device_type or ('cuda' if torch.cuda.is_available()
                                           else 'cpu')

    @contextmanager
    def optim_context(self, model: torch.nn.Module):
        with super().optim_context(model), torch.autocast(
                device_type=self.device_type, dtype=self.cast_dtype):
            yield


AMP_TYPES = ('AmpOptimWrapper', 'GuardedAmpOptimWrapper')


def amp_optim_wrapper_cfg(optim_wrapper: dict, precision) -> dict:
    """The ``optim_wrapper`` config of a mixed-precision run, for the
    precision chosen by :func:`hpm_mm.engine.precision.choose_precision`.

    - ``'fp16'`` (CUDA): :class:`GuardedAmpOptimWrapper` with a dynamic loss
      scale (kept as configured if it already is an AMP wrapper);
    - ``'bf16'`` (a CPU whose timed step is faster in bf16):
      :class:`AutocastOptimWrapper`;
    - ``'fp32'`` (a CPU where bf16 is not clearly faster): the config's wrapper
      without autocast, an AMP one (mmengine's cannot be built without a
      GPU) becoming :class:`GuardedOptimWrapper`.

    All keep the non-finite guard.

    Args:
        optim_wrapper (dict): The config's ``optim_wrapper``.
        precision (Precision): The decision.

    Returns:
        dict: A new config dict.
    """
    cfg = dict(optim_wrapper)
    if precision.name == 'fp16':
        if cfg.get('type') not in AMP_TYPES:
            cfg.pop('dtype', None)
            cfg.update(type='GuardedAmpOptimWrapper', loss_scale='dynamic')
        return cfg
    for key in ('loss_scale', 'use_fsdp', 'dtype'):
        cfg.pop(key, None)
    if precision.name == 'bf16':
        cfg.update(type='AutocastOptimWrapper', dtype='bfloat16')
    elif cfg.get('type') in AMP_TYPES + ('AutocastOptimWrapper', ):
        cfg.update(type='GuardedOptimWrapper')
    return cfg


def run_dtype(optim_wrapper) -> Union[torch.dtype, None]:
    """The autocast dtype a built optimizer wrapper runs its forward in
    (None: fp32): a run's own precision, for what evaluates it."""
    from mmengine.optim import AmpOptimWrapper
    if isinstance(optim_wrapper, AutocastOptimWrapper):
        return optim_wrapper.cast_dtype
    if isinstance(optim_wrapper, AmpOptimWrapper):
        return optim_wrapper.cast_dtype or torch.float16
    return None
