from mmengine.hooks import Hook
from mmengine.registry import HOOKS  # root: every scope finds it

from ..checkpoint_migrations import as_this_config, merge_saved
from ..run_signature import changed_run


@HOOKS.register_module()
class ResumeHook(Hook):
    """The resume room's hook (:class:`~hpm_mm.engine.resume.RunResume`),
    which hpm_mm's runner registers by name for a training run (it is not a
    config's hook): every checkpoint's ``meta['hpm_run']`` stamped in
    ``before_save_checkpoint``; a resumed run's state beyond mmengine's
    resume restored in ``after_load_checkpoint`` (both runners call it once
    the checkpoint is read, before they load its optimizer and schedulers):
    the optimizer's groups merged as this run builds them
    (:func:`merge_saved`); the non-finite guard's step counts; a changed
    number of iterations per epoch (or, without a run signature, changed
    scheduler ends) refused, and with the config's ``resume_changed_run``
    the checkpoint continued as this config's run (:func:`as_this_config`).

    Args:
        room (RunResume): The run's resume room.
    """

    priority = 'VERY_HIGH'

    def __init__(self, room) -> None:
        self.room = room

    def before_save_checkpoint(self, runner, checkpoint: dict) -> None:
        checkpoint['meta']['hpm_run'] = self.room.meta(
            len(runner.train_dataloader), runner.optim_wrapper)

    def after_load_checkpoint(self, runner, checkpoint: dict) -> None:
        if not self.room.resume:  # (a load_from: the checkpoint's weights)
            return
        path, allowed = runner.cfg.load_from, runner.cfg.get(
            'resume_changed_run', False)
        wrapper = runner.optim_wrapper  # (built: both runners' train)
        line = hasattr(wrapper, 'optimizer') and merge_saved(
            checkpoint, wrapper.optimizer)
        if line:
            runner.logger.info(line)
        run = checkpoint['meta'].get('hpm_run')
        if hasattr(wrapper, 'restore_step_counts'):
            wrapper.restore_step_counts(run or {})
        schedulers = runner.param_schedulers or []
        if isinstance(schedulers, dict):  # per optimizer: the first
            schedulers = next(iter(schedulers.values()), [])
        per_epoch, changed = len(runner.train_dataloader), []
        if (run or {}).get('iters_per_epoch') not in (None, per_epoch):
            changed.append('iterations per epoch (images / batch / '
                           f"processes) {run['iters_per_epoch']} -> "
                           f'{per_epoch}')
        for i, (s, state) in enumerate(
                zip(schedulers, [] if run is not None else
                    checkpoint.get('param_schedulers') or [])):
            for key in ('end', 'T_max'):
                mine, then = getattr(s, key, None), (state or {}).get(key)
                if mine is not None and then is not None and mine != then:
                    changed.append(f'param_scheduler.{i} ({type(s).__name__})'
                                   f' {key} {then} -> {mine} iterations')
        line = changed_run(path, changed, allowed)
        if line:
            runner.logger.warning(line)
        if allowed and (self.room.changed or changed):
            as_this_config(runner, checkpoint, schedulers, per_epoch)
