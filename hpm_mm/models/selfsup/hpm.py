from typing import Dict, List, Optional, Tuple, Union

import torch
import torch.nn as nn
from mmengine.logging import print_log
from mmpretrain.models.selfsup import BaseSelfSupervisor
from mmpretrain.registry import MODELS
from mmpretrain.structures import DataSample

# arguments of earlier hpm_mm versions -> where they live now
_MOVED = {
    'teacher_momentum': 'teacher=dict(momentum=...)',
    'teacher_end_momentum': 'teacher=dict(end_momentum=...)',
    'teacher_momentum_epochs': 'teacher=dict(momentum_epochs=...)',
    'teacher_dtype': 'teacher=dict(dtype=...)',
    'teacher_input_scale': 'teacher=dict(input_scale=...)',
    'skip_nonfinite': "optim_wrapper=dict(type='GuardedOptimWrapper', "
                      'skip_nonfinite=...)',
}


@MODELS.register_module()
class HPM(BaseSelfSupervisor):
    """Hard Patches Mining for Masked Image Modeling.

    Implementation of `Hard Patches Mining for Masked Image Modeling
    <https://arxiv.org/abs/2304.05919>`_ (CVPR 2023). Each training step
    (paper Fig. 2): the EMA teacher scores every patch of the full image;
    the mask generator hides the hardest-scored patches mixed with random
    ones; the student encodes the visible patches; its two decoders
    reconstruct the image and predict the per-patch reconstruction losses;
    the head returns ``loss_rec`` + ``loss_pred`` (and, for the log only,
    ``rank_acc`` and the mask generator's scalars such as ``alpha`` and
    ``num_hard``).

    The parts are separate registered modules: the teacher
    (:class:`EMATeacher`), the mask generator (any
    :class:`BaseMaskGenerator`), backbone, neck and head. The training
    progress (for the mask schedule) and the epoch (for the teacher
    momentum and the applied optimizer steps (for the teacher update) are
    pushed in by :class:`HPMScheduleHook` through :meth:`set_progress`; the
    model never reads the runner. Non-finite steps
    are skipped by the optimizer wrapper (:class:`GuardedOptimWrapper`).

    Args:
        backbone (dict): :class:`HPMViT` config.
        neck (dict): :class:`HPMPretrainDecoder` config.
        head (dict): :class:`HPMPretrainHead` config.
        mask_generator (dict): Mask generator config. Defaults to
            ``dict(type='HPMMaskGenerator')`` (gamma 0.75, alpha 0 -> 0.5).
        teacher (dict): :class:`EMATeacher` config, built only when the mask
            generator uses scores or the target is the teacher's features.
            Defaults to ``dict(type='EMATeacher')`` (momentum 1e-3 -> 1e-4
            over 100 epochs, as the authors).
        target_generator (dict, optional): What is reconstructed: None for
            the pixels; a feature target (paper Tab. 1):
            :class:`EMATeacherTarget`, :class:`ViTFeatureTarget` (DINO) or
            :class:`CLIPFeatureTarget`, with
            :class:`HPMFeaturePretrainHead`. Defaults to None.
        predictor (dict, optional): A loss predictor outside the neck
            (:class:`HPMLossPredictor`), for encoders that keep every token
            (:class:`HPMSimMIM`, :class:`HPMBEiT`); HPM's own predictor lives
            in its decoder. Defaults to None.
        data_preprocessor (dict, optional): Defaults to None.
        init_cfg (dict, optional): Defaults to None.
    """

    #: Whether the EMA teacher's outputs are the targets (iBOT), so a
    #: teacher is built whatever the mask generator.
    teacher_is_target = False

    def __init__(self,
                 backbone: dict,
                 neck: dict,
                 head: dict,
                 mask_generator: dict = dict(type='HPMMaskGenerator'),
                 teacher: dict = dict(type='EMATeacher'),
                 target_generator: Optional[dict] = None,
                 predictor: Optional[dict] = None,
                 pretrained: Optional[str] = None,
                 data_preprocessor: Optional[dict] = None,
                 init_cfg: Optional[Union[List[dict], dict]] = None,
                 **kwargs) -> None:
        for key in kwargs:
            hint = f' It is now {_MOVED[key]}.' if key in _MOVED else ''
            raise TypeError(f'HPM got an unknown argument {key!r}.{hint}')
        super().__init__(
            backbone=backbone,
            neck=neck,
            head=head,
            target_generator=target_generator,
            pretrained=pretrained,
            data_preprocessor=data_preprocessor,
            init_cfg=init_cfg)
        self.predictor = MODELS.build(predictor) if predictor else None
        self.mask_generator = MODELS.build(mask_generator)
        self.mask_generator.check(self.backbone.num_patches)
        if self.mask_generator.varies and self.backbone.drops_masked:
            raise ValueError(
                f'mask_ratio={self.mask_generator.mask_ratio!r} masks a '
                'different number of patches in each image, but '
                f'{type(self.backbone).__name__} drops the masked patches '
                'and needs the same number in every image. Fix: a float '
                'mask_ratio, or an encoder with mask tokens (MaskTokenViT: '
                'HPMSimMIM, HPMBEiT, HPMiBOT).')
        self._check_predictor()
        self.target_from_teacher = self.teacher_is_target or getattr(
            self.target_generator, 'uses_teacher', False)
        # random masking of pixels throughout needs no teacher
        self.teacher = MODELS.build(
            teacher,
            default_args=dict(
                model=self.student(),
                score_source=self.mask_generator.score_source,
                features=self.target_from_teacher)
        ) if (self.mask_generator.uses_scores
              or self.target_from_teacher) else None
        self.progress = 0.
        self.optim_steps = None
        self._progress_set = False

    def student(self) -> nn.ModuleDict:
        """The part the teacher averages, keyed as in the teacher: the
        encoder and the module holding the loss predictor."""
        if self.predictor is not None:
            return nn.ModuleDict(
                dict(backbone=self.backbone, predictor=self.predictor))
        return nn.ModuleDict(dict(backbone=self.backbone, neck=self.neck))

    @property
    def with_predictor(self) -> bool:
        """Whether the student has a loss predictor."""
        return self.predictor is not None or getattr(
            self.neck, 'with_predictor', False)

    def _check_predictor(self) -> None:
        """A predicting loss or a predicted-loss mask needs a predictor."""
        if self.with_predictor:
            return
        if getattr(self.head, 'loss_pred', None) is not None:
            raise ValueError(
                'head.loss_pred is set but the model has no loss predictor '
                '(neck.predictor_depth=0): set head.loss_pred=None, or give '
                'the neck a predictor.')
        if self.mask_generator.score_source == 'predicted_loss' and \
                self.mask_generator.uses_scores:
            raise ValueError(
                'the mask generator masks by predicted loss but the model '
                'has no loss predictor: use alpha_0=alpha_T=0 (random '
                'masks), or give the model a predictor.')

    def set_progress(self,
                     progress: float,
                     epoch: float = 0,
                     optim_steps: Optional[int] = None) -> None:
        """Set t/T for the mask schedule, the epoch for the teacher momentum
        and the optimizer steps applied so far for the teacher update.

        Args:
            progress (float): t/T in [0, 1].
            epoch (float): Epochs done, with the fraction of the current
                one (the teacher's momentum schedule).
            optim_steps (int, optional): See :meth:`EMATeacher.update`.
        """
        self.progress = float(progress)
        self.optim_steps = optim_steps
        self._progress_set = True
        if self.teacher is not None:
            self.teacher.set_epoch(epoch)

    def extract_feat(self, inputs: torch.Tensor):
        """Unmasked features of the student encoder (``out_type`` tuple);
        of the first view when given several."""
        if isinstance(inputs, (list, tuple)):
            inputs = inputs[0]
        return self.backbone(inputs, mask=None)

    def loss(self, inputs: torch.Tensor, data_samples: List[DataSample],
             **kwargs) -> Dict[str, torch.Tensor]:
        """One HPM training step (paper Fig. 2).

        Args:
            inputs (torch.Tensor): Normalised images, (B, C, H, W).
            data_samples (List[DataSample]): Unused.

        Returns:
            dict: ``loss_rec``, ``loss_pred`` and the log-only ``rank_acc``
            and mask-generator scalars.
        """
        scores, teacher_features = self.teach(inputs)
        mask = self.choose_mask(scores, inputs)
        latent, ids_restore = self.backbone(inputs, mask, self.num_visible)
        pred, pred_scores = self.neck(latent, ids_restore)
        target = self.target(inputs, teacher_features)
        losses = self.head.loss(pred, pred_scores, target, mask)
        return self.with_mask_log(losses, inputs)

    @property
    def num_visible(self) -> int:
        N = self.backbone.num_patches
        return N - self.mask_generator.num_masked(N)

    def teach(self, inputs: torch.Tensor
              ) -> Tuple[Optional[torch.Tensor], Optional[torch.Tensor]]:
        """The EMA teacher's part of a step: follow the student, then score
        the full image (when the mask needs scores now) and give its
        features (when they are the target), in one pass.

        Returns:
            tuple: ``(scores, features)``, each None when not needed.
        """
        if self.teacher is None:
            return None, None
        self._warn_without_schedule()
        self.teacher.update(self.student(), self.optim_steps)
        scores = self.mask_generator.needs_scores(self.backbone.num_patches,
                                                  self.progress)
        if not (scores or self.target_from_teacher):
            return None, None
        return self.teacher(inputs, scores, self.target_from_teacher)

    def choose_mask(self, scores: Optional[torch.Tensor],
                    inputs: torch.Tensor) -> torch.Tensor:
        """(B, N) mask, 1 = masked, from the mask generator."""
        return self.mask_generator(scores, self.progress,
                                   self.backbone.num_patches,
                                   inputs.shape[0], inputs.device)

    def predict_losses(self, latent: torch.Tensor) -> Optional[torch.Tensor]:
        """The separate ``predictor``'s per-patch losses on the encoder
        output (mask-token frameworks), None without one."""
        return None if self.predictor is None else self.predictor(latent)

    def target(self,
               inputs: torch.Tensor,
               teacher_features: Optional[torch.Tensor] = None
               ) -> torch.Tensor:
        """What the head compares the reconstruction with: the images
        (pixels), the EMA teacher's features (from :meth:`teach`'s pass, or
        a pass of their own when not given) or a frozen network's."""
        if self.target_generator is None:
            return inputs
        if self.target_from_teacher:
            if teacher_features is None:
                teacher_features = self.teacher(inputs, False, True).features
            return teacher_features[:, 1:]
        return self.target_generator(inputs)

    def with_mask_log(self, losses: dict, inputs: torch.Tensor) -> dict:
        """Add the mask generator's log scalars (alpha, num_hard)."""
        for key, value in self.mask_generator.log_vars(
                self.backbone.num_patches, self.progress).items():
            losses[key] = inputs.new_tensor(value)
        return losses

    def _warn_without_schedule(self) -> None:
        if not self._progress_set:
            print_log(
                f'{type(self).__name__}.set_progress was never called, so '
                'the mask schedule and the teacher momentum stay at their '
                'start. Add dict(type="HPMScheduleHook") to custom_hooks.',
                logger='current', level=30)
            self._progress_set = True
