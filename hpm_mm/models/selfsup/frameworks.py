"""Hard-patch mining on frameworks whose encoder keeps mask tokens.

The same parts as :class:`HPM` -- mask generator, EMA teacher, relative
loss -- around another framework's pretext task: the encoder
(:class:`MaskTokenViT`) sees every patch, the masked ones as a mask token;
a separate :class:`HPMLossPredictor` reads its output; the framework's head
computes its own loss per patch, which the predictor learns to rank. With
``predictor=None``, ``head.loss_pred=None`` and a score-free mask generator
each class is the plain framework (no teacher is built).
"""
from typing import Dict, List

import torch
from mmpretrain.registry import MODELS
from mmpretrain.structures import DataSample

from .hpm import HPM


@MODELS.register_module()
class HPMSimMIM(HPM):
    """SimMIM with hard-patch mining.

    SimMIM (Xie et al., CVPR 2022): the encoder output of every patch goes
    through a linear decoder (1x1 conv + pixel shuffle,
    :class:`HPMSimMIMDecoder`) to pixels; the L1 loss over the masked
    pixels (:class:`HPMSimMIMHead`, per patch).

    Args:
        backbone (dict): :class:`MaskTokenViT` config.
        neck (dict): :class:`HPMSimMIMDecoder` config.
        head (dict): :class:`HPMSimMIMHead` config.
        predictor (dict, optional): :class:`HPMLossPredictor` config; None
            for plain SimMIM.
        **kwargs: The other arguments of :class:`HPM` (``mask_generator``,
            ``teacher``, ...).
    """

    def loss(self, inputs: torch.Tensor, data_samples: List[DataSample],
             **kwargs) -> Dict[str, torch.Tensor]:
        """One step: teacher scores, mask, encode with mask tokens,
        reconstruct the pixels, per-patch L1 + predicting loss."""
        scores, _ = self.teach(inputs)
        mask = self.choose_mask(scores, inputs)
        latent, _ = self.backbone(inputs, mask)
        pred_scores = self.predict_losses(latent)
        reconstruction = self.neck(self.feature_map(latent))
        losses = self.head.loss(reconstruction, pred_scores, inputs, mask)
        return self.with_mask_log(losses, inputs)

    def feature_map(self, latent: torch.Tensor) -> torch.Tensor:
        """(B, 1 + N, C) tokens -> (B, C, h, w) patch features."""
        h, w = self.backbone.patch_resolution
        return latent[:, 1:].transpose(1, 2).unflatten(2, (h, w))


@MODELS.register_module()
class HPMBEiT(HPM):
    """BEiT (v1) with hard-patch mining.

    BEiT (Bao et al., ICLR 2022): the inputs are two views of each image
    (``TwoNormDataPreprocessor``): the encoder's at 224 px and the
    tokenizer's at 112 px; the frozen DALL-E tokenizer (mmpretrain's
    ``DALL-E``, weights from a local checkpoint) gives a visual token per
    patch; :class:`HPMBEiTHead` classifies the masked patches' tokens (the
    cross-entropy per patch). No neck.

    Args:
        backbone (dict): :class:`MaskTokenViT` config.
        head (dict): :class:`HPMBEiTHead` config.
        target_generator (dict): The tokenizer, ``dict(type='DALL-E', ...)``.
        predictor (dict, optional): :class:`HPMLossPredictor`; None for
            plain BEiT.
        **kwargs: The other arguments of :class:`HPM`.
    """

    def __init__(self, backbone: dict, head: dict, target_generator: dict,
                 neck=None, **kwargs) -> None:
        super().__init__(
            backbone=backbone, neck=neck, head=head,
            target_generator=target_generator, **kwargs)

    def extract_feat(self, inputs):
        if isinstance(inputs, (list, tuple)):
            inputs = inputs[0]
        return self.backbone(inputs, mask=None)

    def loss(self, inputs: List[torch.Tensor], data_samples: List[DataSample],
             **kwargs) -> Dict[str, torch.Tensor]:
        """One step: teacher scores, mask, encode with mask tokens, the
        tokenizer's tokens, per-patch cross-entropy + predicting loss."""
        images, tokenizer_images = inputs
        scores, _ = self.teach(images)
        mask = self.choose_mask(scores, images)
        latent, _ = self.backbone(images, mask)
        pred_scores = self.predict_losses(latent)
        with torch.no_grad():
            tokens = self.target_generator(tokenizer_images)
        losses = self.head.loss(latent, pred_scores, tokens, mask)
        return self.with_mask_log(losses, images)
