import os.path as osp

from mmengine.hooks import Hook
from mmengine.runner import IterBasedTrainLoop


class AfterCheckpointEvalHook(Hook):
    """Base of the end-of-epoch evaluation hooks: :meth:`evaluate` runs every
    ``interval`` epochs (or iterations, ``by_epoch=False``; 0: only at the
    end) and after the last, after the checkpoint hook, so a failure
    (re-raised after a line naming the rerun command) loses no training; a
    run stopped during its final evaluation and resumed runs it where its
    result is missing. A subclass gives :meth:`evaluate` (``runner``, the
    tag ``epoch_N`` or ``iter_N``), ``final_done`` (whether the final
    evaluation's result is on disk), ``interval``, ``by_epoch`` and
    ``rerun_tool`` (the tool that reruns the evaluation from a config and a
    checkpoint)."""

    priority = 'LOWEST'

    @staticmethod
    def at_end(runner) -> bool:
        """Whether the run has nothing left to train."""
        loop = runner.train_loop  # (an iteration loop has max_epochs too)
        return runner.iter >= loop.max_iters if isinstance(
            loop, IterBasedTrainLoop) else runner.epoch >= loop.max_epochs

    def final_tag(self, runner) -> str:
        """The tag of a finished run's final evaluation."""
        return f'epoch_{runner.epoch}' if self.by_epoch else \
            f'iter_{runner.iter}'

    def before_train(self, runner) -> None:
        self._resumed_at_end = self.at_end(runner)

    def after_train(self, runner) -> None:
        if getattr(self, '_resumed_at_end', False) and \
                not self.final_done(runner):
            runner.logger.warning(
                f'{type(self).__name__}: resumed after its last epoch without '
                'its final evaluation; running it now.')
            self.run_evaluation(runner, self.final_tag(runner))

    def after_train_epoch(self, runner) -> None:
        if self.by_epoch and (self.every_n_epochs(runner, self.interval)
                              or self.is_last_train_epoch(runner)):
            # (the loop counts the epoch after this hook)
            self.run_evaluation(runner, f'epoch_{runner.epoch + 1}')

    def after_train_iter(self,
                         runner,
                         batch_idx,
                         data_batch=None,
                         outputs=None) -> None:
        if not self.by_epoch and (self.every_n_train_iters(
                runner, self.interval) or self.is_last_train_iter(runner)):
            self.run_evaluation(runner, f'iter_{runner.iter + 1}')

    def run_evaluation(self, runner, tag: str):
        """:meth:`evaluate`, a failure named with the command that reruns
        it from the saved checkpoint."""
        try:
            return self.evaluate(runner, tag)
        except Exception as e:
            last = osp.join(runner.work_dir, 'last_checkpoint')
            ckpt = open(last).read().strip() if osp.exists(last) else \
                '<checkpoint>'
            cfg = getattr(runner.cfg, 'filename', None) or '<config>'
            runner.logger.error(
                f'{type(self).__name__} failed ({type(e).__name__}: {e}); '
                f'training is saved in {ckpt}. Rerun only this evaluation: '
                f'python {self.rerun_tool} {cfg} {ckpt}')
            raise
