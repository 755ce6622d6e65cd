"""One rule that scales a pretraining recipe to the length of a run.

Used wherever a run of another length than its config's is made: the
small-scale study (``.dev_scripts/fmnist_study/``) and the own-images
command (``tools/pretrain_folder.py``).
"""
import math
from typing import Tuple

from hpm_mm.errors import HPMError

#: warm-up: this fraction of the epochs, at least one (the main job's 1 of
#: 10), chained with the cosine
WARMUP_FRACTION = 0.05
#: the EMA teacher lags this fraction of the run's steps behind the student,
#: from the start of the run to its end (momentum = 1 / lag in mmengine's
#: convention), at most a momentum of 0.5 in very short runs
TEACHER_LAG = (0.025, 0.1)


def warmup_epochs(epochs: int) -> int:
    """Warm-up epochs of an ``epochs``-epoch run (0 for a single epoch)."""
    return 0 if epochs < 2 else max(1, round(WARMUP_FRACTION * epochs))


def teacher_momentum(steps: int) -> Tuple[float, float]:
    """(start, end) EMA momentum of a run of ``steps`` optimizer steps: the
    teacher lags 2.5% -> 10% of the run. At the main job's 400 steps this is
    its 0.1 -> 0.025; at 23,500 steps (100 epochs of 60k images) 1.7e-3 ->
    4.3e-4, near the authors' ImageNet 1e-3 -> 1e-4."""
    return tuple(min(.5, 1 / (lag * max(steps, 1))) for lag in TEACHER_LAG)


def scale_recipe(cfg, epochs: int, steps_per_epoch: int):
    """The Fashion-MNIST recipe (``LinearLR`` warm-up then a cosine over the
    run, by epoch, as iterations) for ``epochs`` epochs of ``steps_per_epoch``
    steps, in place: ``train_cfg.max_epochs``, the schedulers, the teacher's
    momentum ramp (:func:`teacher_momentum`)."""
    if epochs < 1 or steps_per_epoch < 1:
        raise ValueError(f'a run needs epochs >= 1 and steps per epoch >= 1, '
                         f'got {epochs} and {steps_per_epoch}.')
    kinds = [s.get('type') for s in cfg.param_scheduler]
    if kinds != ['LinearLR', 'CosineAnnealingLR']:
        raise ValueError(f'scale_recipe scales [LinearLR, '
                         f'CosineAnnealingLR], not {kinds}.')
    warm, cosine = (dict(s) for s in cfg.param_scheduler)
    w, span = warmup_epochs(epochs), dict(
        begin=0, by_epoch=True, convert_to_iter_based=True)
    cosine.update(span, end=epochs, T_max=epochs)
    warm.update(span, end=w)
    cfg.param_scheduler = [warm, cosine] if w else [cosine]
    cfg.train_cfg.max_epochs = epochs
    teacher = cfg.model.get('teacher')
    if teacher is not None:
        start, end = teacher_momentum(epochs * steps_per_epoch)
        teacher.update(
            momentum=float(f'{start:.4g}'),
            end_momentum=float(f'{end:.4g}'),
            momentum_epochs=epochs)
    return cfg


def steps_per_epoch(num_images: int,
                    batch_size: int,
                    drop_last: bool = False) -> int:
    """Optimizer steps in one epoch of ``num_images`` at ``batch_size``."""
    return num_images // batch_size if drop_last else math.ceil(num_images /
                                                                batch_size)


def check_run_length(cfg) -> None:
    """Refuse, in one line, parts that disagree on the run's length: a
    scheduler ending after the run or a last one before it, a teacher ramp
    longer than the run (schedulers without ``end`` and
    ``momentum_epochs=None`` follow the run)."""
    train_cfg = cfg.get('train_cfg') or {}
    by_epoch = 'max_epochs' in train_cfg
    length = train_cfg.get('max_epochs', train_cfg.get('max_iters'))
    if length is None:
        return
    unit, key = ('epoch', 'max_epochs') if by_epoch else \
        ('iteration', 'max_iters')
    if isinstance(length, bool) or not isinstance(length, int) or length < 1:
        raise HPMError(f'train_cfg.{key}={length!r}: a run of no {unit}s '
                       f'trains nothing. Fix: train_cfg.{key}=N >= 1.')
    schedulers = cfg.get('param_scheduler') or []
    schedulers = [schedulers] if isinstance(schedulers, dict) else schedulers
    ends = [
        s.get('end') if s.get('by_epoch', True) == by_epoch else None
        for s in schedulers
    ]
    bad = [i for i, e in enumerate(ends) if e is not None and e > length]
    if not bad and ends and None not in ends and max(ends) < length:
        bad = [ends.index(max(ends))]  # the last ends before the run
    if bad:
        i = bad[0]
        raise HPMError(
            f'param_scheduler.{i} ({schedulers[i].get("type")}) ends at '
            f'{unit} {ends[i]} but the run has train_cfg.{key}={length}. Fix: '
            f'param_scheduler.{i}.end={length} (and T_max), or no end.')
    model = cfg.get('model')  # (a built model has no teacher ramp to check)
    teacher = model.get('teacher') or {} if isinstance(model, dict) else {}
    ramp = teacher.get('momentum_epochs')
    if by_epoch and ramp is not None and ramp > length:
        raise HPMError(f'model.teacher.momentum_epochs={ramp} is longer than'
                       f' the run. Fix: model.teacher.momentum_epochs=None.')
