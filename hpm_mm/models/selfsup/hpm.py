from typing import Dict, List, Optional, Union

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
            generator uses scores. Defaults to ``dict(type='EMATeacher')``
            (momentum 1e-3 -> 1e-4 over 100 epochs, as the authors).
        data_preprocessor (dict, optional): Defaults to None.
        init_cfg (dict, optional): Defaults to None.
    """

    def __init__(self,
                 backbone: dict,
                 neck: dict,
                 head: dict,
                 mask_generator: dict = dict(type='HPMMaskGenerator'),
                 teacher: dict = dict(type='EMATeacher'),
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
            pretrained=pretrained,
            data_preprocessor=data_preprocessor,
            init_cfg=init_cfg)
        self.mask_generator = MODELS.build(mask_generator)
        self.mask_generator.check(self.backbone.num_patches)
        # random masking throughout needs no teacher
        self.teacher = MODELS.build(
            teacher,
            default_args=dict(
                model=self.student(),
                score_source=self.mask_generator.score_source)
        ) if self.mask_generator.uses_scores else None
        self.progress = 0.
        self.optim_steps = None
        self._progress_set = False

    def student(self) -> nn.ModuleDict:
        """The part the teacher averages, keyed as in the teacher."""
        return nn.ModuleDict(dict(backbone=self.backbone, neck=self.neck))

    def set_progress(self,
                     progress: float,
                     epoch: int = 0,
                     optim_steps: Optional[int] = None) -> None:
        """Set t/T for the mask schedule, the epoch for the teacher momentum
        and the optimizer steps applied so far for the teacher update.

        Args:
            progress (float): t/T in [0, 1].
            epoch (int): Completed epochs (the teacher's momentum ramp).
            optim_steps (int, optional): See :meth:`EMATeacher.update`.
        """
        self.progress = float(progress)
        self.optim_steps = optim_steps
        self._progress_set = True
        if self.teacher is not None:
            self.teacher.set_epoch(epoch)

    def extract_feat(self, inputs: torch.Tensor):
        """Unmasked features of the student encoder (``out_type`` tuple)."""
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
        gen, p, N = self.mask_generator, self.progress, self.backbone.num_patches
        self._warn_without_schedule()
        scores = None
        if self.teacher is not None:
            self.teacher.update(self.student(), self.optim_steps)
            if gen.needs_scores(N, p):
                scores = self.teacher(inputs)
        mask = gen(scores, p, N, inputs.shape[0], inputs.device)
        latent, ids_restore = self.backbone(inputs, mask, N - gen.num_masked(N))
        pred, pred_scores = self.neck(latent, ids_restore)
        losses = self.head.loss(pred, pred_scores, inputs, mask)
        for key, value in gen.log_vars(N, p).items():
            losses[key] = inputs.new_tensor(value)
        return losses

    def _warn_without_schedule(self) -> None:
        if not self._progress_set and self.mask_generator.uses_scores:
            print_log(
                'HPM.set_progress was never called, so the mask schedule '
                'stays at its start. Add dict(type="HPMScheduleHook") to '
                'custom_hooks.', logger='current', level=30)
            self._progress_set = True
