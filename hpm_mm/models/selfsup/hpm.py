import math
from contextlib import nullcontext
from typing import Dict, List, Optional, Tuple, Union

import torch
import torch.nn as nn
import torch.nn.functional as F
from mmengine.logging import print_log
from mmengine.model import ExponentialMovingAverage
from mmpretrain.models.selfsup import BaseSelfSupervisor
from mmpretrain.registry import MODELS
from mmpretrain.structures import DataSample


@MODELS.register_module()
class HPM(BaseSelfSupervisor):
    """Hard Patches Mining for Masked Image Modeling.

    Implementation of `Hard Patches Mining for Masked Image Modeling
    <https://arxiv.org/abs/2304.05919>`_ (CVPR 2023). Each training step:

    1. updates the EMA teacher (a copy of backbone + both decoders);
    2. when the mask generator needs scores (K > 0), runs the teacher on the
       full image, encoder and loss predictor only, under ``no_grad``;
    3. draws the mask: K hardest predicted patches + random ones;
    4. runs the student on the visible patches through both decoders;
    5. returns ``loss_rec`` + ``loss_pred`` and, for the log only, ``alpha``,
       ``num_hard`` (K) and ``rank_acc`` (the predictor's pairwise ranking
       accuracy against the true per-patch losses).

    The training progress (for alpha) and the epoch (for the teacher
    momentum) are pushed in by :class:`HPMScheduleHook` through
    :meth:`set_progress`; the model never reads the runner.

    Args:
        backbone (dict): :class:`HPMViT` config.
        neck (dict): :class:`HPMPretrainDecoder` config.
        head (dict): :class:`HPMPretrainHead` config.
        mask_generator (dict): Mask generator config. Defaults to
            ``dict(type='HPMMaskGenerator')`` (gamma 0.75, alpha 0 -> 0.5).
        teacher_momentum (float): EMA momentum (mmengine convention,
            ``teacher = (1 - m) * teacher + m * student``) at epoch 0.
            Defaults to 1e-3 (decay 0.999, as the authors).
        teacher_end_momentum (float): Momentum reached after
            ``teacher_momentum_epochs`` epochs, kept afterwards. Defaults to
            1e-4 (decay 0.9999).
        teacher_momentum_epochs (int): Length of the linear momentum ramp in
            epochs. Defaults to 100.
        teacher_dtype (str, optional): Run the teacher pass under autocast
            in this dtype (``'bfloat16'`` or ``'float16'``), a fast setting;
            the teacher only ranks patches. Defaults to None: the precision
            of the training step (fp32, or the AMP autocast dtype).
        teacher_input_scale (float): Fast setting: the teacher scores a
            copy of the image downsampled so that its patch grid is this
            fraction of the student's per side (rounded; position
            embeddings interpolated), and its scores are upsampled
            bilinearly to the full grid. 0.5 costs ~1/4 of the teacher
            pass. Defaults to 1.0 (the full image, as in the paper).
        skip_nonfinite (bool): When the total loss is NaN/inf, skip the
            optimizer step (gradients zeroed, weights untouched) and log
            ``nonfinite_skipped``; AMP's loss scaler already does this for
            fp16 overflow. Defaults to True.
        data_preprocessor (dict, optional): Defaults to None.
        init_cfg (dict, optional): Defaults to None.
    """

    def __init__(self,
                 backbone: dict,
                 neck: dict,
                 head: dict,
                 mask_generator: dict = dict(type='HPMMaskGenerator'),
                 teacher_momentum: float = 1e-3,
                 teacher_end_momentum: float = 1e-4,
                 teacher_momentum_epochs: int = 100,
                 teacher_dtype: Optional[str] = None,
                 teacher_input_scale: float = 1.0,
                 skip_nonfinite: bool = True,
                 pretrained: Optional[str] = None,
                 data_preprocessor: Optional[dict] = None,
                 init_cfg: Optional[Union[List[dict], dict]] = None) -> None:
        super().__init__(
            backbone=backbone,
            neck=neck,
            head=head,
            pretrained=pretrained,
            data_preprocessor=data_preprocessor,
            init_cfg=init_cfg)
        self.mask_generator = MODELS.build(mask_generator)
        self.teacher_momentum = teacher_momentum
        self.teacher_end_momentum = teacher_end_momentum
        self.teacher_momentum_epochs = teacher_momentum_epochs
        self.teacher_dtype = getattr(torch, teacher_dtype) \
            if teacher_dtype else None
        if not 0. < teacher_input_scale <= 1.:
            raise ValueError(
                'teacher_input_scale must be in (0, 1] (the fraction of the '
                'patch grid the teacher sees per side), got '
                f'{teacher_input_scale}.')
        self.teacher_input_scale = teacher_input_scale
        self.skip_nonfinite = skip_nonfinite
        # Random masking throughout (alpha_0 = alpha_T = 0) needs no teacher.
        self.teacher = ExponentialMovingAverage(
            self._student(), momentum=teacher_momentum
        ) if self.mask_generator.uses_scores else None
        self.progress = 0.
        self._progress_set = False
        self._student_checked = False

    def _student(self) -> nn.ModuleDict:
        """The averaged part, keyed as in the teacher."""
        return nn.ModuleDict(dict(backbone=self.backbone, neck=self.neck))

    def set_progress(self, progress: float, epoch: int = 0) -> None:
        """Set t/T for the mask schedule and the epoch for the momentum.

        Args:
            progress (float): t/T in [0, 1].
            epoch (int): Completed epochs; the teacher momentum ramps
                linearly from ``teacher_momentum`` to ``teacher_end_momentum``
                over ``teacher_momentum_epochs``.
        """
        self.progress = float(progress)
        self._progress_set = True
        if self.teacher is not None:
            r = min(epoch / max(self.teacher_momentum_epochs, 1), 1.)
            self.teacher.momentum = self.teacher_momentum + r * (
                self.teacher_end_momentum - self.teacher_momentum)

    def extract_feat(self, inputs: torch.Tensor):
        """Unmasked features of the student encoder (``out_type`` tuple)."""
        return self.backbone(inputs, mask=None)

    def _update_teacher(self) -> None:
        """EMA step of the teacher from the whole student parameters.

        Under a sharding wrapper the student's parameters must be gathered
        when this runs (:class:`HPMFullyShardedDataParallel` guarantees it);
        a shard would silently average the wrong numbers, so it is an error.
        """
        student = self._student()
        teacher = self.teacher.avg_parameters
        # parameters are whole or sharded from the first step on: check once
        for name, param in ([] if self._student_checked else
                            student.named_parameters()):
            if param.shape != teacher[name].shape:
                raise RuntimeError(
                    f'the EMA teacher needs the whole student parameters but '
                    f'{name} is {tuple(param.shape)} here (a shard?), '
                    f'{tuple(teacher[name].shape)} in the teacher. Under '
                    'FSDP wrap HPM with HPMFullyShardedDataParallel (one '
                    'unit, teacher ignored), or use DDP.')
        self._student_checked = True
        self.teacher.update_parameters(student)

    @property
    def teacher_grid(self) -> Tuple[int, int]:
        """Patch grid (h, w) the teacher sees (``teacher_input_scale``)."""
        return tuple(
            max(1, math.floor(n * self.teacher_input_scale + .5))
            for n in self.backbone.patch_resolution)

    @torch.no_grad()
    def teacher_scores(self, inputs: torch.Tensor) -> torch.Tensor:
        """Teacher's predicted loss of every patch of the full image, (B, N).

        Runs the teacher encoder on all patches and only its loss predictor
        (the reconstructor output is never needed). With
        ``teacher_input_scale < 1`` the teacher sees a downsampled image and
        its score map is upsampled to the student's patch grid.
        """
        teacher = self.teacher.module
        full, grid = tuple(self.backbone.patch_resolution), self.teacher_grid
        if grid != full:
            stride = self.backbone.patch_embed.projection.stride
            inputs = F.interpolate(
                inputs, size=(grid[0] * stride[0], grid[1] * stride[1]),
                mode='bilinear', align_corners=False, antialias=True)
        B, num_patches = inputs.shape[0], grid[0] * grid[1]
        visible = inputs.new_zeros(B, num_patches)
        # teacher_dtype None: whatever autocast the step runs under (AMP)
        precision = nullcontext() if self.teacher_dtype is None else \
            torch.autocast(inputs.device.type, dtype=self.teacher_dtype)
        with precision:
            latent, ids_restore = teacher['backbone'](inputs, visible,
                                                      num_patches)
            scores = teacher['neck'](
                latent, ids_restore, reconstruct=False,
                patch_resolution=None if grid == full else grid)[1]
        scores = scores.float()
        if grid != full:
            scores = F.interpolate(
                scores.view(B, 1, *grid), size=full, mode='bilinear',
                align_corners=False).flatten(1)
        return scores

    def train_step(self, data, optim_wrapper) -> Dict[str, torch.Tensor]:
        """mmengine's train step, but a non-finite loss skips the update.

        The check reads one scalar back from the device, which mmengine's
        logging does every iteration anyway. Under DDP/FSDP the wrappers
        :class:`HPMDistributedDataParallel` and
        :class:`HPMFullyShardedDataParallel` apply the same guard.
        """
        from hpm_mm.engine.optimizers import guarded_train_step
        return guarded_train_step(self, self, data, optim_wrapper)

    def loss(self, inputs: torch.Tensor, data_samples: List[DataSample],
             **kwargs) -> Dict[str, torch.Tensor]:
        """One HPM training step (see the class docstring).

        Args:
            inputs (torch.Tensor): Normalised images, (B, C, H, W).
            data_samples (List[DataSample]): Unused.

        Returns:
            dict: ``loss_rec``, ``loss_pred`` and the log-only ``rank_acc``,
            ``alpha``, ``num_hard``.
        """
        expected = tuple(self.backbone.patch_resolution[i] *
                         self.backbone.patch_embed.projection.stride[i]
                         for i in range(2))
        if tuple(inputs.shape[-2:]) != expected:
            raise ValueError(
                f'HPM was built for {expected[0]}x{expected[1]} images but '
                f'got {inputs.shape[-2]}x{inputs.shape[-1]}. Resize/crop to '
                'that size in the train pipeline, or set backbone.img_size '
                'and neck.num_patches to match the data.')
        if not self._progress_set and self.teacher is not None:
            print_log(
                'HPM.set_progress was never called, so alpha stays at '
                'alpha_0. Add dict(type="HPMScheduleHook") to custom_hooks.',
                logger='current', level=30)
            self._progress_set = True
        gen = self.mask_generator
        B, N = inputs.shape[0], self.backbone.num_patches
        num_hard = gen.num_hard(N, self.progress)

        scores = None
        if self.teacher is not None:
            self._update_teacher()
            if num_hard > 0:
                scores = self.teacher_scores(inputs)
        mask = gen(scores, self.progress, N, B, inputs.device)

        latent, ids_restore = self.backbone(inputs, mask,
                                            N - gen.num_masked(N))
        pred, pred_scores = self.neck(latent, ids_restore)
        losses = self.head.loss(pred, pred_scores, inputs, mask)
        losses['alpha'] = inputs.new_tensor(gen.alpha(self.progress))
        losses['num_hard'] = inputs.new_tensor(float(num_hard))
        return losses
