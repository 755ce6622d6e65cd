from typing import Dict, List, Optional

import torch
import torch.nn as nn
from mmpretrain.registry import MODELS
from mmpretrain.structures import DataSample

from .base import HPMBase

#: The loss predictor's trunk in the decoder before it became one
#: :class:`HPMLossPredictor` (issue #31): old prefix -> today's.
_TRUNK_RENAMES = (('predictor_proj.', 'predictor.embed.'), ) + tuple(
    (f'predictor_{n}.', f'predictor.{n}.') for n in ('blocks', 'norm', 'pred'))


@MODELS.register_module()
class HPM(HPMBase):
    """`Hard Patches Mining for Masked Image Modeling
    <https://arxiv.org/abs/2304.05919>`_ (CVPR 2023).

    Each step (paper Fig. 2): the EMA teacher scores every patch of the full
    image; the mask hides the hardest mixed with random ones; the student
    encodes the visible patches (:class:`HPMViT`); the decoder
    (:class:`HPMPretrainDecoder`) reconstructs them and predicts the
    per-patch losses over the embedding it shares with the reconstructor;
    the head (:class:`HPMPretrainHead`) returns ``loss_rec`` + ``loss_pred``
    (and, logged only, ``rank_acc``, ``alpha``, ``num_hard``). A
    ``target_generator`` replaces the pixels by features (paper Tab. 1, with
    :class:`HPMFeaturePretrainHead`); the other arguments are
    :class:`HPMBase`'s."""

    score_attr = 'neck'
    #: HPMBase's renames; the teacher's copy of the decoder was
    #: ``teacher.module.neck``; the loss predictor's trunk moved
    #: (:data:`_TRUNK_RENAMES`), in the student's decoder and the teacher's.
    state_dict_renames = HPMBase.state_dict_renames + (
        ('teacher.module.neck.', 'teacher.module.scorer.'), ) + tuple(
            (part + old, part + new)
            for part in ('neck.', 'teacher.module.scorer.')
            for old, new in _TRUNK_RENAMES)

    @property
    def score_module(self) -> Optional[nn.Module]:
        """The decoder, which holds the loss predictor (None without one)."""
        return None if self.neck.predictor is None else self.neck

    def loss(self, inputs: torch.Tensor, data_samples: List[DataSample],
             **kwargs) -> Dict[str, torch.Tensor]:
        """One HPM training step (paper Fig. 2) on normalised images:
        ``loss_rec``, ``loss_pred`` and the log-only ``rank_acc`` and mask
        scalars."""
        scores, teacher_features = self.teach(inputs)
        mask = self.choose_mask(scores, inputs)
        N = self.backbone.num_patches  # the same count masked in each image
        latent, ids_restore = self.backbone(
            inputs, mask, N - self.mask_generator.num_masked(N))
        pred, pred_scores = self.neck(latent, ids_restore)
        target = self.target(inputs, teacher_features)
        losses = self.head.loss(pred, pred_scores, target, mask)
        return self.with_mask_log(losses, inputs)

    def target(
            self,
            inputs: torch.Tensor,
            teacher_features: Optional[torch.Tensor] = None) -> torch.Tensor:
        """What the head compares the reconstruction with: the images
        (pixels), the target generator's patch features, or the EMA
        teacher's (this step's pass when given, else a pass of its own)."""
        if self.target_generator is None:
            return inputs
        if not self.teacher_features:
            return self.target_generator(inputs)
        if teacher_features is None:  # outside a step (the pictures)
            teacher_features = self.teacher(
                inputs, scores=False, features=True).features
        return teacher_features[:, 1:]
