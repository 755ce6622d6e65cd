"""Which precision a run computes in: the config key ``precision``, and the
rule that decides ``'auto'`` by timing the run's own step.

``precision = 'auto' | 'fp32' | 'bf16' | 'fp16'`` is one config key
(:func:`precision_key`; ``tools/train.py --amp`` sets ``'auto'``; a config
without it says it through its optimizer wrapper, as before the key
existed: an AMP wrapper is ``'auto'``). :func:`run_precision` reads it, once,
and returns the decision with the ``optim_wrapper`` config that computes it
(:func:`optim_wrapper_cfg`: the guarded wrapper of that precision, AdamW
fused on CUDA); the runner prints and saves the decision, and the kNN
hook and ``knn_eval`` ask :func:`feature_precision`.

Mixed precision (``'auto'``: ``tools/train.py --amp``, the AMP configs,
``knn_eval.py --amp``, the kNN hook of such a run) means:

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
from typing import Callable, NamedTuple, Optional, Tuple, Union

import torch

from hpm_mm.errors import HPMError

NOT_ASKED = 'as asked: no --amp'
#: bf16 is taken where its fastest step is this many times faster or more
MIN_SPEEDUP = 1.2
#: timed steps per precision, at least (after one warm-up step each)
TIMED_STEPS = 3
#: a cached timing older than this is timed again (a machine's load, its
#: torch or its firmware change)
CACHE_DAYS = 30


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


def usable(timing) -> bool:
    """Whether a cached timing can decide: its step times positive and
    finite, its speed-up their ratio (to their rounding), measured within
    :data:`CACHE_DAYS` days (an entry without its date: timed again)."""
    import math
    if not isinstance(timing, dict):
        return False
    values = [timing.get(k) for k in ('fp32_s', 'bf16_s', 'speedup')]
    if not all(
            isinstance(v, (int, float)) and not isinstance(v, bool)
            and math.isfinite(v) and v > 0 for v in values):
        return False
    fp32_s, bf16_s, speedup = values
    # the times are kept to 4 decimals: the ratio of the rounded ones may
    # differ from the speed-up of the exact ones by that rounding, no more
    slack = speedup * (5e-5 / fp32_s + 5e-5 / bf16_s) + 1e-3
    if abs(speedup - fp32_s / bf16_s) > slack:
        return False
    when = timing.get('measured_at')
    return isinstance(when, (int, float)) and \
        0 <= time.time() - when <= CACHE_DAYS * 86400


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
    if usable(timing):
        timing = dict(timing, cached=cache_path())
    else:
        with keep_random_state():  # the run draws what it would have drawn
            timing = time_steps(step)
        timing.update(what=what, measured_at=time.time())
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


# ------------------------------------------------------------ the config key
#: the values of the config key ``precision``
PRECISIONS = ('auto', 'fp32', 'bf16', 'fp16')
#: optimizer wrappers that ask for mixed precision (``'auto'``) in a config
#: without the key (mmpretrain's ``--amp`` names ``AmpOptimWrapper``)
AMP_TYPES = ('AmpOptimWrapper', 'GuardedAmpOptimWrapper')
#: optimizers whose fused CUDA kernel a run takes (one kernel for every
#: parameter's update instead of a multi-tensor loop)
FUSED_OPTIMIZERS = ('AdamW', 'Adam', 'SGD')


def precision_key(cfg) -> str:
    """The run's ``precision``: the config key, or, in a config without it,
    what its ``optim_wrapper`` asks for (an AMP wrapper: ``'auto'``; an
    ``AutocastOptimWrapper``: its dtype; any other: ``'fp32'``).

    Raises:
        HPMError: A value that is not one of :data:`PRECISIONS`.
    """
    value = cfg.get('precision')
    if value is not None:
        if value not in PRECISIONS:
            raise HPMError(
                f'precision={value!r} is not one of {", ".join(PRECISIONS)}. '
                "Fix: precision='auto' (mixed precision where it makes the "
                "run faster, as --amp), or 'fp32', 'bf16', 'fp16' (GPU).")
        return value
    wrapper = cfg.get('optim_wrapper') or {}
    kind = wrapper.get('type') if isinstance(wrapper, dict) else None
    if kind in AMP_TYPES:
        return 'auto'
    if kind == 'AutocastOptimWrapper':
        dtype = str(wrapper.get('dtype', 'bfloat16'))
        return 'fp16' if dtype in ('float16', 'torch.float16') else 'bf16'
    return 'fp32'


def decide(name: str,
           device: Optional[str] = None,
           step: Optional[Callable] = None,
           workload: Optional[str] = None,
           what: str = 'step',
           configured: bool = True) -> Precision:
    """The :class:`Precision` of ``name`` (one of :data:`PRECISIONS`) on
    ``device``: ``'auto'`` by the rule (:func:`choose_precision`, timing
    ``step`` on a CPU), the others as given (``configured``: the key named
    them; else they follow from an optimizer wrapper or no ``--amp``).

    Raises:
        HPMError: ``'fp16'`` without CUDA.
    """
    device = torch.device(
        device or ('cuda' if torch.cuda.is_available() else 'cpu')).type
    if name == 'auto':
        return choose_precision(True, device, step, workload, what)
    if name == 'fp32':
        base = choose_precision(False, device)
        return base._replace(
            reason="as configured: precision='fp32'") if configured else base
    cls = 'GPU' if device == 'cuda' else cpu_class()
    if name == 'fp16' and device != 'cuda':
        raise HPMError(
            "precision='fp16' computes with a dynamic loss scale on a GPU, "
            "and this machine has none. Fix: precision='auto' (bf16 where "
            "it makes the run faster) or precision='bf16'.")
    why = f"as configured: precision='{name}'" if configured else \
        f'as configured: {name} autocast'
    if name == 'fp16':
        why += ' (fp16 autocast with a dynamic loss scale)'
    return Precision(
        name, getattr(torch, {
            'bf16': 'bfloat16',
            'fp16': 'float16'
        }[name]), device, cls, why)


def optim_wrapper_cfg(optim_wrapper: dict,
                      precision: Precision,
                      fused: Optional[bool] = None) -> dict:
    """The ``optim_wrapper`` config that computes ``precision``: the one
    place that writes it.

    - ``'fp16'`` (CUDA): :class:`GuardedAmpOptimWrapper` with a dynamic loss
      scale (kept as configured if it already is an AMP wrapper);
    - ``'bf16'``: :class:`AutocastOptimWrapper` (the config's own
      ``AutocastOptimWrapper`` kept as it is);
    - ``'fp32'``: the config's wrapper without autocast, an AMP or autocast
      one becoming :class:`GuardedOptimWrapper`.

    All keep the non-finite guard. On CUDA the optimizer (AdamW, Adam, SGD)
    takes torch's fused kernel unless the config sets ``fused`` or
    ``foreach`` itself (it works with the loss scale, which it reads on the
    device, and with the guard, which skips before it runs); on a CPU
    fused AdamW was not measured faster and is left to the config.

    Args:
        optim_wrapper (dict): The config's ``optim_wrapper``.
        precision (Precision): The decision (:func:`decide`).
        fused (bool, optional): Force the fused optimizer on or off.
            Defaults to None: on CUDA.

    Returns:
        dict: A new config dict.
    """
    cfg = dict(optim_wrapper)
    kind = cfg.get('type')
    if precision.name == 'fp16':
        if kind not in AMP_TYPES:
            cfg.pop('dtype', None)
            cfg.update(type='GuardedAmpOptimWrapper', loss_scale='dynamic')
    elif precision.name == 'bf16' and kind == 'AutocastOptimWrapper':
        pass  # the config's own choice
    else:
        for key in ('loss_scale', 'use_fsdp', 'dtype'):
            cfg.pop(key, None)
        if precision.name == 'bf16':
            cfg.update(type='AutocastOptimWrapper', dtype='bfloat16')
        elif kind in AMP_TYPES + ('AutocastOptimWrapper', ):
            cfg.update(type='GuardedOptimWrapper')
    if fused is None:
        fused = precision.device == 'cuda'
    optimizer = cfg.get('optimizer')
    if fused and isinstance(optimizer, dict) and \
            str(optimizer.get('type')).split('.')[-1] in FUSED_OPTIMIZERS \
            and 'fused' not in optimizer and 'foreach' not in optimizer:
        cfg['optimizer'] = dict(optimizer, fused=True)
    return cfg


def run_precision(
    cfg,
    device: Optional[str] = None
) -> Tuple[Optional[Precision], Optional[dict]]:
    """The run's precision as far as the config decides it, and the
    ``optim_wrapper`` config that computes it (:func:`optim_wrapper_cfg`).

    ``'auto'`` on a CPU waits for the run's own step: ``(None, None)`` is
    returned, and the runner times its step when training starts
    (:func:`timed_train_step`, :func:`decide`).

    Args:
        cfg (dict | Config): The run's config (``precision``,
            ``optim_wrapper``).
        device (str, optional): Defaults to CUDA when available.
    """
    device = torch.device(
        device or ('cuda' if torch.cuda.is_available() else 'cpu')).type
    name = precision_key(cfg)
    if name == 'auto' and device != 'cuda':
        return None, None
    precision = decide(
        name, device, configured=cfg.get('precision') is not None)
    wrapper = cfg.get('optim_wrapper')
    if not isinstance(wrapper, dict):
        return precision, wrapper
    return precision, optim_wrapper_cfg(wrapper, precision)


# --------------------------------------------------------- the timed steps
def timed_train_step(model,
                     dataloader: dict,
                     optim_wrapper: dict,
                     model_cfg=None) -> Tuple[Callable, str]:
    """``step(dtype)``: one real training step of a copy of ``model`` on
    the first batch of ``dataloader`` (unshuffled, no workers), through an
    optimizer wrapper of that precision (fp32 for None, bf16 autocast), at
    the end of a mask schedule (HPM's ``set_progress(1)``: the teacher
    scores, as in every step once it mines a patch);
    and the workload's description for the timing cache. The run's model,
    data order and random numbers are left as they were.

    Args:
        model (nn.Module | dict): The run's model (wrapped or not), or its
            config (``FlexibleRunner`` builds it later).
        dataloader (dict): The run's ``train_dataloader`` config.
        optim_wrapper (dict): The run's ``optim_wrapper`` config; its
            optimizer is built on the copy (parameter-wise options left out:
            they change values, not the work).
        model_cfg (dict, optional): The model's config, for the cache key.
    """
    import copy

    import torch.nn as nn
    from mmengine.optim import build_optim_wrapper
    from mmengine.registry import MODELS
    from mmengine.runner import Runner
    from mmpretrain.utils import get_ori_model

    with keep_random_state():
        if isinstance(model, nn.Module):
            model = copy.deepcopy(get_ori_model(model))
        else:
            model = MODELS.build(copy.deepcopy(model))
        model.train()
        if hasattr(model, 'set_progress'):  # HPM: the teacher on, as it
            model.set_progress(1.0, epoch=1, max_epochs=1)  # is from K >= 1
        loader = copy.deepcopy(dict(dataloader))
        sampler = dict(loader.get('sampler') or dict(type='DefaultSampler'))
        loader.update(
            num_workers=0,
            persistent_workers=False,
            sampler=dict(sampler, shuffle=False, seed=0))
        batch = next(iter(Runner.build_dataloader(loader, seed=0)))
    base = {
        k: v
        for k, v in dict(optim_wrapper).items()
        if k not in ('constructor', 'paramwise_cfg')
    }
    wrappers = {}

    def step(dtype):
        if dtype not in wrappers:
            name = 'fp32' if dtype is None else 'bf16'
            cfg = optim_wrapper_cfg(base, Precision(name, dtype, 'cpu', '',
                                                    ''))
            wrappers[dtype] = build_optim_wrapper(model, cfg)
        model.train_step(batch, wrappers[dtype])

    inputs = batch.get('inputs') if isinstance(batch, dict) else batch
    workload = json.dumps(
        dict(
            step='train_step',
            model=type(model).__name__,
            model_cfg=model_cfg,
            inputs=shapes(inputs),
            optimizer=str(base.get('optimizer'))),
        sort_keys=True,
        default=str)
    return step, workload


def feature_precision(
        model,
        dataloader,
        precision: Union[str, bool, Precision] = 'auto') -> Precision:
    """The precision of a feature pass (kNN, the linear probe's features):
    ``precision`` one of :data:`PRECISIONS` (``'auto'``: fp16 on CUDA; on a
    CPU the model's forward on the first batch of ``dataloader`` is timed
    in fp32 and under bf16 autocast, and bf16 is taken where it is clearly
    faster); ``True``/``False``: ``'auto'``/``'fp32'`` (``--amp``); a
    :class:`Precision` (a run's own, the kNN hook's) is returned as it
    is."""
    if isinstance(precision, Precision):
        return precision
    asked = not isinstance(precision, bool)
    if not asked:  # amp=True/False of the tools
        precision = 'auto' if precision else 'fp32'
    from hpm_mm.evaluation import model_device
    device = model_device(model)
    if precision != 'auto' or device != 'cpu':
        return decide(precision, device, configured=asked)
    was_training = model.training
    model.eval()
    with keep_random_state():
        data = model.data_preprocessor(next(iter(dataloader)), False)

    @torch.no_grad()
    def step(dtype):
        with torch.autocast(
                device, enabled=dtype is not None, dtype=dtype
                or torch.bfloat16):
            model.extract_feat(data['inputs'])

    workload = json.dumps(
        dict(
            step='extract_feat',
            model=type(model).__name__,
            params=sum(p.numel() for p in model.parameters()),
            inputs=shapes(data['inputs'])),
        sort_keys=True)
    try:
        return choose_precision(
            True, device, step, workload, what='feature batch')
    finally:
        if was_training:
            model.train()
