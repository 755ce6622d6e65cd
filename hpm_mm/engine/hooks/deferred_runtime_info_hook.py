from typing import List, Optional

import torch
from mmengine.hooks import LoggerHook, RuntimeInfoHook
from mmengine.registry import HOOKS

from hpm_mm.engine.optimizers.guarded_optim_wrapper import each_wrapper


@HOOKS.register_module()
class DeferredRuntimeInfoHook(RuntimeInfoHook):
    """mmengine's :class:`~mmengine.hooks.RuntimeInfoHook` reading the logged
    scalars back from the GPU once per logging interval (one copy) instead of
    one ``.item()`` sync per scalar per iteration (with the non-finite
    guard's flags and grad norm, :meth:`NonFiniteGuardMixin.flush`); the
    message hub receives the same values in the same order before anyone
    reads them (every ``interval`` iterations, default the logger hook's;
    an epoch's end, validation, the end of training).

    Args:
        interval (int, optional): iterations between two reads back from the
            GPU. Defaults to None: the logger hook's interval.
    """

    def __init__(self, interval: Optional[int] = None) -> None:
        if interval is not None and not (type(interval) is int
                                         and interval >= 1):
            raise ValueError('DeferredRuntimeInfoHook interval must be a '
                             f'positive integer or None, got {interval!r}.')
        self.interval = interval
        self._pending: List[tuple] = []  # per iteration, not yet read

    def before_train(self, runner) -> None:
        super().before_train(runner)
        loggers = [h for h in runner.hooks if isinstance(h, LoggerHook)]
        self._every = self.interval or (loggers[0].interval if loggers else 1)

    def after_train_iter(self,
                         runner,
                         batch_idx: int,
                         data_batch=None,
                         outputs: Optional[dict] = None) -> None:
        if outputs:  # this iteration's tensors: one stack per device
            slots, groups = [], {}
            for key, value in outputs.items():
                device = getattr(value, 'device', None)  # None: a number
                if device is not None:  # read from the device's stack
                    group = groups.setdefault(device, [])
                    group.append(value.detach().reshape(()).float())
                    value = None
                slots.append((key, device, value))
            stacks = {d: torch.stack(vs) for d, vs in groups.items()}
            self._pending.append((slots, stacks))
        if (runner.iter + 1) % getattr(self, '_every', 1) == 0 or \
                self.end_of_epoch(runner.train_dataloader, batch_idx):
            self.flush(runner)

    def flush(self, runner) -> None:
        """Put every gathered iteration's scalars into the message hub (one
        copy per device for all of them), and the non-finite guard's."""
        for w in each_wrapper(getattr(runner, 'optim_wrapper', None)):
            if hasattr(w, 'flush'):
                w.flush()
        pending, self._pending = self._pending, []
        devices = {d for _, stacks in pending for d in stacks}
        values = {
            d: iter(torch.cat([s[d] for _, s in pending if d in s]).tolist())
            for d in devices
        }
        for slots, _ in pending:  # the model's own order, as mmengine's hook
            for key, device, value in slots:
                runner.message_hub.update_scalar(
                    f'train/{key}',
                    value if device is None else next(values[device]))

    def before_val(self, runner) -> None:
        self.flush(runner)
        super().before_val(runner)

    def after_train(self, runner) -> None:
        self.flush(runner)
        super().after_train(runner)
