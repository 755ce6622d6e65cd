import time
from typing import Optional

from mmengine.hooks import CheckpointHook, Hook
from mmpretrain.registry import HOOKS


@HOOKS.register_module()
class TimeLimitHook(Hook):
    """Stop training cleanly at the last checkpointed epoch that fits a time
    limit (a preemptible job): after each checkpointed epoch, if the next ones
    do not fit at this run's pace, the loop stops after this epoch, its hooks
    done; ``--resume`` continues. Runs last (``LOWEST``).

    Args:
        minutes (float): The allowance from ``before_train``."""

    priority = 'LOWEST'

    def __init__(self, minutes: Optional[float] = None) -> None:
        if not isinstance(minutes, (int, float)) or minutes <= 0:
            raise ValueError(f'TimeLimitHook(minutes={minutes!r}): give '
                             'minutes > 0.')
        self.minutes = minutes
        self.stopped_at: Optional[int] = None

    def before_train(self, runner) -> None:
        now = time.time()
        self.deadline = now + 60 * self.minutes
        self._start, self._first_epoch = now, runner.epoch
        self.stopped_at = None

    def after_train_epoch(self, runner) -> None:
        saves = [  # epochs between two checkpoints
            h.interval for h in runner.hooks
            if isinstance(h, CheckpointHook) and h.by_epoch and h.interval > 0
        ]
        done = runner.epoch + 1  # this epoch has ended
        if not saves or done % saves[0] or done >= runner.max_epochs:
            return  # the last epoch, or unsaved: stopping would lose it
        now = time.time()
        pace = (now - self._start) / (done - self._first_epoch)
        epochs = min(saves[0], runner.max_epochs - done)  # to the next save
        if now + pace * epochs <= self.deadline:
            return
        runner.train_loop.stop_training = True
        self.stopped_at = done
        runner.logger.warning(
            f'TimeLimitHook: stopped after epoch {done}/{runner.max_epochs} '
            f'(saved): {epochs} more epoch(s) take ~{pace * epochs / 60:.1f} '
            f'min, {(self.deadline - now) / 60:.1f} min are left. Continue: '
            f'tools/train.py CONFIG --work-dir {runner.work_dir} --resume')
