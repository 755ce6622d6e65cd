"""The losses that train HPM's loss predictor (Eq. 3 and 4): ``pred`` (B, N)
scores against the detached ``target`` (B, N) losses over ``mask``
(1 = masked), in fp32 whatever the autocast (the inputs cast to fp32; no
autocast policy lowers the ops that follow)."""
from typing import Dict, Optional

import torch
import torch.nn as nn
import torch.nn.functional as F
from mmpretrain.registry import MODELS


def _pairs(pred: torch.Tensor, target: torch.Tensor, mask: torch.Tensor):
    """Ordered pairs of masked patches of one image: ``diff`` = s_j - s_i,
    ``label`` = [l_j > l_i], ``valid`` (both masked, i != j, no tie)."""
    pred, target = pred.float(), target.detach().float()
    m = mask.bool()
    diff = pred.unsqueeze(1) - pred.unsqueeze(2)  # (B, N, N): [i, j] s_j-s_i
    tdiff = target.unsqueeze(1) - target.unsqueeze(2)  # (B, N, N) l_j - l_i
    valid = m.unsqueeze(1) & m.unsqueeze(2) & (tdiff != 0)  # (B, N, N)
    return diff, (tdiff > 0), valid


@MODELS.register_module()
class HPMRelativeLoss(nn.Module):
    """Relative (pairwise ranking) BCE loss, the HPM default (Eq. 4): for
    masked patches i != j of an image with l_i != l_j, the logit s_j - s_i
    against y_ij = [l_j > l_i], summed over the valid ordered pairs of the
    batch and divided by their number (the authors' formulation, computed with
    ``binary_cross_entropy_with_logits``).

    Args:
        loss_weight (float): Defaults to 1.0."""

    def __init__(self, loss_weight: float = 1.0) -> None:
        super().__init__()
        self.loss_weight = loss_weight

    def forward(self, pred: torch.Tensor, target: torch.Tensor,
                mask: torch.Tensor) -> torch.Tensor:
        diff, label, valid = _pairs(pred, target, mask)  # (B, N, N) fp32
        weight = valid.float()  # the mean over the batch's valid pairs
        loss = F.binary_cross_entropy_with_logits(
            diff, label.float(), weight=weight, reduction='sum')
        return self.loss_weight * loss / weight.sum().clamp(min=1.0)


@MODELS.register_module()
class HPMAbsoluteLoss(nn.Module):
    """Absolute MSE on standardised targets (Eq. 3, the ablation): targets
    standardised per image over its masked patches, the mean of
    ``(s - l_std)^2`` over them.

    Args:
        eps (float): added to the variance before the square root. Defaults to
            1e-6, the authors'.
        loss_weight (float): the loss's weight. Defaults to 1.
    """

    def __init__(self, eps: float = 1e-6, loss_weight: float = 1.0) -> None:
        super().__init__()
        self.eps = eps
        self.loss_weight = loss_weight

    def forward(self, pred: torch.Tensor, target: torch.Tensor,
                mask: torch.Tensor) -> torch.Tensor:
        pred, target, m = pred.float(), target.detach().float(), \
            mask.float()
        n = m.sum(1, keepdim=True).clamp(min=1.0)  # (B, 1) masked
        mean = (target * m).sum(1, keepdim=True) / n  # (B, 1)
        var = (((target - mean)**2) * m).sum(
            1, keepdim=True) / (n - 1).clamp(min=1.0)
        t_std = (target - mean) / torch.sqrt(var + self.eps)
        loss = (((pred - t_std)**2) * m).sum() / m.sum().clamp(min=1.0)
        return self.loss_weight * loss


@torch.no_grad()
def pairwise_rank_accuracy(pred: torch.Tensor, target: torch.Tensor,
                           mask: torch.Tensor) -> torch.Tensor:
    """Fraction of valid masked pairs ``pred`` orders as the true losses (tied
    targets excluded, tied predictions half right; 0.5 is chance and the
    value without pairs)."""
    diff, label, valid = _pairs(pred, target, mask)
    correct = torch.where(diff == 0, 0.5, ((diff > 0) == label).float())
    n = valid.sum()
    acc = (correct * valid).sum() / n.clamp(min=1)
    return torch.where(n > 0, acc, torch.full_like(acc, 0.5))


def hpm_losses(
        per_patch: torch.Tensor,
        mask: torch.Tensor,
        scores: Optional[torch.Tensor] = None,
        loss_pred: Optional[nn.Module] = None) -> Dict[str, torch.Tensor]:
    """What every HPM head returns from its per-patch losses ``per_patch``
    (B, N, fp32) over ``mask``: ``loss_rec`` (the mean over masked patches)
    and, with ``scores`` and ``loss_pred``, ``loss_pred`` and the log-only
    ``rank_acc``."""
    m = mask.float()
    losses = dict(loss_rec=(per_patch * m).sum() / m.sum())
    if loss_pred is not None and scores is not None:
        losses['loss_pred'] = loss_pred(scores, per_patch, m)
        losses['rank_acc'] = pairwise_rank_accuracy(scores, per_patch, m)
    return losses
