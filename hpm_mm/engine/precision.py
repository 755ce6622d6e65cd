"""Which precision a run computes in, chosen by what the hardware does fast.

Mixed precision (``tools/train.py --amp``, the AMP configs, ``knn_eval.py
--amp``, the kNN hook of such a run) means:

- on CUDA: fp16 with a dynamic loss scale (:class:`GuardedAmpOptimWrapper`);
- on a CPU: bf16 autocast **only where the CPU computes bf16 natively**
  (torch reports AVX512-BF16 or AMX) **and** a sub-second timed probe of a
  matmul of the mini ViT's shape confirms bf16 is faster than fp32 here;
  fp32 otherwise. On an AVX2-only CPU a bf16 matmul is emulated and many
  times slower than fp32 (measured 5-40x on AMD EPYC AVX2), so autocast
  there would only slow the run down.

:func:`choose_precision` is the one rule; every caller goes through it. Its
decision for the CPU is made once per process (the probe runs once).
"""
import functools
import time
from typing import NamedTuple, Optional

import torch

#: (tokens, width, 4 x width): one MLP matmul of the main job's mini ViT
#: (a 16-image slice of its 64 + 1 tokens), ~1 ms in fp32 on 2 AVX2 cores
PROBE_SHAPE = (1024, 192, 768)
NOT_ASKED = 'as asked: no --amp'
#: bf16 is taken when its probe time is below this fraction of fp32's
PROBE_MAX_RATIO = 0.8


class Precision(NamedTuple):
    """A decision: ``name`` ('fp32', 'bf16', 'fp16'), the autocast dtype
    (None: fp32, no autocast), the device type, the CPU class, why, and the
    probe's timings when one ran."""
    name: str
    dtype: Optional[torch.dtype]
    device: str
    cpu_class: str
    reason: str
    probe: Optional[dict] = None

    def line(self) -> str:
        """One console line: what runs and why."""
        return f'precision: {self.name} ({self.reason})'

    def to_dict(self) -> dict:
        return dict(
            precision=self.name,
            device=self.device,
            cpu_class=self.cpu_class,
            reason=self.reason,
            probe=self.probe,
            torch=torch.__version__)


def _flag(name: str) -> bool:
    fn = getattr(torch.cpu, name, None)
    try:
        return bool(fn()) if fn is not None else False
    except Exception:  # a private probe that changed or failed
        return False


def cpu_class() -> str:
    """What torch reports of the CPU's vector units: ``'AMX'``,
    ``'AVX512-BF16'``, ``'AVX512'``, ``'AVX2'`` or torch's capability
    string (e.g. ``'DEFAULT'`` on an Arm CPU)."""
    if _flag('_is_amx_tile_supported'):
        return 'AMX'
    if _flag('_is_avx512_bf16_supported'):
        return 'AVX512-BF16'
    return torch.backends.cpu.get_cpu_capability() or '?'


def cpu_bf16_native(cls: Optional[str] = None) -> bool:
    """Whether torch reports native bf16 arithmetic on this CPU."""
    return (cls or cpu_class()) in ('AMX', 'AVX512-BF16')


def time_matmul(a: torch.Tensor, b: torch.Tensor, repeats: int = 3) -> float:
    """Seconds of ``a @ b``: the best of ``repeats`` after a warm-up."""
    a @ b
    best = float('inf')
    for _ in range(repeats):
        t = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - t)
    return best


def probe_bf16(shape=PROBE_SHAPE, repeats: int = 3) -> dict:
    """Time one matmul of ``shape`` (M, K, N) in fp32 and in bf16 (best of
    ``repeats`` after a warm-up); milliseconds and the ratio."""
    m, k, n = shape
    a, b = torch.randn(m, k), torch.randn(k, n)
    out = {}
    for name, dtype in (('fp32_ms', torch.float32), ('bf16_ms',
                                                     torch.bfloat16)):
        out[name] = round(
            time_matmul(a.to(dtype), b.to(dtype), repeats) * 1e3, 3)
    out['bf16_over_fp32'] = round(out['bf16_ms'] / max(out['fp32_ms'], 1e-6),
                                  2)
    out['shape'] = list(shape)
    return out


@functools.lru_cache(maxsize=None)
def _cpu_decision() -> Precision:
    cls = cpu_class()
    if not cpu_bf16_native(cls):
        return Precision(
            'fp32', None, 'cpu', cls,
            f'CPU {cls}: torch reports no native bf16 (neither AVX512-BF16 '
            'nor AMX), where bf16 autocast runs slower than fp32; mixed '
            'precision falls back to fp32')
    probe = probe_bf16()
    if probe['bf16_over_fp32'] <= PROBE_MAX_RATIO:
        return Precision(
            'bf16', torch.bfloat16, 'cpu', cls,
            f'CPU {cls}: native bf16, a probe matmul takes '
            f"{probe['bf16_ms']:.2f} ms in bf16 vs {probe['fp32_ms']:.2f} ms "
            'in fp32: bf16 autocast', probe)
    return Precision(
        'fp32', None, 'cpu', cls,
        f'CPU {cls}: native bf16, but a probe matmul takes '
        f"{probe['bf16_ms']:.2f} ms in bf16 vs {probe['fp32_ms']:.2f} ms in "
        'fp32: no gain; mixed precision falls back to fp32', probe)


def choose_precision(amp: bool, device: Optional[str] = None) -> Precision:
    """The precision a run uses.

    Args:
        amp (bool): Mixed precision asked for (``--amp``, an AMP config).
        device (str, optional): ``'cuda'`` or ``'cpu'``. Defaults to CUDA
            when available.

    Returns:
        Precision: fp32 when ``amp`` is False; with ``amp``, fp16 on CUDA,
        and on a CPU bf16 or fp32 by :func:`cpu_class` and the probe.
    """
    device = device or ('cuda' if torch.cuda.is_available() else 'cpu')
    device = torch.device(device).type
    if device == 'cuda':
        if not amp:
            return Precision('fp32', None, 'cuda', 'GPU', NOT_ASKED)
        return Precision('fp16', torch.float16, 'cuda', 'GPU',
                         'GPU: fp16 autocast with a dynamic loss scale')
    if not amp:
        return Precision('fp32', None, device, cpu_class(), NOT_ASKED)
    return _cpu_decision()
