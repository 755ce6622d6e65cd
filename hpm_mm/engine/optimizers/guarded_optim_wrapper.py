from contextlib import contextmanager
from typing import Dict, List, Optional, Union

import torch
from mmengine.dist import all_reduce
from mmengine.logging import print_log
from mmengine.optim import AmpOptimWrapper, OptimWrapper
from mmengine.registry import OPTIM_WRAPPERS  # root: every scope finds it

from hpm_mm.errors import HPMError


def clip_grad_norm_per_param_(params: List[torch.Tensor],
                              max_norm: float,
                              eps: float = 1e-6) -> torch.Tensor:
    """Clip each parameter's gradient to an l2 norm of at most ``max_norm``
    on its own (DINO's and iBOT's ``clip_gradients``: factor
    ``max_norm / (norm + eps)`` where below 1); return the largest norm
    before clipping."""
    grads = [p.grad for p in params]
    norms = torch._foreach_norm(grads)
    torch._foreach_mul_(grads,
                        [(max_norm / (n + eps)).clamp(max=1.) for n in norms])
    return torch.stack(norms).max()


def each_wrapper(optim_wrapper) -> list:
    """A run's optimizer wrappers: its one, or each of an
    ``OptimWrapperDict`` (one per optimizer)."""
    return list(optim_wrapper.values()) if hasattr(
        optim_wrapper, 'values') else [optim_wrapper]


def fused_on_cuda(optim_wrapper: dict, device: str) -> dict:
    """The ``optim_wrapper`` config with torch's fused kernel for AdamW /
    Adam / SGD on CUDA (the guard's flag then stays on the device, as the
    kernel's ``found_inf``), unless the config sets ``fused`` or
    ``foreach``."""
    optimizer = optim_wrapper.get('optimizer')
    if device == 'cuda' and isinstance(optimizer, dict) and \
            str(optimizer.get('type')).split('.')[-1] in (
                'AdamW', 'Adam', 'SGD') and \
            not {'fused', 'foreach'} & set(optimizer):
        return dict(optim_wrapper, optimizer=dict(optimizer, fused=True))
    return optim_wrapper


class NonFiniteGuardMixin:
    """Skip an optimizer step whose loss or gradients are not finite.

    At every real update (after the backward, before clipping) one flag,
    max-reduced over the ranks (DDP and FSDP alike), says whether the loss or
    a gradient is NaN/inf; a bad step is skipped on every rank: weights,
    optimizer state and EMA teacher untouched (a loss scaler still lowers
    its scale). With a fused optimizer (a CUDA run's AdamW) the flag stays on
    the device, as the kernel's ``found_inf``: the step makes the host wait
    for nothing; the flags and the grad norm are read once per logging
    interval (:meth:`flush`, called by :class:`DeferredRuntimeInfoHook`, at
    the latest every ``check_interval`` steps). Other optimizers read the flag
    at the step. ``train/nonfinite_skipped`` is logged per step;
    ``max_consecutive_skips`` in a row stop training in one line; a run with
    more steps skipped than applied fails (:meth:`check_trained`). Also
    ``clip_grad=dict(type='param_norm')``: per-parameter clipping (DINO).

    Args:
        skip_nonfinite (bool): Defaults to True.
        max_consecutive_skips (int): Defaults to 20.
        check_interval (int): Steps read at the latest. Defaults to 100.
        **kwargs: The arguments of the wrapped optimizer wrapper."""

    def __init__(self,
                 *args,
                 skip_nonfinite: bool = True,
                 max_consecutive_skips: int = 20,
                 check_interval: int = 100,
                 **kwargs) -> None:
        clip = kwargs.get('clip_grad')
        clip = clip if isinstance(clip, dict) else {}
        key = 'clip_value' if clip.get('type') == 'value' else 'max_norm'
        value = clip.get(key)
        number = isinstance(value, (int, float)) and type(value) is not bool
        if value is not None and not (number and value > 0):  # NaN: not > 0
            raise HPMError(  # (torch ascends a negative max_norm silently)
                f'optim_wrapper.clip_grad.{key}={value!r} is not a positive '
                f'number. Fix: optim_wrapper.clip_grad.{key}=5.0.')
        per_param = clip.get('type') == 'param_norm'
        if per_param:
            kwargs['clip_grad'] = dict(clip, type='norm')
        super().__init__(*args, **kwargs)
        if per_param:
            self.clip_func = clip_grad_norm_per_param_
            self.grad_name = 'grad_norm_max'  # of the parameters, unclipped
        for name, value in (('max_consecutive_skips', max_consecutive_skips),
                            ('check_interval', check_interval)):
            if value < 1:
                raise ValueError(f'{name} must be >= 1, got {value}.')
        self.skip_nonfinite = skip_nonfinite
        self.max_consecutive_skips = max_consecutive_skips
        self.check_interval = check_interval
        self.consecutive_skips = self._skipped = self._applied = 0
        #: optimizer steps taken or skipped, on the host
        self.step_calls = 0
        #: whether the last step was applied: 1./0. (a host float, or a
        #: device tensor where the flag stays there), None before the first
        self.last_applied = None
        self._bad_loss = self._grad_norm = None  # device tensors
        self._pending: List[tuple] = []  # per step: (flag, grad norm)

    def step_counts(self) -> dict:
        """What a checkpoint keeps of the guard (``meta.hpm_run``): the steps
        skipped and applied, whether the last was applied ({} before it)."""
        return {} if self.last_applied is None else dict(
            last_applied=float(self.last_applied),
            steps=[self.skipped_steps, self.applied_steps])

    def restore_step_counts(self, counts: dict) -> None:
        """A resumed run's :meth:`step_counts` at its checkpoint: the
        end-of-run check counts the whole run, and the EMA teacher's next
        update reads whether the last step was applied."""
        if 'last_applied' in counts:
            self.last_applied = counts['last_applied']
            self._skipped, self._applied = counts['steps']

    @property
    def skipped_steps(self) -> int:
        """Steps skipped so far (reads the pending flags)."""
        self.flush()
        return self._skipped

    @property
    def applied_steps(self) -> int:
        """Steps applied so far (reads the pending flags)."""
        self.flush()
        return self._applied

    def update_params(self,
                      loss: torch.Tensor,
                      step_kwargs: Optional[Dict] = None,
                      zero_kwargs: Optional[Dict] = None) -> None:
        if self.skip_nonfinite:  # a device flag, read with the gradients'
            bad = ~torch.isfinite(loss.detach())
            self._bad_loss = bad if self._bad_loss is None else \
                self._bad_loss | bad
        super().update_params(loss, step_kwargs, zero_kwargs)

    def _with_grads(self) -> List[torch.Tensor]:
        return [
            p for group in self.optimizer.param_groups for p in group['params']
            if p.grad is not None
        ]

    def _clip_grad(self) -> None:
        """mmengine's clipping, its norm kept on the device until read."""
        params = self._with_grads()
        if params:
            self._grad_norm = self.clip_func(params, **self.clip_grad_kwargs)

    def nonfinite(self) -> torch.Tensor:
        """1. where this update's loss or any gradient is NaN/inf on any
        rank, else 0. (fp32, on the gradients' device; one all-reduce)."""
        grads = [p.grad for p in self._with_grads()]
        loss, self._bad_loss = self._bad_loss, None
        device = grads[0].device if grads else getattr(loss, 'device', 'cpu')
        flags = [torch.zeros(1, dtype=torch.bool, device=device)]
        if grads:  # one check over the stacked norms
            flags.append(~torch.isfinite(
                torch.stack([n.to(device)
                             for n in torch._foreach_norm(grads)])))
        if loss is not None:
            flags.append(loss.to(device).reshape(1))
        flag = torch.cat(flags).any().float()
        all_reduce(flag, op='max')  # (nothing in a single process)
        return flag

    def step(self, **kwargs) -> None:
        self.step_calls += 1
        if len(self._pending) >= self.check_interval:
            self.flush()
        if not self.skip_nonfinite:
            super().step(**kwargs)
            return self._record(None, 1.)
        flag = self.nonfinite()
        scaler = getattr(self, 'loss_scaler', None)
        scaler = scaler if scaler is not None and scaler.is_enabled() else None
        if getattr(self.optimizer, '_step_supports_amp_scaling', False):
            # fused: the kernel skips the update and undoes its step count
            if scaler is not None:  # the scaler's found_inf sees the flag
                for p in self._with_grads()[:1]:
                    p.grad.mul_(torch.where(flag > 0, float('nan'), 1.))
                super().step(**kwargs)
            else:
                self.optimizer.found_inf = flag
                try:
                    super().step(**kwargs)
                finally:
                    del self.optimizer.found_inf
            return self._record(flag, 1. - flag)
        bad = flag.item()  # one read: other optimizers have no found_inf
        if not bad:
            super().step(**kwargs)
        elif scaler is not None:  # let a dynamic loss scale go down
            scaler.unscale_(self.optimizer)
            scaler.update(getattr(self, '_scale_update_param', None))
        self._record(bad, 1. - bad)
        self.flush()

    def _record(self, flag, applied) -> None:
        self.last_applied = applied
        self._pending.append((flag, self._grad_norm))
        self._grad_norm = None

    def flush(self) -> None:
        """Read the pending steps' flags and grad norms (one copy), log them
        per step, count the skips; stop at ``max_consecutive_skips``."""
        if not self._pending:
            return
        pending, self._pending = self._pending, []
        tensors = [
            v.detach().float().reshape(()) for step in pending for v in step
            if isinstance(v, torch.Tensor)
        ]
        read = iter(torch.stack(tensors).tolist() if tensors else [])
        hub, skipped = self.message_hub, self._skipped
        for flag, norm in pending:
            flag, norm = (
                next(read) if isinstance(v, torch.Tensor) else v
                for v in (flag, norm))
            bad = bool(flag)
            if norm is not None and not bad:  # a skipped step logs none
                hub.update_scalar(f'train/{self.grad_name}', norm)
            if flag is not None:
                hub.update_scalar('train/nonfinite_skipped', float(bad))
            self._skipped += bad
            self._applied += not bad
            self.consecutive_skips = self.consecutive_skips + 1 if bad else 0
            if self.consecutive_skips >= self.max_consecutive_skips:
                self._warn(self._skipped - skipped)
                raise HPMError(f'{self.consecutive_skips} optimizer steps in a'
                               ' row had a non-finite loss or gradients. Fix: '
                               'lower optimizer.lr, then load_from=CKPT.')
        self._warn(self._skipped - skipped)

    def _warn(self, new: int) -> None:
        if new:
            print_log(
                f'non-finite loss or gradients: {new} optimizer '
                f'step{"s" * (new > 1)} skipped on every rank, weights '
                f'unchanged ({self.consecutive_skips} in a row now, '
                f'{self._skipped} in all)', 'current', 30)

    def check_trained(self) -> None:
        """At the end of a run: refuse, in one line, one that skipped more
        optimizer steps (non-finite loss or gradients) than it applied: its
        checkpoints hold a model that barely trained (a run shorter than
        ``max_consecutive_skips`` would otherwise end normally). A resumed
        run counts its steps before the stop too
        (:meth:`restore_step_counts`)."""
        skipped, applied = self.skipped_steps, self.applied_steps
        if skipped and skipped >= applied:
            raise HPMError(f'{skipped} of {skipped + applied} optimizer steps'
                           ' were skipped (non-finite loss or gradients). '
                           'Fix: lower the lr or set clip_grad.')


@OPTIM_WRAPPERS.register_module()
class GuardedOptimWrapper(NonFiniteGuardMixin, OptimWrapper):
    """mmengine's :class:`OptimWrapper` with the non-finite guard of
    :class:`NonFiniteGuardMixin` (``skip_nonfinite``,
    ``max_consecutive_skips``)."""


@OPTIM_WRAPPERS.register_module()
class GuardedAmpOptimWrapper(NonFiniteGuardMixin, AmpOptimWrapper):
    """mmengine's :class:`AmpOptimWrapper` (fp16 with a loss scaler: a GPU)
    with the non-finite guard; hpm_mm's runner picks it for
    ``precision='fp16'`` (and bf16 or fp32 where there is no GPU)."""


@OPTIM_WRAPPERS.register_module()
class AutocastOptimWrapper(NonFiniteGuardMixin, OptimWrapper):
    """Mixed precision by autocast alone, on any device (mmengine's
    :class:`AmpOptimWrapper` needs a GPU): bf16 needs no loss scale; the
    losses are fp32 whatever the autocast. Guarded like
    :class:`GuardedOptimWrapper`.

    Args:
        dtype (str): ``'bfloat16'`` or ``'float16'`` (GPU). Defaults to bf16.
        device_type (str, optional): Defaults to CUDA when available."""

    def __init__(self,
                 dtype: Union[str, torch.dtype] = 'bfloat16',
                 device_type: str = None,
                 **kwargs) -> None:
        super().__init__(**kwargs)
        self.cast_dtype = getattr(torch, dtype) if isinstance(dtype,
                                                              str) else dtype
        self.device_type = device_type or ('cuda' if torch.cuda.is_available()
                                           else 'cpu')

    @contextmanager
    def optim_context(self, model: torch.nn.Module):
        with super().optim_context(model), torch.autocast(
                device_type=self.device_type, dtype=self.cast_dtype):
            yield
