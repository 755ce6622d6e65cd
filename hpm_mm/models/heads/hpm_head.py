from typing import Dict, Optional

import torch
import torch.nn.functional as F
from mmpretrain.models.heads import MAEPretrainHead
from mmpretrain.registry import MODELS

from ..losses import hpm_losses

# the default predicting loss and reconstruction criterion (configs: built,
# never mutated)
RELATIVE_LOSS = dict(type='HPMRelativeLoss')
PIXEL_L2 = dict(type='PixelReconstructionLoss', criterion='L2')


@MODELS.register_module()
class HPMPretrainHead(MAEPretrainHead):
    """HPM head: per-patch reconstruction loss plus the predicting loss.

    The reconstruction loss is kept as a (B, N) matrix (the ``loss``
    criterion averaged over the pixels of each patch, in fp32) because it is
    the target of the loss predictor; ``loss_rec`` is its mean over masked
    patches, ``loss_pred`` comes from the ``loss_pred`` config
    (:class:`HPMRelativeLoss` by default).

    Args:
        loss_pred (dict, optional): Config of the predicting loss. ``None``
            trains no loss predictor (plain MAE). Defaults to
            ``dict(type='HPMRelativeLoss')``.
        norm_pix (bool): Normalise each target patch by its mean and std
            (MAE's ``norm_pix_loss``). The authors' HPM scripts use False.
            Defaults to False.
        patch_size (int): Patch size. Defaults to 16.
        in_channels (int): Image channels. Defaults to 3.
        loss (dict): The reconstruction criterion, as
            :class:`MAEPretrainHead`'s: mmpretrain's
            ``PixelReconstructionLoss``, whose ``penalty`` (L2 or L1) gives
            the per-patch losses. Defaults to L2 (MAE's and the authors').
    """

    def __init__(self,
                 loss_pred: Optional[dict] = RELATIVE_LOSS,
                 norm_pix: bool = False,
                 patch_size: int = 16,
                 in_channels: int = 3,
                 loss: dict = PIXEL_L2) -> None:
        super().__init__(
            loss=loss,
            norm_pix=norm_pix,
            patch_size=patch_size,
            in_channels=in_channels)
        self.loss_pred = MODELS.build(loss_pred) if loss_pred else None

    def patch_losses(self, pred: torch.Tensor,
                     imgs: torch.Tensor) -> torch.Tensor:
        """Per-patch loss (the ``loss`` criterion: MSE by default) in fp32.

        Args:
            pred (torch.Tensor): (B, N, p*p*C) reconstruction.
            imgs (torch.Tensor): (B, C, H, W) input images.

        Returns:
            torch.Tensor: (B, N) mean squared error of every patch.
        """
        target = self.construct_target(imgs).float()
        return self.loss_module.penalty(pred.float(), target).mean(-1)

    def loss(self, pred: torch.Tensor, scores: Optional[torch.Tensor],
             target: torch.Tensor,
             mask: torch.Tensor) -> Dict[str, torch.Tensor]:
        """Compute the losses and the predictor's ranking accuracy.

        Args:
            pred (torch.Tensor): (B, N, D) reconstruction.
            scores (torch.Tensor, optional): (B, N) predicted losses of the
                student's loss predictor.
            target (torch.Tensor): What :meth:`patch_losses` compares
                ``pred`` with: the (B, C, H, W) input images here.
            mask (torch.Tensor): (B, N), 1 = masked.

        Returns:
            dict: ``loss_rec``, and with a predictor ``loss_pred`` and
            ``rank_acc`` (log only).
        """
        with torch.autocast(device_type=mask.device.type, enabled=False):
            per_patch = self.patch_losses(pred, target)
            return hpm_losses(per_patch, mask, scores, self.loss_pred)


@MODELS.register_module()
class HPMFeaturePretrainHead(HPMPretrainHead):
    """HPM head for feature targets (paper Tab. 1): the reconstructor
    predicts a target network's patch features.

    As the paper: both the prediction and the target are l2-normalised over
    the channels, then compared with the MSE; a patch's loss is the mean
    over its C channels, ``||p/|p| - t/|t|||^2 / C = (2 - 2 cos) / C``
    (MILAN's ``CosineSimilarityLoss(shift_factor=2, scale_factor=2)`` per
    patch, divided by C). The loss predictor learns from it.

    Args:
        loss_pred (dict, optional): See :class:`HPMPretrainHead`.
    """

    def __init__(self, loss_pred: Optional[dict] = RELATIVE_LOSS) -> None:
        super().__init__(loss_pred=loss_pred)

    def patch_losses(self, pred: torch.Tensor,
                     target: torch.Tensor) -> torch.Tensor:
        """(B, N, C) prediction and target features -> (B, N) fp32."""
        if pred.shape != target.shape:
            raise ValueError(
                f'the reconstructor predicts {tuple(pred.shape)} but the '
                f'target features are {tuple(target.shape)}: set '
                f'neck.predict_feature_dim={target.shape[-1]}.')
        pred = F.normalize(pred.float(), dim=-1)
        target = F.normalize(target.detach().float(), dim=-1)
        return ((pred - target)**2).mean(-1)
