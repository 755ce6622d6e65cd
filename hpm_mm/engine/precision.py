"""The precision a run computes in: one config key, one rule.

``precision='auto'`` (``--amp``) is bf16 autocast on a CUDA device with
bf16, fp16 with a dynamic loss scale on one without, fp32 on a CPU;
'fp32', 'bf16', 'fp16' as asked ('fp16' needs CUDA). :func:`run_precision`
is the one entrance (the runner, the kNN hook, ``knn_eval``); why a CPU
stays in fp32: docs/speed.md."""
from typing import NamedTuple, Optional

import torch

from hpm_mm.errors import HPMError

#: the values of the config key ``precision``
PRECISIONS = ('auto', 'fp32', 'bf16', 'fp16')
#: optimizer wrappers that ask for mixed precision in a config without the
#: key (mmpretrain's ``--amp`` names ``AmpOptimWrapper``)
AMP_TYPES = ('AmpOptimWrapper', 'GuardedAmpOptimWrapper')
DTYPES = dict(fp32=None, bf16=torch.bfloat16, fp16=torch.float16)


class Precision(NamedTuple):
    """A decision: ``name`` ('fp32', 'bf16', 'fp16'), its autocast dtype
    (None: no autocast), the device type and why, in words."""
    name: str
    dtype: Optional[torch.dtype]
    device: str
    reason: str

    def line(self) -> str:
        return f'precision: {self.name} ({self.reason})'

    def to_dict(self) -> dict:
        return dict(
            precision=self.name,
            device=self.device,
            reason=self.reason,
            torch=torch.__version__)


def precision_key(cfg) -> str:
    """The config's ``precision``, or, without the key, what its
    ``optim_wrapper`` asks for (an AMP wrapper: ``'auto'``; an
    ``AutocastOptimWrapper``: its dtype; any other: ``'fp32'``)."""
    value = cfg.get('precision')
    if value is not None:
        if value not in PRECISIONS:
            raise HPMError(f'precision={value!r} is not one of '
                           f"{', '.join(PRECISIONS)}. Fix: precision='auto'.")
        return value
    wrapper = cfg.get('optim_wrapper') or {}
    kind = wrapper.get('type') if isinstance(wrapper, dict) else None
    if kind in AMP_TYPES:
        return 'auto'
    if kind == 'AutocastOptimWrapper':
        dtype = str(wrapper.get('dtype', 'bfloat16'))
        return 'fp16' if dtype in ('float16', 'torch.float16') else 'bf16'
    return 'fp32'


def run_precision(cfg, device: Optional[str] = None) -> Precision:
    """The :class:`Precision` of a config (or a dict with ``precision``) on
    ``device`` (default: CUDA when available); HPMError for a value the
    device cannot compute."""
    device = torch.device(
        device or ('cuda' if torch.cuda.is_available() else 'cpu')).type
    name = precision_key(cfg)
    asked = f"precision='{name}'" if cfg.get('precision') else \
        f'the optim_wrapper asks for {name}' if name != 'fp32' else 'no --amp'
    cuda = device == 'cuda'
    bf16_ok = not cuda or torch.cuda.is_bf16_supported()
    if name == 'auto':
        name, why = ('fp32', "CPU: fp32; precision='bf16' for bf16 autocast") \
            if not cuda else ('bf16', 'GPU with bf16: bf16 autocast') \
            if bf16_ok else ('fp16', 'GPU without bf16: fp16 autocast with a '
                             'dynamic loss scale')
        return Precision(name, DTYPES[name], device, why)
    if name == 'fp16' and not cuda:
        raise HPMError("precision='fp16' needs a GPU, and this machine has "
                       "none. Fix: precision='bf16'.")
    if name == 'bf16' and not bf16_ok:
        raise HPMError("precision='bf16': this GPU does not support bf16. "
                       "Fix: precision='auto' (fp16 with a loss scale).")
    return Precision(name, DTYPES[name], device, f'as configured: {asked}')


def optim_wrapper_cfg(optim_wrapper: dict, precision: Precision) -> dict:
    """The ``optim_wrapper`` config that computes ``precision``, keeping
    the non-finite guard: fp16 is :class:`GuardedAmpOptimWrapper` (dynamic
    loss scale), bf16 :class:`AutocastOptimWrapper`, fp32 the config's
    wrapper without autocast."""
    cfg = dict(optim_wrapper)
    kind = cfg.get('type')
    if precision.name == 'fp16':
        if kind not in AMP_TYPES:
            cfg.pop('dtype', None)
            cfg.update(type='GuardedAmpOptimWrapper', loss_scale='dynamic')
    elif not (precision.name == 'bf16' and kind == 'AutocastOptimWrapper'):
        for key in ('loss_scale', 'use_fsdp', 'dtype'):
            cfg.pop(key, None)
        if precision.name == 'bf16':
            cfg.update(type='AutocastOptimWrapper', dtype='bfloat16')
        elif kind in AMP_TYPES + ('AutocastOptimWrapper', ):
            cfg.update(type='GuardedOptimWrapper')
    return cfg
