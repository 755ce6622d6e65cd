import os.path as osp

from mmengine.hooks import Hook


class AfterCheckpointEvalHook(Hook):
    """Base of the end-of-epoch evaluation hooks: :meth:`evaluate` runs every
    ``interval`` epochs (or iterations, ``by_epoch=False``; 0: only at the
    end) and after the last, after the checkpoint hook, so a failure
    (re-raised after a line naming the rerun command) loses no training; a
    run stopped during its final evaluation and resumed runs it where its
    result is missing (:meth:`final_done`)."""

    priority = 'LOWEST'
    #: the tool that reruns this evaluation from a config and a checkpoint
    rerun_tool = ''
    #: set by the subclasses' constructors
    interval, by_epoch = 0, True

    @staticmethod
    def at_end(runner) -> bool:
        """Whether the run has nothing left to train."""
        from mmengine.runner import IterBasedTrainLoop
        loop = runner.train_loop
        if isinstance(loop, IterBasedTrainLoop):  # it has max_epochs too
            return runner.iter >= loop.max_iters
        return runner.epoch >= loop.max_epochs

    def evaluate(self, runner, tag: str):
        """Evaluate the model now (``tag``: ``epoch_N`` or ``iter_N``)."""
        raise NotImplementedError

    def final_done(self, runner) -> bool:
        """Whether the final evaluation's result is on disk."""
        return True

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
                f'{type(self).__name__}: this run was resumed after its last '
                'epoch without its final evaluation (stopped during it); '
                'running it now.')
            self.run_evaluation(runner, self.final_tag(runner))

    def after_train_epoch(self, runner) -> None:
        if self.by_epoch:  # (the loop counts the epoch after this hook)
            self._evaluate_if_due(runner, runner.epoch + 1, runner.max_epochs,
                                  'epoch')

    def after_train_iter(self,
                         runner,
                         batch_idx,
                         data_batch=None,
                         outputs=None) -> None:
        if not self.by_epoch:
            self._evaluate_if_due(runner, runner.iter + 1, runner.max_iters,
                                  'iter')

    def _evaluate_if_due(self, runner, done: int, end: int, unit: str):
        if done >= end or (self.interval > 0 and done % self.interval == 0):
            self.run_evaluation(runner, f'{unit}_{done}')

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
