from typing import Dict, Optional

import torch
from mmpretrain.models.heads import MAEPretrainHead
from mmpretrain.registry import MODELS

from ..losses import pairwise_rank_accuracy


@MODELS.register_module()
class HPMPretrainHead(MAEPretrainHead):
    """HPM head: per-patch reconstruction loss plus the predicting loss.

    The reconstruction loss is kept as a (B, N) matrix (mean over the pixels
    of each patch) because it is the target of the loss predictor;
    ``loss_rec`` is its mean over masked patches, ``loss_pred`` comes from
    the ``loss_pred`` config (:class:`HPMRelativeLoss` by default).

    Args:
        loss_pred (dict, optional): Config of the predicting loss. ``None``
            trains no loss predictor (plain MAE). Defaults to
            ``dict(type='HPMRelativeLoss')``.
        norm_pix (bool): Normalise each target patch by its mean and std
            (MAE's ``norm_pix_loss``). The authors' HPM scripts use False.
            Defaults to False.
        patch_size (int): Patch size. Defaults to 16.
        in_channels (int): Image channels. Defaults to 3.
    """

    def __init__(self,
                 loss_pred: Optional[dict] = dict(type='HPMRelativeLoss'),
                 norm_pix: bool = False,
                 patch_size: int = 16,
                 in_channels: int = 3) -> None:
        # MAEPretrainHead builds ``loss``; ours is per patch, so skip it.
        super(MAEPretrainHead, self).__init__()
        self.norm_pix = norm_pix
        self.patch_size = patch_size
        self.in_channels = in_channels
        self.loss_pred = MODELS.build(loss_pred) if loss_pred else None

    def patch_losses(self, pred: torch.Tensor,
                     imgs: torch.Tensor) -> torch.Tensor:
        """Per-patch MSE in fp32.

        Args:
            pred (torch.Tensor): (B, N, p*p*C) reconstruction.
            imgs (torch.Tensor): (B, C, H, W) input images.

        Returns:
            torch.Tensor: (B, N) mean squared error of every patch.
        """
        target = self.construct_target(imgs).float()
        return ((pred.float() - target)**2).mean(-1)

    def loss(self, pred: torch.Tensor, scores: Optional[torch.Tensor],
             imgs: torch.Tensor, mask: torch.Tensor) -> Dict[str, torch.Tensor]:
        """Compute the losses and the predictor's ranking accuracy.

        Args:
            pred (torch.Tensor): (B, N, p*p*C) reconstruction.
            scores (torch.Tensor, optional): (B, N) predicted losses of the
                student's loss predictor.
            imgs (torch.Tensor): (B, C, H, W) input images.
            mask (torch.Tensor): (B, N), 1 = masked.

        Returns:
            dict: ``loss_rec``, and with a predictor ``loss_pred`` and
            ``rank_acc`` (log only).
        """
        with torch.autocast(device_type=imgs.device.type, enabled=False):
            per_patch = self.patch_losses(pred, imgs)
            m = mask.float()
            losses = dict(loss_rec=(per_patch * m).sum() / m.sum())
            if self.loss_pred is not None and scores is not None:
                losses['loss_pred'] = self.loss_pred(scores, per_patch, m)
                losses['rank_acc'] = pairwise_rank_accuracy(
                    scores, per_patch, m)
        return losses
