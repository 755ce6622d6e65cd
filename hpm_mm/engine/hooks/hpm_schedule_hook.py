import logging
from typing import Optional

from mmengine.hooks import Hook
from mmengine.logging import print_log
from mmengine.runner import EpochBasedTrainLoop
from mmpretrain.registry import HOOKS
from mmpretrain.utils import get_ori_model

#: the warning of a run under another runner is given once per process
_WARNED_RUNNER = False


@HOOKS.register_module()
class HPMScheduleHook(Hook):
    """Feed HPM its progress before every iteration: ``p = t / T`` in epochs
    (the paper's alpha_t, stepped per epoch; ``by_epoch=False``: iterations),
    the epochs done (teacher momentum), the optimizer steps taken and the
    last one's applied flag (the teacher moves once per applied step).
    Derived from the runner each iteration: a resume needs nothing extra.

    Args:
        by_epoch (bool): whether the progress ``p = t / T`` counts epochs (the
            paper: alpha stepped per epoch) or iterations. Defaults to True.
    """

    priority = 'NORMAL'

    def __init__(self, by_epoch: bool = True) -> None:
        self.by_epoch = by_epoch

    def before_train(self, runner) -> None:
        """Say once per process when the run is not under hpm_mm's runner
        (mmengine's plain ``Runner.from_cfg`` does not read
        ``runner_type``): it trains, without the run's policy."""
        global _WARNED_RUNNER
        from ..runner import RunPolicyMixin
        if isinstance(runner, RunPolicyMixin) or _WARNED_RUNNER:
            return
        _WARNED_RUNNER = True
        print_log(
            f"this run is under {type(runner).__name__}, not hpm_mm's "
            "HPMRunner: no run policy. Fix: RUNNERS.build(cfg) (Runner."
            'from_cfg ignores runner_type).', 'current', logging.WARNING)

    def before_train_iter(self,
                          runner,
                          batch_idx: int,
                          data_batch: Optional[dict] = None) -> None:
        iters_per_epoch = max(len(runner.train_dataloader), 1)
        if isinstance(runner.train_loop, EpochBasedTrainLoop):
            epoch, max_epochs = runner.epoch, float(runner.max_epochs)
        else:
            epoch = runner.iter // iters_per_epoch
            max_epochs = runner.max_iters / iters_per_epoch
        progress = epoch / max_epochs if self.by_epoch else \
            runner.iter / max(runner.max_iters, 1)
        done = epoch + (runner.iter % iters_per_epoch) / iters_per_epoch
        get_ori_model(runner.model).set_progress(
            progress, done, getattr(runner.optim_wrapper, 'step_calls', None),
            max_epochs, getattr(runner.optim_wrapper, 'last_applied', None))
        runner.message_hub.update_scalar('train/hpm_progress', progress)
