from typing import Dict, Optional

import torch
import torch.nn.functional as F
from mmpretrain.models.heads import MAEPretrainHead
from mmpretrain.registry import MODELS

from ..losses import hpm_losses

# the default predicting loss (configs: built, never mutated)
RELATIVE_LOSS = dict(type='HPMRelativeLoss')


@MODELS.register_module()
class HPMPretrainHead(MAEPretrainHead):
    """HPM head: the per-patch reconstruction loss (B, N) in fp32 (``loss``:
    mmpretrain's ``PixelReconstructionLoss``, L2 by default), the loss
    predictor's target; ``loss_rec`` its mean over the masked patches, plus
    ``loss_pred`` (``loss_pred``: default ``HPMRelativeLoss``; None: plain
    MAE) and the log-only ``rank_acc``. ``norm_pix``: MAE's ``norm_pix_loss``
    (the authors: False).

    Args:
        loss_pred (dict, optional): the predicting loss L_pred; None: plain
            MAE. Defaults to HPMRelativeLoss.
        norm_pix (bool): MAE's ``norm_pix_loss`` (each target patch
            standardised). Defaults to False, the authors'.
        patch_size (int): the patch side, pixels. Defaults to 16.
        in_channels (int): image channels. Defaults to 3.
        loss (dict): the per-patch reconstruction loss. Defaults to
            mmpretrain's PixelReconstructionLoss, L2.
    """

    def __init__(
        self,
        loss_pred: Optional[dict] = RELATIVE_LOSS,
        norm_pix: bool = False,
        patch_size: int = 16,
        in_channels: int = 3,
        loss: dict = dict(type='PixelReconstructionLoss', criterion='L2')
    ) -> None:
        super().__init__(loss, norm_pix, patch_size, in_channels)
        self.loss_pred = MODELS.build(loss_pred) if loss_pred else None

    def patch_losses(self, pred: torch.Tensor,
                     imgs: torch.Tensor) -> torch.Tensor:
        """Per-patch loss (B, N) in fp32 of ``pred`` (B, N, p*p*C) against the
        images (B, C, H, W), by the ``loss`` criterion (MSE by default)."""
        target = self.construct_target(imgs).float()
        return self.loss_module.penalty(pred.float(), target).mean(-1)

    def loss(self, pred: torch.Tensor, scores: Optional[torch.Tensor],
             target: torch.Tensor,
             mask: torch.Tensor) -> Dict[str, torch.Tensor]:
        """``loss_rec`` and, with ``scores`` (B, N) of the student's predictor,
        ``loss_pred`` and ``rank_acc``; ``pred`` (B, N, D) against ``target``
        (the images), over ``mask`` (B, N, 1 = masked)."""
        with torch.autocast(device_type=mask.device.type, enabled=False):
            per_patch = self.patch_losses(pred, target)
            return hpm_losses(per_patch, mask, scores, self.loss_pred)


@MODELS.register_module()
class HPMFeaturePretrainHead(HPMPretrainHead):
    """HPM head for feature targets (paper Tab. 1): prediction and target
    l2-normalised over channels, a patch's loss their MSE averaged over C,
    ``(2 - 2 cos) / C``.

    Args:
        loss_pred (dict, optional): the predicting loss; None: none. Defaults
            to HPMRelativeLoss.
    """

    def __init__(self, loss_pred: Optional[dict] = RELATIVE_LOSS) -> None:
        super().__init__(loss_pred=loss_pred)

    def patch_losses(self, pred: torch.Tensor,
                     target: torch.Tensor) -> torch.Tensor:
        """(B, N, C) prediction and target features -> (B, N) fp32."""
        if pred.shape != target.shape:
            raise ValueError(f'prediction {tuple(pred.shape)}, target '
                             f'{tuple(target.shape)}. Fix: '
                             f'neck.predict_feature_dim={target.shape[-1]}.')
        pred = F.normalize(pred.float(), dim=-1)
        target = F.normalize(target.detach().float(), dim=-1)
        return ((pred - target)**2).mean(-1)
