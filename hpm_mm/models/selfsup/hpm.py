from typing import Dict, List, Optional

import torch
import torch.nn as nn
from mmpretrain.registry import MODELS
from mmpretrain.structures import DataSample

from .base import HPMBase

#: Checkpoint keys of hpm_mm versions before the one loss-predictor module
#: (issue #31) -> today's: the decoder's predictor trunk became an
#: HPMLossPredictor, and the teacher keys its copy of the decoder as the
#: student's score module (``teacher.module.scorer``; ``predictor`` before
#: issue #72).
_PREDICTOR_KEYS = (('predictor_proj.', 'predictor.embed.'),
                   ('predictor_blocks.', 'predictor.blocks.'),
                   ('predictor_norm.', 'predictor.norm.'), ('predictor_pred.',
                                                            'predictor.pred.'))


def upgrade_hpm_state_dict(state: dict, prefix: str = '') -> dict:
    """An HPM state dict of an earlier hpm_mm in today's keys (the one place
    of the key map); today's keys pass unchanged."""
    out = {}
    scorer = 'teacher.module.scorer.'
    for key, value in HPMBase.upgrade_state_dict(state, prefix).items():
        rest = key[len(prefix):] if key.startswith(prefix) else None
        if rest is not None:
            if rest.startswith('teacher.module.neck.'):
                rest = scorer + rest[len('teacher.module.neck.'):]
            for head in ('neck.', scorer):
                for old, new in _PREDICTOR_KEYS:
                    if rest.startswith(head + old):
                        rest = head + new + rest[len(head + old):]
            key = prefix + rest
        out[key] = value
    return out


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

    @staticmethod
    def upgrade_state_dict(state_dict: dict, prefix: str = '') -> dict:
        """A state dict of an earlier hpm_mm in today's keys
        (:func:`upgrade_hpm_state_dict`); every load goes through it."""
        return upgrade_hpm_state_dict(state_dict, prefix)

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
        latent, ids_restore = self.backbone(inputs, mask, self.num_visible)
        pred, pred_scores = self.neck(latent, ids_restore)
        target = self.target(inputs, teacher_features)
        losses = self.head.loss(pred, pred_scores, target, mask)
        return self.with_mask_log(losses, inputs)

    @property
    def num_visible(self) -> int:
        N = self.backbone.num_patches
        return N - self.mask_generator.num_masked(N)

    def target(
            self,
            inputs: torch.Tensor,
            teacher_features: Optional[torch.Tensor] = None) -> torch.Tensor:
        """What the head compares the reconstruction with: the images
        (pixels), or the target generator's patch features (the EMA
        teacher's reuse this step's pass when given)."""
        if self.target_generator is None:
            return inputs
        if teacher_features is not None:
            return teacher_features[:, 1:]
        return self.target_generator(inputs)
