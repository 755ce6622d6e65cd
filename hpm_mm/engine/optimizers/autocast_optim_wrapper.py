from contextlib import contextmanager
from typing import Union

import torch
from mmengine.optim import OptimWrapper
from mmengine.registry import OPTIM_WRAPPERS  # root: every scope finds it

from .guarded_optim_wrapper import NonFiniteGuardMixin


@OPTIM_WRAPPERS.register_module()
class AutocastOptimWrapper(NonFiniteGuardMixin, OptimWrapper):
    """Mixed precision by autocast alone, on any device (mmengine's
    :class:`AmpOptimWrapper` needs a GPU): bf16 needs no loss scale; the
    losses are fp32 whatever the autocast. Guarded like
    :class:`GuardedOptimWrapper`.

    Args:
        dtype (str): ``'bfloat16'`` or ``'float16'`` (GPU). Defaults to bf16.
        device_type (str, optional): Defaults to CUDA when available."""

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


def run_dtype(optim_wrapper) -> Union[torch.dtype, None]:
    """The autocast dtype a built optimizer wrapper runs its forward in
    (None: fp32): a run's own precision, for what evaluates it."""
    from mmengine.optim import AmpOptimWrapper
    if isinstance(optim_wrapper, AutocastOptimWrapper):
        return optim_wrapper.cast_dtype
    if isinstance(optim_wrapper, AmpOptimWrapper):
        return optim_wrapper.cast_dtype or torch.float16
    return None
