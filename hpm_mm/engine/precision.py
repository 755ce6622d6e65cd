"""Which precision a run computes in, decided by timing the run's own step.

Mixed precision (``tools/train.py --amp``, the AMP configs, ``knn_eval.py
--amp``, the kNN hook of such a run) means:

- on CUDA: fp16 with a dynamic loss scale (:class:`GuardedAmpOptimWrapper`);
- on a CPU: bf16 autocast **where it makes the work itself clearly
  faster**. The caller's real step (a training run: its model's
  ``train_step`` on a batch of its own data, on a copy of the model; a
  feature pass: the model's forward on the first batch) is timed in fp32
  and under bf16 autocast, alternating (:func:`time_steps`), and bf16 is
  taken where its fastest step is at least :data:`MIN_SPEEDUP` times
  faster than fp32's; otherwise fp32. The answer depends on the model and
  the CPU: with AVX512-BF16, bf16 made the main job's mini-ViT step ~1.3x
  faster and a ViT-B step ~2.3x; on an AVX2-only CPU, where bf16 is
  emulated, the main job's step is ~16x *slower* (docs/speed.md).

What bf16 does to HPM's numbers is measured apart (docs/speed.md, "bf16 and
accuracy"): the losses run in fp32 whatever the autocast, and the teacher's
scores, computed in the autocast dtype, are ranked (top-K) in fp32.

The timings are kept per machine (CPU name and class, threads, torch) and
workload (model, batch shape) in a small json cache (``$HPM_CACHE_DIR``,
default ``~/.cache/hpm_mm/precision.json``), so a second run of the same
model on the same machine does not time again. The decision, the step
times and the speed-up are a console line and ``WORK_DIR/precision.json``.

:func:`choose_precision` is the one rule; every caller goes through it.
"""
import hashlib
import json
import os
import os.path as osp
import platform
import time
from contextlib import contextmanager
from typing import Callable, NamedTuple, Optional

import torch

NOT_ASKED = 'as asked: no --amp'
#: bf16 is taken where its fastest step is this many times faster or more
MIN_SPEEDUP = 1.2
#: timed steps per precision, at least (after one warm-up step each)
TIMED_STEPS = 3


class Precision(NamedTuple):
    """A decision: ``name`` ('fp32', 'bf16', 'fp16'), the autocast dtype
    (None: fp32, no autocast), the device type, the CPU class, why, and the
    step timing it rests on (None where nothing was timed)."""
    name: str
    dtype: Optional[torch.dtype]
    device: str
    cpu_class: str
    reason: str
    timing: Optional[dict] = None

    def line(self) -> str:
        """One console line: what runs and why."""
        return f'precision: {self.name} ({self.reason})'

    def to_dict(self) -> dict:
        return dict(
            precision=self.name,
            device=self.device,
            cpu_class=self.cpu_class,
            reason=self.reason,
            timing=self.timing,
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


def cpu_name() -> str:
    """The CPU's model name (``/proc/cpuinfo``), else the platform's."""
    try:
        with open('/proc/cpuinfo') as f:
            for line in f:
                if line.startswith('model name'):
                    return line.split(':', 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def time_steps(step: Callable[[Optional[torch.dtype]], object],
               steps: int = TIMED_STEPS,
               warmup: int = 1,
               min_seconds: float = 1.0,
               max_steps: int = 20) -> dict:
    """Time ``step(dtype)`` in fp32 (``dtype=None``) and in bf16.

    After ``warmup`` untimed steps of each, the two alternate (an fp32 step,
    then a bf16 step), so a load that comes and goes on the machine falls on
    both alike: at least ``steps`` pairs, more while they have taken less
    than ``min_seconds`` (short steps are noisy), at most ``max_steps``. A
    first bf16 step twice as slow as its fp32 partner ends it: bf16 cannot
    be clearly faster, and on a CPU that emulates bf16 each of its steps
    costs many fp32 ones.

    Returns:
        dict: ``fp32_s`` and ``bf16_s`` (the fastest step of each, in
        seconds: a busy machine only adds time), ``speedup`` (fp32 / bf16),
        and the timed steps of each.
    """
    with _silent():
        for dtype in (None, torch.bfloat16):
            for _ in range(warmup):
                step(dtype)
        times = dict(fp32=[], bf16=[])
        while len(times['fp32']) < max_steps:
            for name, dtype in (('fp32', None), ('bf16', torch.bfloat16)):
                start = time.perf_counter()
                step(dtype)
                times[name].append(time.perf_counter() - start)
            if len(times['bf16']) == 1 and \
                    times['bf16'][0] >= 2 * times['fp32'][0]:
                break
            if len(times['fp32']) >= steps and \
                    sum(times['fp32'] + times['bf16']) >= min_seconds:
                break
    # the fastest step of each: what the step costs where nothing else
    # runs (a busy machine only ever adds to a step's time)
    out = {f'{k}_s': round(min(v), 4) for k, v in times.items()}
    out['speedup'] = round(
        min(times['fp32']) / max(min(times['bf16']), 1e-9), 3)
    out.update({
        f'{k}_steps': [round(t, 4) for t in v]
        for k, v in times.items()
    })
    return out


@contextmanager
def _silent():
    """The timed steps' warnings and log records are the copy's, not the
    run's: they are dropped."""
    import logging
    import warnings
    logging.disable(logging.WARNING)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter('ignore')
            yield
    finally:
        logging.disable(logging.NOTSET)


@contextmanager
def keep_random_state():
    """Restore Python's, NumPy's and torch's (CPU) random state on exit:
    what runs inside (a timed step, a batch drawn for it) leaves the run's
    random numbers as they would have been."""
    import random

    import numpy as np
    state = random.getstate(), np.random.get_state()
    with torch.random.fork_rng(devices=[]):
        try:
            yield
        finally:
            random.setstate(state[0])
            np.random.set_state(state[1])


def shapes(x):
    """The tensor shapes in a batch's inputs (for a workload's key)."""
    if hasattr(x, 'shape'):
        return list(x.shape)
    if isinstance(x, (list, tuple)):
        return [shapes(v) for v in x[:4]] + ([len(x)] if len(x) > 4 else [])
    if isinstance(x, dict):
        return {k: shapes(v) for k, v in x.items()}
    return type(x).__name__


def cache_path() -> str:
    """Where measured step timings are kept (``$HPM_CACHE_DIR``)."""
    root = os.environ.get('HPM_CACHE_DIR') or osp.join(
        os.environ.get('XDG_CACHE_HOME') or osp.expanduser('~/.cache'),
        'hpm_mm')
    return osp.join(root, 'precision.json')


def cache_key(workload: str) -> str:
    """The cache's key: the machine (CPU name and class, threads, torch)
    and the caller's description of the workload (model, batch shape)."""
    text = json.dumps([
        cpu_name(),
        cpu_class(),
        torch.get_num_threads(), torch.__version__, workload
    ])
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def _read_cache() -> dict:
    try:
        with open(cache_path()) as f:
            data = json.load(f)
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):  # none yet, or unreadable: time again
        return {}


def _write_cache(key: str, timing: dict) -> None:
    path = cache_path()
    try:
        os.makedirs(osp.dirname(path), exist_ok=True)
        data = _read_cache()
        data[key] = timing
        tmp = f'{path}.{os.getpid()}.tmp'
        with open(tmp, 'w') as f:
            json.dump(data, f, indent=1)
        os.replace(tmp, path)
    except OSError:  # a read-only home: the timing is only not kept
        pass


def _ms(seconds: float) -> str:
    return f'{seconds * 1e3:.0f} ms' if seconds >= 0.01 else \
        f'{seconds * 1e3:.2f} ms'


def choose_precision(amp: bool,
                     device: Optional[str] = None,
                     step: Optional[Callable] = None,
                     workload: Optional[str] = None,
                     what: str = 'step') -> Precision:
    """The precision a run (or a feature pass) uses.

    Args:
        amp (bool): Mixed precision asked for (``--amp``, an AMP config).
        device (str, optional): ``'cuda'`` or ``'cpu'``. Defaults to CUDA
            when available.
        step (callable, optional): ``step(dtype)`` runs one real step of
            the work in fp32 (``dtype=None``) or under autocast of
            ``dtype``; on a CPU, mixed precision is decided by timing it
            (:func:`time_steps`). Without one, a CPU runs fp32.
        workload (str, optional): Describes the step (model, batch shape)
            for the timing cache; without it nothing is cached.
        what (str): What the step is, for the console line.

    Returns:
        Precision: fp32 when ``amp`` is False; with ``amp``, fp16 on CUDA,
        and on a CPU bf16 where its timed step is at least
        :data:`MIN_SPEEDUP` times faster than fp32's, else fp32.
    """
    device = device or ('cuda' if torch.cuda.is_available() else 'cpu')
    device = torch.device(device).type
    if device == 'cuda':
        if not amp:
            return Precision('fp32', None, 'cuda', 'GPU', NOT_ASKED)
        return Precision('fp16', torch.float16, 'cuda', 'GPU',
                         'GPU: fp16 autocast with a dynamic loss scale')
    cls = cpu_class()
    if not amp:
        return Precision('fp32', None, device, cls, NOT_ASKED)
    if step is None:
        return Precision(
            'fp32', None, device, cls,
            f'CPU {cls}: mixed precision is chosen by timing the work it '
            'would speed up, and none was given to time: fp32')
    key = cache_key(workload) if workload else None
    timing = _read_cache().get(key) if key else None
    if isinstance(timing, dict) and all(
            isinstance(timing.get(k), (int, float))
            for k in ('fp32_s', 'bf16_s', 'speedup')):
        timing = dict(timing, cached=cache_path())
    else:
        with keep_random_state():  # the run draws what it would have drawn
            timing = time_steps(step)
        timing['what'] = what
        if key:
            _write_cache(key, timing)
    fp32_s, bf16_s, speedup = (timing['fp32_s'], timing['bf16_s'],
                               timing['speedup'])
    earlier = ', timed earlier on this machine' if 'cached' in timing else ''
    measured = (f'CPU {cls}: a {what} takes {_ms(bf16_s)} in bf16 vs '
                f'{_ms(fp32_s)} in fp32 ({speedup:.2f}x{earlier})')
    if speedup >= MIN_SPEEDUP:
        return Precision('bf16', torch.bfloat16, device, cls,
                         f'{measured}: bf16 autocast', timing)
    return Precision(
        'fp32', None, device, cls,
        f'{measured}, under the {MIN_SPEEDUP}x taken as clearly faster: fp32',
        timing)
