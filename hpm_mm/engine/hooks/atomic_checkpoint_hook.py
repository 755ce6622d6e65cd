import inspect
import os
import os.path as osp

from mmengine.dist import is_main_process
from mmengine.fileio import LocalBackend
from mmengine.hooks import CheckpointHook
from mmengine.registry import HOOKS  # root: every scope finds it

from hpm_mm.engine.log_filter import drop_log_messages
from hpm_mm.engine.work_dir import text_writer, write_outputs
from hpm_mm.errors import HPMError, no_such_key

# mmengine builds a deprecated FileClient in CheckpointHook.before_train and
# in save_checkpoint even when it does not use it ("to avoid breaking
# backward compatibility") and warns about its own deprecation on every run
FILE_CLIENT_DEPRECATION = ('"FileClient" will be deprecated',
                           '"HardDiskBackend" is the alias')


@HOOKS.register_module()
class AtomicCheckpointHook(CheckpointHook):
    """mmengine's :class:`CheckpointHook`, but a kill never loses the last good
    checkpoint: on a local disk the new one is written to ``<name>.tmp`` and
    renamed once complete, ``last_checkpoint`` likewise, and only then are
    old ones removed (mmengine removes first and writes in place). An unknown
    argument (``max_keep_ckpt``) is refused at build with the closest name."""

    def __init__(self, *args, **kwargs) -> None:
        takes = inspect.signature(CheckpointHook.__init__).parameters
        unknown = sorted(set(kwargs) - set(takes))
        if unknown:  # (mmengine passes them on to the first save)
            raise HPMError(
                no_such_key(unknown[0], 'AtomicCheckpointHook', takes,
                            'default_hooks.checkpoint'))
        super().__init__(*args, **kwargs)

    def before_train(self, runner) -> None:
        with drop_log_messages(*FILE_CLIENT_DEPRECATION):
            super().before_train(runner)

    def _save_checkpoint_with_step(self, runner, step, meta):
        if not isinstance(self.file_backend, LocalBackend):
            return super()._save_checkpoint_with_step(runner, step, meta)
        outdated = []
        if self.max_keep_ckpts > 0 and not (self.keep_ckpt_ids and
                                            self.keep_ckpt_ids[-1] == step):
            # (mmengine's deque has maxlen=max_keep_ckpts: make room first)
            while len(self.keep_ckpt_ids) >= self.max_keep_ckpts:
                outdated.append(self.keep_ckpt_ids.popleft())
            self.keep_ckpt_ids.append(step)
            runner.message_hub.update_info('keep_ckpt_ids',
                                           list(self.keep_ckpt_ids))
        name = self.filename_tmpl.format(step)
        self.last_ckpt = osp.join(self.out_dir, name)
        runner.message_hub.update_info('last_ckpt', self.last_ckpt)
        tmp = self.last_ckpt + '.tmp'
        try:
            with drop_log_messages(*FILE_CLIENT_DEPRECATION):
                runner.save_checkpoint(
                    self.out_dir,
                    name + '.tmp',
                    self.file_client_args,
                    save_optimizer=self.save_optimizer,
                    save_param_scheduler=self.save_param_scheduler,
                    meta=meta,
                    by_epoch=self.by_epoch,
                    backend_args=self.backend_args,
                    **self.args)
        except BaseException as e:
            if is_main_process() and osp.isfile(tmp):
                os.remove(tmp)
            if isinstance(e, OSError):  # a full disk, a read-only folder
                raise HPMError(
                    f'cannot write the checkpoint {self.last_ckpt}'
                    f' ({e}). Fix: free space, then --resume.') from None
            raise
        if not is_main_process():
            return
        os.replace(tmp, self.last_ckpt)
        write_outputs({  # (a full disk: one line)
            osp.join(runner.work_dir, 'last_checkpoint'):
            text_writer(self.last_ckpt)
        })
        for old in outdated:
            path = osp.join(self.out_dir, self.filename_tmpl.format(old))
            if osp.isfile(path):
                os.remove(path)
