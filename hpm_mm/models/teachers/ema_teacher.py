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
    """The EMA teacher that scores every patch of the full image.

    An exponential moving average of the student's encoder and loss
    predictor (``module['backbone']`` and ``module['predictor']``: HPM's
    decoder, or the :class:`HPMLossPredictor` of a mask-token framework;
    iBOT adds its projection head), mmengine's
    :class:`ExponentialMovingAverage` (so checkpoints keep the keys
    ``teacher.module.*`` and ``teacher.steps``), plus what HPM needs of it:

    - **momentum schedule**: :meth:`set_epoch` moves the momentum from
      ``momentum`` to ``end_momentum`` over ``momentum_epochs`` epochs,
      linearly once per epoch (HPM's authors: decay 0.999 -> 0.9999 is
      1e-3 -> 1e-4 in mmengine's convention
      ``teacher = (1 - m) teacher + m student``) or along a half cosine
      every iteration (DINO/iBOT: decay 0.996 -> 1 is 4e-3 -> 0);
    - **mode**: the averaged model always runs in eval mode (no dropout or
      drop path), whatever the student's mode, as the teachers of
      DINO/iBOT, which are built without drop path;
    - **update** (:meth:`update`): at the start of a training step, once
      per optimizer step applied to the student (the count comes from the
      guarded optimizer wrappers through :class:`HPMScheduleHook`): after a
      step the non-finite guard skipped, or a gradient-accumulation
      iteration, the student did not change and neither does the teacher.
      The first update copies the student. Under a sharding wrapper the
      parameters must be whole when it runs (checked once: a shard would
      average the wrong numbers);
    - **the pass** (:meth:`forward`, its one entrance): under ``no_grad``,
      one encoder pass over the full, unmasked image giving the per-patch
      scores (its loss predictor's predicted losses, ``'predicted_loss'``,
      HPM; or its last block's CLS-to-patch attention averaged over heads,
      ``'cls_attention'``, read off the same pass without running the
      predictor) and, when asked, its tokens (a feature target);
    - **precision** (``dtype``) and **input scale** (``input_scale``), the
      fast settings.

    Args:
        model (nn.Module): The student, ``ModuleDict(backbone=,
            predictor=)``; given by the algorithm.
        momentum (float): Momentum at epoch 0. Defaults to 1e-3.
        end_momentum (float): Momentum after ``momentum_epochs`` epochs,
            kept afterwards. Defaults to 1e-4.
        momentum_epochs (int, optional): Length of the ramp in epochs; None
            for the whole run (it then follows ``train_cfg.max_epochs``).
            Defaults to 100 (the authors').
        momentum_schedule (str): ``'linear'`` (stepped per epoch) or
            ``'cosine'`` (per iteration). Defaults to ``'linear'``.
        dtype (str, optional): Run the scoring pass under autocast in this
            dtype (``'bfloat16'`` or ``'float16'``); the teacher only ranks
            patches. Defaults to None: the precision of the training step
            (fp32, or the AMP autocast dtype).
        input_scale (float): Score a copy of the image downsampled so that
            its patch grid is this fraction of the student's per side
            (position embeddings interpolated), then upsample the scores
            bilinearly to the full grid. 0.5 costs ~1/4 of the pass.
            Defaults to 1.0 (the full image, as in the paper).
        score_source (str, optional): The scores :meth:`forward` gives by
            default: a source registered in
            :data:`~hpm_mm.models.teachers.TEACHER_SCORES`
            (``'predicted_loss'``, ``'cls_attention'``, or your own), or
            None for a teacher that only gives targets (score-free masks);
            given by the algorithm from its mask generator. Defaults to
            ``'predicted_loss'``.
        features (bool): Whether its tokens are a training target (EMA
            feature target, iBOT); given by the algorithm. Such a teacher
            must see the full image (checked here, at build). Defaults to
            False.
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
        if not 0. < input_scale <= 1.:
            raise ValueError(
                'input_scale must be in (0, 1] (the fraction of the patch '
                f'grid the teacher sees per side), got {input_scale}.')
        if momentum_schedule not in ('linear', 'cosine'):
            raise ValueError("momentum_schedule must be 'linear' or "
                             f"'cosine', got {momentum_schedule!r}.")
        if score_source is not None:
            check_source(score_source)
        self.start_momentum = momentum
        self.end_momentum = end_momentum
        self.momentum_epochs = momentum_epochs
        self.momentum_schedule = momentum_schedule
        self.dtype = getattr(torch, dtype) if isinstance(dtype, str) else dtype
        self.input_scale = input_scale
        self.score_source = score_source
        if features:
            self.check_full_image()
        self._last_optim_steps: Optional[int] = None
        self._checked = False
        self._steps: Optional[int] = None  # ``steps`` on the host
        self._averaged = None  # (name, parameter) of the floating ones
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
                raise ValueError(
                    'teacher momentum_epochs=None ramps over the whole run, '
                    'so set_epoch needs max_epochs (HPMScheduleHook passes '
                    'it).')
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
               optim_steps: Optional[int] = None) -> bool:
        """EMA step from the whole student, once per applied optimizer step.

        Args:
            student (nn.Module): ``ModuleDict(backbone=, predictor=)``.
            optim_steps (int, optional): Optimizer steps applied so far
                (:attr:`GuardedOptimWrapper.applied_steps`, pushed in by
                :class:`HPMScheduleHook`). The teacher updates only when it
                moved since the last update, so a skipped step or a
                gradient-accumulation iteration leaves it as it is. None:
                update on every call.

        Returns:
            bool: Whether the teacher was updated.
        """
        if optim_steps is not None and optim_steps == self._last_optim_steps:
            return False
        if not self._checked:
            teacher = self.avg_parameters
            for name, param in student.named_parameters():
                if param.shape != teacher[name].shape:
                    raise RuntimeError(
                        f'the EMA teacher needs the whole student parameters '
                        f'but {name} is {tuple(param.shape)} here (a '
                        f'shard?), {tuple(teacher[name].shape)} in the '
                        'teacher. Under FSDP wrap the model with '
                        'HPMFullyShardedDataParallel (one unit, teacher '
                        'ignored), or use DDP.')
            self._checked = True
        self.update_parameters(student)
        self._last_optim_steps = optim_steps
        return True

    @torch.no_grad()
    def update_parameters(self, model: nn.Module) -> None:
        """mmengine's EMA step (``lerp`` of every floating parameter towards
        the student's by :attr:`momentum`, the first call a copy, buffers
        copied), as a few multi-tensor ops instead of one launch per
        parameter, and without reading ``steps`` back from the device at
        every call: its count is kept on the host too, read from the buffer
        once after a load (:meth:`_load_from_state_dict`)."""
        src = model.state_dict() if self.update_buffers else dict(
            model.named_parameters())
        steps = self._host_steps()
        if self._averaged is None:  # the teacher's side never changes
            self._averaged = [(k, p) for k, p in self.avg_parameters.items()
                              if p.dtype.is_floating_point]
        if steps == 0:
            torch._foreach_copy_(
                list(self.avg_parameters.values()),
                [src[k].to(p.device) for k, p in self.avg_parameters.items()])
        elif steps % self.interval == 0 and self._averaged:
            torch._foreach_lerp_(
                [p for _, p in self._averaged],
                [src[k].to(p.device)
                 for k, p in self._averaged], self.momentum)
        if not self.update_buffers:  # buffers follow the student's
            dst = list(self.module.buffers())
            if dst:
                torch._foreach_copy_(
                    dst,
                    [b.to(d.device) for b, d in zip(model.buffers(), dst)])
        self.steps.add_(1)
        self._steps = steps + 1

    def _host_steps(self) -> int:
        if self._steps is None:  # once per build or load: one read back
            self._steps = int(self.steps)
        return self._steps

    def _load_from_state_dict(self, *args, **kwargs) -> None:
        super()._load_from_state_dict(*args, **kwargs)
        self._steps = None  # the loaded buffer is the count now

    @property
    def grid(self) -> Tuple[int, int]:
        """Patch grid (h, w) the teacher sees (``input_scale``)."""
        return tuple(
            max(1, math.floor(n * self.input_scale + .5))
            for n in self.module['backbone'].patch_resolution)

    def check_full_image(self) -> None:
        """The one place of the rule: features (targets) need the teacher to
        see the full image."""
        if self.input_scale != 1:
            raise ValueError(
                'the EMA teacher\'s features are a target, which needs the '
                'teacher to see the full image, but '
                f'teacher.input_scale={self.input_scale}. Fix: '
                'teacher=dict(input_scale=1.0).')

    @torch.no_grad()
    def forward(self,
                inputs: torch.Tensor,
                *,
                scores: Union[bool, str] = True,
                features: bool = False,
                through: Optional[str] = None) -> TeacherOutput:
        """The teacher's pass: one encoder pass over the full images, and
        what it gives. The only entrance: training, the frameworks, the
        pictures and the benchmark call it.

        Args:
            inputs (torch.Tensor): Normalised images (B, C, H, W) at the
                student's size.
            scores (bool | str): The per-patch scores to compute: True for
                :attr:`score_source`, a registered source's name
                (``'predicted_loss'``, ``'cls_attention'``, or one of
                :data:`~hpm_mm.models.teachers.TEACHER_SCORES`) for another
                (the pictures show the predicted loss whatever the mask
                reads), False for none. Defaults to True.
            features (bool): Also return the encoder's tokens (after its
                final norm: the CLS token, then the patches in raster
                order): the EMA feature target (BootMAE, paper Tab. 1).
                Needs ``input_scale=1``.
            through (str, optional): The name of another averaged part to
                run on the tokens, whose output is returned as the features
                (iBOT's ``'neck'``: its teacher prototypes). Implies
                ``features``.

        Returns:
            TeacherOutput: ``scores`` (B, N) fp32 at the student's grid, or
            None; ``features`` (B, 1 + N, C) in the pass's precision (or the
            named part's output), or None.
        """
        source = self.score_source if scores is True else (scores or None)
        if source is not None and source != self.score_source:
            check_source(source)  # the configured one is checked at build
        features = features or through is not None
        if features:
            self.check_full_image()
        backbone = self.module['backbone']
        full, grid = tuple(backbone.patch_resolution), self.grid
        if grid != full:
            stride = backbone.patch_embed.projection.stride
            inputs = F.interpolate(
                inputs,
                size=(grid[0] * stride[0], grid[1] * stride[1]),
                mode='bilinear',
                align_corners=False,
                antialias=True)
        B, num_patches = inputs.shape[0], grid[0] * grid[1]
        visible = inputs.new_zeros(B, num_patches)
        precision = nullcontext() if self.dtype is None else \
            torch.autocast(inputs.device.type, dtype=self.dtype)
        out = None
        with precision:
            if source is None:
                latent = backbone(inputs, visible, num_patches)[0]
            else:  # a registered source (score_sources.py)
                out, latent = TEACHER_SCORES.get(source)(
                    self.module, inputs, visible,
                    None if grid == full else grid)
        if out is not None:
            out = out.float()
            if grid != full:
                out = F.interpolate(
                    out.view(B, 1, *grid),
                    size=full,
                    mode='bilinear',
                    align_corners=False).flatten(1)
        if through is not None:
            with precision:
                latent = self.module[through](latent)
        # features in the pass's precision; the heads cast what they read
        return TeacherOutput(out, latent if features else None)

    def extra_repr(self) -> str:
        return (f'momentum={self.start_momentum} -> {self.end_momentum} over '
                f'{self.momentum_epochs} epochs '
                f'({self.momentum_schedule}), dtype={self.dtype}, '
                f'input_scale={self.input_scale}, '
                f'score_source={self.score_source!r}')
