import time
from typing import Sequence

from mmengine.hooks import Hook
from mmengine.runner import IterBasedTrainLoop
from mmpretrain.registry import HOOKS

#: the logged scalars the line shows by default
KEYS = ('loss_cls', 'loss_rec', 'loss_pred', 'rank_acc', 'alpha')


def _duration(seconds: float) -> str:
    m, s = divmod(int(round(seconds)), 60)
    return f'{m}m{s:02d}s' if m else f'{s}s'


@HOOKS.register_module()
class ConsoleProgressHook(Hook):
    """One console line per epoch for a quiet console (``--quiet``): the
    epoch's mean of ``keys`` (``train/<key>``, when logged) and the time left
    (iteration loops: every ``max_iters // 10`` iterations)::

        epoch  3/10  loss_rec 0.5301  rank_acc 0.7074  alpha 0.100  |
        42s/epoch

    Args:
        keys (Sequence[str]): the logged scalars (``train/<key>``) the line
            shows, each when logged. Defaults to the losses, ``rank_acc`` and
            ``alpha``.
    """

    priority = 'LOW'

    def __init__(self, keys: Sequence[str] = KEYS) -> None:
        self.keys = tuple(keys)

    def before_train(self, runner) -> None:
        self._start, self._start_iter = time.time(), runner.iter

    def _print(self, runner, head: str, window: int, done: int) -> None:
        """Log the line after ``done`` iterations (all of them, this run) as
        a console record: a quiet console (HPMRunner, console='quiet') shows
        it bare; the log file keeps it too."""
        parts = [head]
        for key in self.keys:
            buf = runner.message_hub.log_scalars.get(f'train/{key}')
            if buf is not None:
                parts.append(f'{key} {buf.mean(max(window, 1)):.4g}')
        spent = time.time() - self._start
        run = max(done - self._start_iter, 1)
        left = spent / run * max(runner.max_iters - done, 0)
        parts.append(f'|  {_duration(spent)} spent, ~{_duration(left)} left')
        runner.logger.info('  '.join(parts), extra=dict(console=True))

    def after_train_epoch(self, runner) -> None:
        if isinstance(runner.train_loop, IterBasedTrainLoop):
            return  # (it calls this once, at its end)
        width = len(str(runner.max_epochs))
        # mmengine has counted the epoch's iterations (runner.iter) but not
        # the epoch itself (runner.epoch) when after_train_epoch runs
        self._print(runner,
                    f'epoch {runner.epoch + 1:>{width}}/{runner.max_epochs}',
                    len(runner.train_dataloader), runner.iter)

    def after_train_iter(self,
                         runner,
                         batch_idx,
                         data_batch=None,
                         outputs=None) -> None:
        done, every = runner.iter + 1, max(runner.max_iters // 10, 1)
        due = done % every == 0 or done == runner.max_iters
        if due and isinstance(runner.train_loop, IterBasedTrainLoop):
            self._print(runner, f'iter {done}/{runner.max_iters}', every, done)
