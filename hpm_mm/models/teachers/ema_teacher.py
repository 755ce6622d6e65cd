import math
from contextlib import nullcontext
from typing import NamedTuple, Optional, Tuple, Union

import torch
import torch.nn as nn
import torch.nn.functional as F
from mmengine.model import ExponentialMovingAverage
from mmpretrain.registry import MODELS

from .score_sources import TEACHER_SCORES, check_source


class TeacherOutput(NamedTuple):
    """What one pass of the teacher gives: per-patch scores (B, N) and the
    encoder's tokens (B, 1 + N, C), each None when not asked for."""
    scores: Optional[torch.Tensor]
    features: Optional[torch.Tensor]


@MODELS.register_module()
class EMATeacher(ExponentialMovingAverage):
    """The EMA teacher that scores every patch of the full image: mmengine's
    :class:`ExponentialMovingAverage` of the student's encoder and loss
    predictor (``module['backbone']``, ``module['scorer']``; iBOT adds its
    head; checkpoints keep ``teacher.module.*``) with the paper's momentum
    ramp, one update per applied optimizer step, kept in eval mode; and the
    scoring pass (:meth:`forward`): per-patch scores of ``score_source``
    and, when its ``features`` are a target, its tokens, in one no-grad
    pass under autocast in ``dtype``. ``input_scale`` < 1 scores a
    downsampled copy (the fast setting; no features). docs/extending.md.

    The paper's EMA step, with its decay d (0.999 -> 0.9999):
    ``theta_t <- d * theta_t + (1 - d) * theta_s``. mmengine's momentum is
    ``m = 1 - d`` (``teacher = (1 - m) teacher + m student``: the authors'
    decay 0.999 -> 0.9999 is m 1e-3 -> 1e-4), and each update is that line
    as one multi-tensor ``lerp``: ``theta_t <- theta_t + m * (theta_s -
    theta_t)`` (:meth:`update_parameters`).

    Args:
        model (nn.Module): what is averaged: ``ModuleDict(backbone=...,
            scorer=...)`` (HPMBase.student()).
        momentum (float): mmengine's momentum m at the start. Defaults to
            1e-3 (decay 0.999).
        end_momentum (float): m at the end of the ramp. Defaults to 1e-4
            (decay 0.9999).
        momentum_epochs (int, optional): the ramp's length in epochs; None:
            the run. Defaults to 100, the authors'.
        momentum_schedule (str): 'linear' (per epoch, the authors') or
            'cosine' (per iteration). Defaults to 'linear'.
        dtype (str, optional): the scoring pass's autocast dtype; None: the
            step's precision. Defaults to None.
        input_scale (float): the fraction of the patch grid per side the
            teacher sees (< 1: a downsampled copy, the fast setting).
            Defaults to 1.
        score_source (str, optional): the registered source of the
            per-patch scores (TEACHER_SCORES); None: targets only. Defaults
            to 'predicted_loss'.
        features (bool): whether its tokens are a target (needs the full
            image). Defaults to False.
    """

    def __init__(self,
                 model: nn.Module,
                 momentum: float = 1e-3,
                 end_momentum: float = 1e-4,
                 momentum_epochs: Optional[int] = 100,
                 momentum_schedule: str = 'linear',
                 dtype: Optional[str] = None,
                 input_scale: float = 1.0,
                 score_source: str = 'predicted_loss',
                 features: bool = False) -> None:
        super().__init__(model, momentum=momentum)
        if momentum_schedule not in ('linear', 'cosine'):
            raise ValueError("momentum_schedule must be 'linear' or "
                             f"'cosine', got {momentum_schedule!r}.")
        if not 0. < input_scale <= 1.:
            raise ValueError(f'input_scale must be in (0, 1], got '
                             f'{input_scale}.')
        check_source(score_source)
        if features and input_scale != 1:
            raise ValueError(f'teacher.input_scale={input_scale} but its '
                             'features are a target. Fix: input_scale=1.0.')
        self.start_momentum = momentum
        self.end_momentum = end_momentum
        self.momentum_epochs = momentum_epochs
        self.momentum_schedule = momentum_schedule
        self.dtype = getattr(torch, dtype) if isinstance(dtype, str) else dtype
        self.input_scale = input_scale
        self.score_source = score_source
        # the pass, chosen once: the half-resolution teacher (fast setting)
        self._pass = self._full_pass if input_scale == 1 else \
            self._scaled_pass
        self._last_optim_steps: Optional[int] = None
        self._steps: Optional[int] = None  # ``steps`` on the host
        self.module.eval()

    def set_epoch(self,
                  epoch: float,
                  max_epochs: Optional[float] = None) -> None:
        """Momentum after ``epoch`` epochs (fractional: iterations done /
        iterations per epoch) of a ``max_epochs``-epoch run; the linear ramp
        counts whole epochs."""
        ramp = self.momentum_epochs
        if ramp is None:
            if max_epochs is None:
                raise ValueError('momentum_epochs=None needs max_epochs. '
                                 'Fix: set_epoch(epoch, max_epochs).')
            ramp = max_epochs
        if self.momentum_schedule == 'linear':
            epoch = math.floor(epoch)
        r = min(epoch / max(ramp, 1), 1.)
        if self.momentum_schedule == 'cosine':
            r = (1 - math.cos(math.pi * r)) / 2
        self.momentum = self.start_momentum + r * (
            self.end_momentum - self.start_momentum)

    def train(self, mode: bool = True) -> 'EMATeacher':
        """Follow ``mode`` but keep the averaged model in eval mode."""
        super().train(mode)
        self.module.eval()
        return self

    def update(self,
               student: nn.Module,
               optim_steps: Optional[int] = None,
               applied=None) -> bool:
        """EMA step from the ``student`` (``ModuleDict(backbone=,
        scorer=)``), only when ``optim_steps`` (taken so far; None: every
        call) moved and that step was ``applied`` (1./0., or a device tensor:
        the momentum is multiplied by it there, the host reads nothing;
        None: applied), so a skipped step leaves the teacher. Returns whether
        it ran."""
        if optim_steps is not None and optim_steps == self._last_optim_steps:
            return False
        self._last_optim_steps = optim_steps
        on_device = isinstance(applied, torch.Tensor)
        if not on_device and applied is not None and not applied:
            return False
        self.update_parameters(student, applied if on_device else None)
        return True

    @torch.no_grad()
    def update_parameters(self,
                          model: nn.Module,
                          applied: Optional[torch.Tensor] = None) -> None:
        """mmengine's EMA step (a ``lerp`` of every floating parameter towards
        the student's, the first call a copy, buffers copied) as a few
        multi-tensor ops, its step count kept on the host (no read back per
        call); ``applied`` (a 0./1. device tensor) scales the momentum. (The
        teacher sets neither ``interval`` nor ``update_buffers``: 1, False.)
        Once per build or load, the student's parameters are checked whole
        (not an FSDP shard).
        """
        src = dict(model.named_parameters())
        if self._steps is None:  # once per build or load: one read back
            for name, p in self.avg_parameters.items():
                if src[name].shape != p.shape:
                    raise RuntimeError(
                        f'{name} is {tuple(src[name].shape)} (a shard?) for '
                        'the EMA teacher. Fix: HPMFullyShardedDataParallel.')
            self._steps = int(self.steps)
        steps = self._steps
        avg = list(self.avg_parameters.values())  # parameters: all floating
        new = [src[k].to(p.device) for k, p in self.avg_parameters.items()]
        if steps == 0:
            torch._foreach_copy_(avg, new)
        elif applied is None:  # the paper's line
            torch._foreach_lerp_(avg, new, self.momentum)
        else:  # m times the guard's 0./1. flag, left on the device: a
            # skipped step moves nothing, and the host waits for nothing
            delta = torch._foreach_sub(new, avg)
            torch._foreach_mul_(delta, applied * self.momentum)
            torch._foreach_add_(avg, delta)
        for dst, buf in zip(self.module.buffers(), model.buffers()):
            dst.copy_(buf)  # buffers follow the student's
        self.steps.add_(1 if applied is None or steps == 0 else applied.
                        to(self.steps.dtype))
        self._steps = steps + 1

    def _load_from_state_dict(self, *args, **kwargs) -> None:
        super()._load_from_state_dict(*args, **kwargs)
        self._steps = None  # the loaded buffer is the count now

    @property
    def grid(self) -> Tuple[int, int]:
        """Patch grid (h, w) the teacher sees (``input_scale``)."""
        return tuple(
            max(1, math.floor(n * self.input_scale + .5))
            for n in self.module['backbone'].patch_resolution)

    def autocast(self, device: torch.device):
        """The precision of its passes: ``dtype``'s autocast, or the step's
        (None)."""
        return nullcontext() if self.dtype is None else torch.autocast(
            device.type, dtype=self.dtype)

    @torch.no_grad()
    def forward(self,
                inputs: torch.Tensor,
                *,
                scores: Union[bool, str] = True,
                features: bool = False) -> TeacherOutput:
        """The teacher's one pass over the full normalised images: ``scores``
        (True: :attr:`score_source`; a registered source's name; False: none)
        as (B, N) fp32 at the student's grid, and with ``features`` its tokens
        in the pass's precision; each None when not asked (no pass when
        neither is)."""
        source = self.score_source if scores is True else (scores or None)
        if source not in (None, self.score_source):  # a name given here
            check_source(source)  # (the configured one is checked at build)
        if source is None and not features:
            return TeacherOutput(None, None)
        with self.autocast(inputs.device):
            out, latent = self._pass(inputs, source)
        # features in the pass's precision; the heads cast what they read
        return TeacherOutput(out, latent if features else None)

    def _full_pass(self,
                   inputs: torch.Tensor,
                   source: Optional[str],
                   grid=None):
        """(fp32 scores or None, tokens) of one encoder pass over ``inputs``
        (``grid``: its patch grid where it is not the student's)."""
        backbone = self.module['backbone']
        num_patches = math.prod(grid or backbone.patch_resolution)
        visible = inputs.new_zeros(inputs.shape[0], num_patches)
        if source is None:
            return None, backbone(inputs, visible, num_patches)[0]
        scores, latent = TEACHER_SCORES.get(source)(self.module, inputs,
                                                    visible, grid)
        return scores.float(), latent

    def _scaled_pass(self, inputs: torch.Tensor, source: Optional[str]):
        """``input_scale < 1`` (the pass then, chosen at build): the
        scores of a copy of the images downsampled to the patch grid
        :attr:`grid`, upsampled bilinearly to the student's grid (no
        tokens: a target needs the full image)."""
        if source is None:
            return None, None
        backbone = self.module['backbone']
        full, grid = tuple(backbone.patch_resolution), self.grid
        stride = backbone.patch_embed.projection.stride
        small = F.interpolate(
            inputs,
            size=(grid[0] * stride[0], grid[1] * stride[1]),
            mode='bilinear',
            align_corners=False,
            antialias=True)
        out = self._full_pass(small, source, grid)[0]
        return F.interpolate(
            out.view(inputs.shape[0], 1, *grid),
            size=full,
            mode='bilinear',
            align_corners=False).flatten(1), None
