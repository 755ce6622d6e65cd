from typing import Dict, List, Optional

import torch
import torch.distributed as dist
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


def check_clip_grad(clip) -> None:
    """Refuse, in one line, a clipping threshold that is not a positive
    number (``max_norm=-1`` would scale every gradient by a negative factor:
    gradient ascent; torch takes it without a word)."""
    if not isinstance(clip, dict):
        return
    key = 'clip_value' if clip.get('type') == 'value' else 'max_norm'
    value = clip.get(key)
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)) or \
            not value > 0:  # NaN is not > 0 either
        raise HPMError(
            f'optim_wrapper.clip_grad.{key}={value!r} is not a positive '
            f'number (a negative one reverses the gradients). Fix: '
            f'optim_wrapper.clip_grad.{key}=5.0 (the recipes\' value), or '
            'clip_grad=None for no clipping.')


class NonFiniteGuardMixin:
    """Skip an optimizer step whose loss or gradients are not finite.

    At every real update (after the backward, before clipping) one flag,
    max-reduced over the ranks (DDP and FSDP alike), says whether the loss or
    a gradient is NaN/inf; a bad step is skipped on every rank: gradients
    zeroed, weights, optimizer state and EMA teacher untouched (a loss scaler
    still lowers its scale). ``train/nonfinite_skipped`` is logged;
    :attr:`applied_steps` counts the steps taken. ``max_consecutive_skips``
    in a row stop training in one line naming the way back; a run that ends
    with more steps skipped than applied fails (:meth:`check_trained`). Also
    ``clip_grad=dict(type='param_norm')``: per-parameter clipping (DINO).

    Args:
        skip_nonfinite (bool): Defaults to True.
        max_consecutive_skips (int): Defaults to 20.
        **kwargs: The arguments of the wrapped optimizer wrapper."""

    def __init__(self,
                 *args,
                 skip_nonfinite: bool = True,
                 max_consecutive_skips: int = 20,
                 **kwargs) -> None:
        clip = kwargs.get('clip_grad')
        check_clip_grad(clip)
        per_param = isinstance(clip, dict) and clip.get('type') == 'param_norm'
        if per_param:
            kwargs['clip_grad'] = dict(clip, type='norm')
        super().__init__(*args, **kwargs)
        if per_param:
            self.clip_func = clip_grad_norm_per_param_
            self.grad_name = 'grad_norm_max'  # of the parameters, unclipped
        if max_consecutive_skips < 1:
            raise ValueError('max_consecutive_skips must be >= 1, got '
                             f'{max_consecutive_skips}.')
        self.skip_nonfinite = skip_nonfinite
        self.max_consecutive_skips = max_consecutive_skips
        self.consecutive_skips = 0
        self.skipped_steps = 0
        self.applied_steps = 0
        self._bad_loss: Optional[torch.Tensor] = None

    def update_params(self,
                      loss: torch.Tensor,
                      step_kwargs: Optional[Dict] = None,
                      zero_kwargs: Optional[Dict] = None) -> None:
        if self.skip_nonfinite:  # a device flag, read at the step
            bad = ~torch.isfinite(loss.detach())
            self._bad_loss = bad if self._bad_loss is None else \
                self._bad_loss | bad
        super().update_params(loss, step_kwargs, zero_kwargs)

    def _grads(self) -> List[torch.Tensor]:
        return [
            p.grad for group in self.optimizer.param_groups
            for p in group['params'] if p.grad is not None
        ]

    def nonfinite(self) -> bool:
        """Whether this update's loss or any gradient is NaN/inf, on any
        rank (one all-reduce of one flag, one read back to the host)."""
        grads = self._grads()
        device = grads[0].device if grads else (
            self._bad_loss.device if self._bad_loss is not None else 'cpu')
        flag = torch.zeros((), device=device)
        if grads:
            norms = torch._foreach_norm(grads)
            flag = flag + (
                ~torch.isfinite(torch.stack([n.to(device)
                                             for n in norms]))).any()
        if self._bad_loss is not None:
            flag = flag + self._bad_loss.to(device)
        self._bad_loss = None
        if dist.is_available() and dist.is_initialized() and \
                dist.get_world_size() > 1:
            dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        return bool(flag.item() > 0)

    def step(self, **kwargs) -> None:
        if not self.skip_nonfinite:
            self.applied_steps += 1
            return super().step(**kwargs)
        bad = self.nonfinite()
        self.message_hub.update_scalar('train/nonfinite_skipped', float(bad))
        if not bad:
            self.consecutive_skips = 0
            self.applied_steps += 1
            return super().step(**kwargs)
        self.consecutive_skips += 1
        self.skipped_steps += 1
        scaler = getattr(self, 'loss_scaler', None)
        if scaler is not None and scaler.is_enabled():
            # let a dynamic loss scale go down, as its own step would
            scaler.unscale_(self.optimizer)
            scaler.update(getattr(self, '_scale_update_param', None))
        print_log(
            'non-finite loss or gradients: optimizer step skipped on every '
            f'rank, weights unchanged ({self.consecutive_skips} in a row, '
            f'{self.skipped_steps} in all)',
            logger='current',
            level=30)
        if self.consecutive_skips >= self.max_consecutive_skips:
            raise HPMError(
                f'{self.consecutive_skips} optimizer steps in a row had a '
                'non-finite loss or non-finite gradients; training stopped. '
                'No non-finite step was applied, but the finite steps before '
                'them may have diverged the weights: check the checkpoints\' '
                'losses. Fix: lower optimizer.lr or set clip_grad, check the '
                'data, then restart from a checkpoint whose loss was sound '
                'with --cfg-options load_from=CKPT (--resume would bring '
                'back the scheduler\'s old learning rate), or raise '
                'optim_wrapper.max_consecutive_skips.')

    def check_trained(self) -> None:
        """At the end of a run: refuse, in one line, one that skipped more
        optimizer steps (non-finite loss or gradients) than it applied: its
        checkpoints hold a model that barely trained (a run shorter than
        ``max_consecutive_skips`` would otherwise end normally)."""
        skipped, applied = self.skipped_steps, self.applied_steps
        if skipped and skipped >= applied:
            raise HPMError(
                f'{skipped} of {skipped + applied} optimizer steps were '
                'skipped (non-finite loss or gradients): the checkpoints '
                'hold a model that barely trained. Fix: lower '
                'optimizer.lr or set clip_grad, check the data, and '
                'train again.')


@OPTIM_WRAPPERS.register_module()
class GuardedOptimWrapper(NonFiniteGuardMixin, OptimWrapper):
    """mmengine's :class:`OptimWrapper` with the non-finite guard of
    :class:`NonFiniteGuardMixin` (``skip_nonfinite``,
    ``max_consecutive_skips``)."""


@OPTIM_WRAPPERS.register_module()
class GuardedAmpOptimWrapper(NonFiniteGuardMixin, AmpOptimWrapper):
    """mmengine's :class:`AmpOptimWrapper` (CUDA, a loss scaler) with the
    non-finite guard; on a CPU built outside hpm_mm's runner it refuses in one
    line naming that runner."""

    def __init__(self, *args, **kwargs) -> None:
        try:
            super().__init__(*args, **kwargs)
        except AssertionError as e:
            if 'only available' not in str(e):
                raise
            from hpm_mm.errors import HPMError
            raise HPMError(
                'GuardedAmpOptimWrapper computes fp16 on a GPU and this '
                'machine has none. Fix: build the runner with mmengine\'s '
                'RUNNERS.build(cfg) (runner_type=\'HPMRunner\', as hpm_mm\'s '
                'configs name it) or hpm_mm.apis.train, whose precision '
                'rule picks bf16 or fp32 here; mmengine\'s plain '
                'Runner.from_cfg does not read runner_type.') from None
