from typing import Dict, List, Optional, Union

import torch
import torch.nn as nn
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
            the teacher only ranks patches. Defaults to None (the model's
            own precision).
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
        self.skip_nonfinite = skip_nonfinite
        # Random masking throughout (alpha_0 = alpha_T = 0) needs no teacher.
        self.teacher = ExponentialMovingAverage(
            self._student(), momentum=teacher_momentum
        ) if self.mask_generator.uses_scores else None
        self.progress = 0.
        self._progress_set = False

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

    @torch.no_grad()
    def teacher_scores(self, inputs: torch.Tensor) -> torch.Tensor:
        """Teacher's predicted loss of every patch of the full image, (B, N).

        Runs the teacher encoder on all patches and only its loss predictor
        (the reconstructor output is never needed).
        """
        teacher = self.teacher.module
        num_patches = self.backbone.num_patches
        visible = inputs.new_zeros(inputs.shape[0], num_patches)
        with torch.autocast(
                device_type=inputs.device.type,
                dtype=self.teacher_dtype or torch.float32,
                enabled=self.teacher_dtype is not None):
            latent, ids_restore = teacher['backbone'](inputs, visible,
                                                      num_patches)
            scores = teacher['neck'](latent, ids_restore,
                                     reconstruct=False)[1]
        return scores.float()

    def train_step(self, data, optim_wrapper) -> Dict[str, torch.Tensor]:
        """mmengine's train step, but a non-finite loss skips the update.

        The check reads one scalar back from the device, which mmengine's
        logging does every iteration anyway.
        """
        with optim_wrapper.optim_context(self):
            data = self.data_preprocessor(data, True)
            losses = self._run_forward(data, mode='loss')
        parsed_losses, log_vars = self.parse_losses(losses)
        if self.skip_nonfinite and not torch.isfinite(parsed_losses):
            optim_wrapper.zero_grad()
            print_log(
                f'non-finite loss ({float(parsed_losses)}): optimizer step '
                'skipped, weights unchanged', logger='current', level=30)
            log_vars['nonfinite_skipped'] = parsed_losses.new_tensor(1.)
            return log_vars
        optim_wrapper.update_params(parsed_losses)
        log_vars['nonfinite_skipped'] = parsed_losses.new_tensor(0.)
        return log_vars

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
            self.teacher.update_parameters(self._student())
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
