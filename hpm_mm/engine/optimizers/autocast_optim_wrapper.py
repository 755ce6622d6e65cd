from contextlib import contextmanager
from typing import Union

import torch
from mmengine.logging import print_log
from mmengine.optim import OptimWrapper
from mmengine.registry import OPTIM_WRAPPERS  # root: every scope finds it


@OPTIM_WRAPPERS.register_module()
class AutocastOptimWrapper(OptimWrapper):
    """Mixed precision by autocast alone, on any device, CPU included.

    mmengine's :class:`AmpOptimWrapper` refuses to build without a GPU
    (mmpretrain #1556). bf16 has fp32's exponent range, so it needs no loss
    scaling; this wrapper only runs the forward under ``torch.autocast``.
    HPM computes its losses in fp32 whatever the autocast.

    Args:
        dtype (str): ``'bfloat16'`` (default) or ``'float16'`` (GPU only;
            prefer :class:`AmpOptimWrapper` there, which scales the loss).
        device_type (str, optional): ``'cpu'`` or ``'cuda'``. Defaults to
            CUDA when available, else CPU.
        **kwargs: The arguments of :class:`OptimWrapper`.
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


def amp_optim_wrapper_cfg(optim_wrapper: dict,
                          cuda: bool = None) -> dict:
    """Mixed-precision version of an ``optim_wrapper`` config for this device.

    With CUDA: :class:`AmpOptimWrapper`, fp16 with dynamic loss scale (kept
    as configured if it already is one). Without: :class:`AutocastOptimWrapper`
    in bf16, which also replaces an ``AmpOptimWrapper`` from a GPU config.

    Args:
        optim_wrapper (dict): The config's ``optim_wrapper``.
        cuda (bool, optional): Override the CUDA detection (tests).

    Returns:
        dict: A new config dict.
    """
    cuda = torch.cuda.is_available() if cuda is None else cuda
    cfg = dict(optim_wrapper)
    if cuda:
        if cfg.get('type') != 'AmpOptimWrapper':
            cfg.pop('dtype', None)
            cfg.update(type='AmpOptimWrapper', loss_scale='dynamic')
        return cfg
    if cfg.get('type') == 'AmpOptimWrapper':
        print_log(
            'No GPU: AmpOptimWrapper becomes AutocastOptimWrapper (bf16 '
            'autocast on the CPU, no loss scaling).',
            logger='current')
    for key in ('loss_scale', 'use_fsdp'):
        cfg.pop(key, None)
    cfg.update(type='AutocastOptimWrapper', dtype='bfloat16')
    return cfg
