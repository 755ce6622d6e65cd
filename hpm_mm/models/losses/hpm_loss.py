"""Losses that train HPM's loss predictor (paper Eq. 3 and Eq. 4).

All take ``pred`` (B, N) predicted scores, ``target`` (B, N) true per-patch
reconstruction losses and ``mask`` (B, N) with 1 = masked; only masked
patches count. Targets are detached and everything is computed in fp32
whatever the autocast context.
"""
from typing import Dict, Optional

import torch
import torch.nn as nn
import torch.nn.functional as F
from mmpretrain.registry import MODELS


def _pairs(pred: torch.Tensor, target: torch.Tensor, mask: torch.Tensor):
    """Ordered pairs (i, j) of masked patches of one image.

    Returns:
        tuple: ``diff`` (B, N, N) = s_j - s_i, ``label`` (B, N, N) =
        [l_j > l_i]
        and ``valid`` (B, N, N): both masked, i != j, l_i != l_j (ties and
        the diagonal are excluded).
    """
    pred, target = pred.float(), target.detach().float()
    m = mask.bool()
    diff = pred.unsqueeze(1) - pred.unsqueeze(2)
    tdiff = target.unsqueeze(1) - target.unsqueeze(2)
    valid = m.unsqueeze(1) & m.unsqueeze(2) & (tdiff != 0)
    return diff, (tdiff > 0), valid


@MODELS.register_module()
class HPMRelativeLoss(nn.Module):
    """Relative (pairwise ranking) BCE loss, the HPM default (Eq. 4).

    For masked patches i != j of the same image with l_i != l_j, label
    y_ij = [l_j > l_i] and the logit is s_j - s_i; the BCE is summed over the
    valid ordered pairs of the whole batch and divided by their number. This
    is the authors' ``-log(sigmoid(.) + 1e-6)`` formulation computed with
    ``binary_cross_entropy_with_logits`` (no epsilon needed).

    Args:
        loss_weight (float): Multiplier of the loss. Defaults to 1.0.

    Example:
        >>> import torch
        >>> loss = HPMRelativeLoss()
        >>> target, mask = torch.rand(2, 8), torch.ones(2, 8)
        >>> bool(loss(target, target, mask) < loss(-target, target, mask))
        True
    """

    def __init__(self, loss_weight: float = 1.0) -> None:
        super().__init__()
        self.loss_weight = loss_weight

    def forward(self, pred: torch.Tensor, target: torch.Tensor,
                mask: torch.Tensor) -> torch.Tensor:
        with torch.autocast(device_type=pred.device.type, enabled=False):
            diff, label, valid = _pairs(pred, target, mask)
            weight = valid.float()
            loss = F.binary_cross_entropy_with_logits(
                diff, label.float(), weight=weight, reduction='sum')
            return self.loss_weight * loss / weight.sum().clamp(min=1.0)


@MODELS.register_module()
class HPMAbsoluteLoss(nn.Module):
    """Absolute MSE loss on standardised targets (Eq. 3, the ablation).

    Targets are standardised per image over its masked patches,
    ``(l - mean) / sqrt(var + eps)`` (unbiased variance), and the loss is the
    mean of ``(s - l_std)^2`` over masked patches.

    Args:
        eps (float): Added to the variance. Defaults to 1e-6.
        loss_weight (float): Multiplier of the loss. Defaults to 1.0.
    """

    def __init__(self, eps: float = 1e-6, loss_weight: float = 1.0) -> None:
        super().__init__()
        self.eps = eps
        self.loss_weight = loss_weight

    def forward(self, pred: torch.Tensor, target: torch.Tensor,
                mask: torch.Tensor) -> torch.Tensor:
        with torch.autocast(device_type=pred.device.type, enabled=False):
            pred, target, m = pred.float(), target.detach().float(), \
                mask.float()
            n = m.sum(1, keepdim=True).clamp(min=1.0)
            mean = (target * m).sum(1, keepdim=True) / n
            var = (((target - mean)**2) * m).sum(
                1, keepdim=True) / (n - 1).clamp(min=1.0)
            t_std = (target - mean) / torch.sqrt(var + self.eps)
            loss = (((pred - t_std)**2) * m).sum() / m.sum().clamp(min=1.0)
            return self.loss_weight * loss


@torch.no_grad()
def pairwise_rank_accuracy(pred: torch.Tensor, target: torch.Tensor,
                           mask: torch.Tensor) -> torch.Tensor:
    """Fraction of valid masked pairs the predictor orders correctly.

    0.5 is chance; 1.0 means ``pred`` sorts the masked patches exactly as the
    true losses do (pairs with tied targets are excluded; tied predictions
    count as half right).

    Returns:
        torch.Tensor: scalar in [0, 1] (0.5 when no pair is valid).
    """
    diff, label, valid = _pairs(pred, target, mask)
    correct = torch.where(diff == 0, 0.5, ((diff > 0) == label).float())
    n = valid.sum()
    acc = (correct * valid).sum() / n.clamp(min=1)
    return torch.where(n > 0, acc, torch.full_like(acc, 0.5))


def hpm_losses(per_patch: torch.Tensor,
               mask: torch.Tensor,
               scores: Optional[torch.Tensor] = None,
               loss_pred: Optional[nn.Module] = None,
               per_image: bool = False) -> Dict[str, torch.Tensor]:
    """What every HPM head returns, from its per-patch losses.

    Args:
        per_patch (torch.Tensor): (B, N) fp32 loss of every patch (only
            masked ones are read) under the framework's own loss.
        mask (torch.Tensor): (B, N), 1 = masked.
        scores (torch.Tensor, optional): (B, N) the student's predicted
            losses.
        loss_pred (nn.Module, optional): The predicting loss.
        per_image (bool): ``loss_rec`` is the mean over the images of each
            image's mean over its masked patches (an image without any
            counts 0, as iBOT), instead of the mean over all masked
            patches. Defaults to False.

    Returns:
        dict: ``loss_rec`` and, with a predictor, ``loss_pred`` and
        ``rank_acc`` (log only).
    """
    m = mask.float()
    if per_image:
        loss_rec = ((per_patch * m).sum(1) / m.sum(1).clamp(min=1.)).mean()
    else:
        loss_rec = (per_patch * m).sum() / m.sum()
    losses = dict(loss_rec=loss_rec)
    if loss_pred is not None and scores is not None:
        losses['loss_pred'] = loss_pred(scores, per_patch, m)
        losses['rank_acc'] = pairwise_rank_accuracy(scores, per_patch, m)
    return losses
