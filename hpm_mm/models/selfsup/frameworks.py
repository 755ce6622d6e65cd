"""Hard-patch mining on frameworks whose encoder keeps mask tokens
(:class:`MaskTokenViT`): :class:`HPMBase`'s parts around SimMIM's, BEiT's
and iBOT's pretext tasks, an :class:`HPMLossPredictor` on the encoder
output ranking each framework's per-patch loss. Without a predictor and
with a score-free mask each is the plain framework (docs/targets.md)."""
from typing import Dict, List, Optional, Tuple

import torch
from mmpretrain.registry import MODELS
from mmpretrain.structures import DataSample

from .base import HPMBase


@MODELS.register_module()
class HPMSimMIM(HPMBase):
    """SimMIM with hard-patch mining: a :class:`MaskTokenViT`, a linear
    decoder (:class:`HPMSimMIMDecoder`) to pixels, L1 per masked patch
    (:class:`HPMSimMIMHead`); ``predictor=None`` is plain SimMIM; the other
    arguments are :class:`HPMBase`'s."""

    def loss(self, inputs: torch.Tensor, data_samples: List[DataSample],
             **kwargs) -> Dict[str, torch.Tensor]:
        """One step: teacher scores, mask, encode with mask tokens,
        reconstruct the pixels, per-patch L1 + predicting loss."""
        scores, _ = self.teach(inputs)
        mask = self.choose_mask(scores, inputs)
        latent, _ = self.backbone(inputs, mask)
        pred_scores = self.predictor(latent) if self.predictor else None
        patches = latent[:, 1:].transpose(1, 2)  # (B, C, N) -> (B, C, h, w)
        reconstruction = self.neck(
            patches.unflatten(2, tuple(self.backbone.patch_resolution)))
        losses = self.head.loss(reconstruction, pred_scores, inputs, mask)
        return self.with_mask_log(losses, inputs)


@MODELS.register_module()
class HPMBEiT(HPMBase):
    """BEiT (v1) with hard-patch mining: two views per image
    (``TwoNormDataPreprocessor``); the frozen DALL-E tokenizer
    (``target_generator``) gives a token per patch; :class:`HPMBEiTHead`
    classifies the masked ones of a :class:`MaskTokenViT`. No neck;
    ``predictor=None`` is plain BEiT; the rest as :class:`HPMBase`.

    Args:
        backbone (dict): the encoder, a MaskTokenViT.
        head (dict): an HPMBEiTHead.
        target_generator (dict): the frozen DALL-E tokenizer.
        **kwargs: :class:`HPMBase` arguments (mask_generator, teacher,
            predictor, data_preprocessor, init_cfg; BEiT has no neck).
    """

    def __init__(self, backbone: dict, head: dict, target_generator: dict,
                 **kwargs) -> None:
        super().__init__(
            backbone, head=head, target_generator=target_generator, **kwargs)

    def loss(self, inputs: List[torch.Tensor], data_samples: List[DataSample],
             **kwargs) -> Dict[str, torch.Tensor]:
        """One step: teacher scores, mask, encode with mask tokens, the
        tokenizer's tokens, per-patch cross-entropy + predicting loss."""
        images, tokenizer_images = inputs
        scores, _ = self.teach(images)
        mask = self.choose_mask(scores, images)
        latent, _ = self.backbone(images, mask)
        pred_scores = self.predictor(latent) if self.predictor else None
        with torch.no_grad():
            tokens = self.target_generator(tokenizer_images)
        losses = self.head.loss(latent, pred_scores, tokens, mask)
        return self.with_mask_log(losses, images)


#: iBOT's block-wise masking: half of the images unmasked, the others
#: 10-50% (``--pred_ratio 0 0.3 --pred_ratio_var 0 0.2``), rectangles of at
#: least (14 // 3)^2 = 16 patches.
IBOT_MASK = dict(
    type='BlockwiseMaskGenerator',
    mask_ratio=[(0., 0.), (0.1, 0.5)],
    min_num_patches=16)
#: iBOT's teacher: decay 0.996 -> 1 along a half cosine over the whole run,
#: every iteration.
IBOT_TEACHER = dict(
    type='EMATeacher',
    momentum=4e-3,
    end_momentum=0.,
    momentum_epochs=None,
    momentum_schedule='cosine')


@MODELS.register_module()
class HPMiBOT(HPMBase):
    """iBOT with hard-patch mining: multi-crop views; the EMA teacher (encoder
    + :class:`iBOTNeck`) sees the global crops whole, the student masked
    (block-wise) plus the local crops; :class:`HPMiBOTHead` distils CLS
    (``loss_cls``) and masked patches (``loss_rec``, per patch). A predictor
    ranks ``loss_rec``; the same teacher pass scores the patches. Defaults:
    :data:`IBOT_MASK`, :data:`IBOT_TEACHER`; ``predictor=None`` is plain
    iBOT; the rest as :class:`HPMBase`.

    Args:
        backbone (dict): the encoder, a MaskTokenViT.
        neck (dict): the projection head, an iBOTNeck.
        head (dict): an HPMiBOTHead.
        mask_generator (dict): the mask. Defaults to IBOT_MASK: block-wise,
            per-image ratios, iBOT's.
        teacher (dict): the EMA teacher. Defaults to IBOT_TEACHER: iBOT's
            momentum, its head averaged too.
        predictor (dict, optional): a loss predictor on the encoder output;
            None: plain iBOT. Defaults to None.
        **kwargs: :class:`HPMBase` arguments.
    """

    #: The teacher's projected tokens are the targets, so it is always
    #: built: its averaged projection head runs on its tokens.
    teacher_target = 'neck'

    def __init__(self,
                 backbone: dict,
                 neck: dict,
                 head: dict,
                 mask_generator: dict = IBOT_MASK,
                 teacher: dict = IBOT_TEACHER,
                 **kwargs) -> None:
        super().__init__(backbone, neck, head, mask_generator, teacher,
                         **kwargs)

    def set_progress(self,
                     progress: float,
                     epoch: float = 0,
                     *args,
                     **kwargs) -> None:
        """As :meth:`HPMBase.set_progress`; the epoch also sets the teacher
        temperatures and whether the head's last layer is frozen."""
        super().set_progress(progress, epoch, *args, **kwargs)
        self.neck.set_epoch(epoch)
        self.head.set_epoch(epoch)

    def loss(self, inputs: List[torch.Tensor], data_samples: List[DataSample],
             **kwargs) -> Dict[str, torch.Tensor]:
        """One step: the teacher encodes (and scores) the whole global
        crops, the mask, the student encodes the masked global crops and the
        whole local ones, both project, both distillation losses +
        predicting loss."""
        global_crops, local_crops = self.split_views(inputs)
        scores, tokens = self.teach(global_crops)
        with torch.no_grad(), self.teacher.autocast(global_crops.device):
            teacher_out = self.teacher.module['neck'](tokens)  # projected
        mask = self.choose_mask(scores, global_crops)
        latent, _ = self.backbone(global_crops, mask)
        pred_scores = self.predictor(latent) if self.predictor else None
        local_cls = None if local_crops is None else \
            self.backbone(local_crops)[0][:, 0]
        student_cls, student_patch = self.project(latent, mask, local_cls)
        losses = self.head.loss(student_cls, student_patch,
                                teacher_out.unflatten(0, (2, -1)), pred_scores,
                                mask)
        return self.with_mask_log(losses, global_crops)

    def project(
        self, latent: torch.Tensor, mask: torch.Tensor,
        local_cls: Optional[torch.Tensor]
    ) -> Tuple[torch.Tensor, torch.Tensor]:
        """One pass of the student's head over what the losses read: the
        CLS tokens of every view, (V, B, K), and the masked patches of the
        global views, (M, K) in ``mask`` order."""
        cls = latent[:, 0] if local_cls is None else torch.cat(
            [latent[:, 0], local_cls])
        out = self.neck(torch.cat([cls, latent[:, 1:][mask.bool()]]))
        return (out[:len(cls)].unflatten(0, (-1, latent.shape[0] // 2)),
                out[len(cls):])

    def split_views(
        self, inputs: List[torch.Tensor]
    ) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
        """The 2 global crops stacked (2B, C, H, W), and the local ones
        stacked (L B, C, h, w) or None."""
        size = tuple(self.backbone.img_size)
        views = inputs if isinstance(inputs, (list, tuple)) else [inputs]
        got = [tuple(v.shape[-2:]) for v in views]
        if len(views) < 2 or got[0] != size or got[1] != size:
            raise ValueError(f'HPMiBOT needs 2 global crops of {size[0]}x'
                             f'{size[1]} first, got {got}. Fix: the pipeline '
                             "dict(type='MultiView', num_views=[1, 1, L]).")
        local = torch.cat(inputs[2:]) if len(inputs) > 2 else None
        return torch.cat(inputs[:2]), local
