import os.path as osp

from mmengine.hooks import Hook


class AfterCheckpointEvalHook(Hook):
    """Base of the evaluation hooks that run at the end of an epoch.

    They run after mmengine's :class:`CheckpointHook` (priority ``LOWEST``
    vs its ``VERY_LOW``), so the epoch's checkpoint is on disk before a
    minutes-long evaluation starts: an error or a Ctrl-C in the evaluation
    loses no training. A failure is re-raised after one line that names the
    checkpoint and the command that reruns only this evaluation.
    """

    priority = 'LOWEST'
    #: the tool that reruns this evaluation from a config and a checkpoint
    rerun_tool = ''

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
