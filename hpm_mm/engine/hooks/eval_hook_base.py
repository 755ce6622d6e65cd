import os.path as osp

from mmengine.hooks import Hook


class AfterCheckpointEvalHook(Hook):
    """Base of the end-of-epoch evaluation hooks: they run after the
    checkpoint hook, so a failure (re-raised after a line naming the rerun
    command) loses no training; a run stopped during its final evaluation
    and resumed runs it where its result is missing (:meth:`run_final`)."""

    priority = 'LOWEST'
    #: the tool that reruns this evaluation from a config and a checkpoint
    rerun_tool = ''
    #: count ``interval`` in epochs (set by the subclasses)
    by_epoch = True

    @staticmethod
    def at_end(runner) -> bool:
        """Whether the run has nothing left to train."""
        from mmengine.runner import IterBasedTrainLoop
        loop = runner.train_loop
        if isinstance(loop, IterBasedTrainLoop):  # it has max_epochs too
            return runner.iter >= loop.max_iters
        return runner.epoch >= loop.max_epochs

    def before_train(self, runner) -> None:
        self._resumed_at_end = self.at_end(runner)

    def after_train(self, runner) -> None:
        if getattr(self, '_resumed_at_end', False) and \
                not self.final_done(runner):
            runner.logger.warning(
                f'{type(self).__name__}: this run was resumed after its last '
                'epoch without its final evaluation (stopped during it); '
                'running it now.')
            self.run_final(runner)

    def final_done(self, runner) -> bool:
        """Whether the final evaluation's result is on disk."""
        return True

    def run_final(self, runner) -> None:
        """Run the final evaluation of a finished run."""

    def run_evaluation(self, runner, fn, *args):
        try:
            return fn(*args)
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
