"""HPM heads for frameworks whose encoder keeps mask tokens (SimMIM, BEiT).

Each computes its framework's own loss **per patch**, so the loss predictor
learns from exactly what the framework minimises: the mean of the per-patch
losses over the masked patches is the framework's loss (tested against
mmpretrain's heads).
"""
from typing import Dict, Optional

import torch
import torch.nn.functional as F
from mmpretrain.models.heads import BEiTV1Head, SimMIMHead
from mmpretrain.registry import MODELS

from ..losses import hpm_losses


@MODELS.register_module()
class HPMSimMIMHead(SimMIMHead):
    """SimMIM's L1 pixel loss per masked patch, plus HPM's predicting loss.

    A patch's loss is the mean absolute error over its ``p x p x C``
    pixels; their mean over the masked patches equals mmpretrain's
    :class:`SimMIMHead` loss (``PixelReconstructionLoss``, L1) with the
    mask upsampled to pixels.

    Args:
        patch_size (int): Patch size (the encoder stride). Defaults to 16.
        in_channels (int): Image channels. Defaults to 3.
        loss_pred (dict, optional): The predicting loss; None trains no
            predictor (plain SimMIM). Defaults to
            ``dict(type='HPMRelativeLoss')``.
    """

    def __init__(self,
                 patch_size: int = 16,
                 in_channels: int = 3,
                 loss_pred: Optional[dict] = dict(type='HPMRelativeLoss')
                 ) -> None:
        super().__init__(
            patch_size=patch_size,
            loss=dict(type='PixelReconstructionLoss', criterion='L1',
                      channel=in_channels))
        self.loss_pred = MODELS.build(loss_pred) if loss_pred else None

    def patch_losses(self, pred: torch.Tensor,
                     imgs: torch.Tensor) -> torch.Tensor:
        """(B, C, H, W) reconstruction and images -> (B, N) mean L1."""
        B, C, H, W = imgs.shape
        p = self.patch_size
        err = (pred.float() - imgs.float()).abs()
        return err.view(B, C, H // p, p, W // p, p).mean((1, 3, 5)).flatten(1)

    def loss(self, pred: torch.Tensor, scores: Optional[torch.Tensor],
             imgs: torch.Tensor,
             mask: torch.Tensor) -> Dict[str, torch.Tensor]:
        """``loss_rec`` (SimMIM's loss), ``loss_pred``, ``rank_acc``.

        Args:
            pred (torch.Tensor): (B, C, H, W) reconstruction.
            scores (torch.Tensor, optional): (B, N) predicted losses.
            imgs (torch.Tensor): (B, C, H, W) input images.
            mask (torch.Tensor): (B, N), 1 = masked.
        """
        with torch.autocast(device_type=mask.device.type, enabled=False):
            return hpm_losses(self.patch_losses(pred, imgs), mask, scores,
                              self.loss_pred)


@MODELS.register_module()
class HPMBEiTHead(BEiTV1Head):
    """BEiT's masked visual-token cross-entropy per masked patch, plus HPM's
    predicting loss.

    The linear classifier runs on the masked tokens only (as
    :class:`BEiTV1Head`); a patch's loss is its token's cross-entropy, and
    their mean over the masked patches is BEiT's loss.

    Args:
        embed_dims (int): Encoder width. Defaults to 768.
        num_embed (int): Tokenizer vocabulary. Defaults to 8192 (DALL-E).
        loss_pred (dict, optional): The predicting loss; None trains no
            predictor (plain BEiT). Defaults to
            ``dict(type='HPMRelativeLoss')``.
    """

    def __init__(self,
                 embed_dims: int = 768,
                 num_embed: int = 8192,
                 loss_pred: Optional[dict] = dict(type='HPMRelativeLoss'),
                 init_cfg=dict(
                     type='TruncNormal', layer='Linear', std=0.02, bias=0)
                 ) -> None:
        super().__init__(
            embed_dims=embed_dims,
            num_embed=num_embed,
            loss=dict(type='CrossEntropyLoss'),
            init_cfg=init_cfg)
        self.loss_pred = MODELS.build(loss_pred) if loss_pred else None

    def patch_losses(self, feats: torch.Tensor, target: torch.Tensor,
                     mask: torch.Tensor) -> torch.Tensor:
        """Per-patch token cross-entropy, (B, N) fp32, 0 where visible.

        Args:
            feats (torch.Tensor): Encoder output (B, 1 + N, C).
            target (torch.Tensor): Tokenizer logits (B, V, h, w).
            mask (torch.Tensor): (B, N), 1 = masked.
        """
        m = mask.bool()
        ids = target.argmax(1).flatten(1)
        logits = self.cls_head(feats[:, 1:][m])
        ce = F.cross_entropy(logits.float(), ids[m], reduction='none')
        return torch.zeros(m.shape, device=ce.device).masked_scatter(m, ce)

    def loss(self, feats: torch.Tensor, scores: Optional[torch.Tensor],
             target: torch.Tensor,
             mask: torch.Tensor) -> Dict[str, torch.Tensor]:
        """``loss_rec`` (BEiT's loss), ``loss_pred``, ``rank_acc``."""
        per_patch = self.patch_losses(feats, target, mask)
        with torch.autocast(device_type=mask.device.type, enabled=False):
            return hpm_losses(per_patch, mask, scores, self.loss_pred)
