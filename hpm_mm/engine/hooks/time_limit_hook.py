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
        minutes (float, optional): The allowance from ``before_train``.
        deadline (float, optional): Its end as a Unix time (exclusive with
            ``minutes``)."""

    priority = 'LOWEST'

    def __init__(self,
                 minutes: Optional[float] = None,
                 deadline: Optional[float] = None) -> None:
        if (minutes is None) == (deadline is None):
            raise ValueError('TimeLimitHook needs one of minutes= (from the '
                             'start of training) or deadline= (a Unix '
                             'time), not both or neither.')
        if minutes is not None and minutes <= 0:
            raise ValueError(f'TimeLimitHook: minutes={minutes} leaves no '
                             'time. Fix: give a positive allowance.')
        self.minutes, self.deadline = minutes, deadline
        self.stopped_at: Optional[int] = None

    def before_train(self, runner) -> None:
        now = time.time()
        if self.minutes is not None:
            self.deadline = now + 60 * self.minutes
        self._start, self._first_epoch = now, runner.epoch
        self.stopped_at = None

    @staticmethod
    def _checkpoint_interval(runner) -> Optional[int]:
        """Epochs between saved checkpoints; None without a by-epoch
        checkpoint hook (then stopping would lose the epochs since the
        last one)."""
        for hook in runner.hooks:
            if isinstance(hook, CheckpointHook) and hook.by_epoch and \
                    hook.interval > 0:
                return hook.interval
        return None

    def after_train_epoch(self, runner) -> None:
        interval = self._checkpoint_interval(runner)
        done = runner.epoch + 1  # this epoch has ended
        if interval is None or (done % interval and done != runner.max_epochs):
            return  # not a checkpointed epoch: stopping here loses work
        if done >= runner.max_epochs:
            return
        now = time.time()
        pace = (now - self._start) / (done - self._first_epoch)
        need = pace * min(interval, runner.max_epochs - done)
        if now + need <= self.deadline:
            return
        runner.train_loop.stop_training = True
        self.stopped_at = done
        runner.logger.warning(
            f'TimeLimitHook: stopped after epoch {done}/{runner.max_epochs}: '
            f'the next {min(interval, runner.max_epochs - done)} epoch(s) '
            f'take ~{need / 60:.1f} min at this run\'s pace '
            f'({pace:.0f} s per epoch) and {(self.deadline - now) / 60:.1f} '
            f'min are left. Its checkpoint is saved; continue it with '
            f'--resume (python tools/train.py CONFIG --work-dir '
            f'{runner.work_dir} --resume).')
