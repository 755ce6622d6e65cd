"""HPM heads for frameworks whose encoder keeps mask tokens (SimMIM, BEiT,
iBOT).

Each computes its framework's own loss **per patch**, so the loss predictor
learns from exactly what the framework minimises: the mean of the per-patch
losses over the masked patches is the framework's loss (tested against
mmpretrain's heads).
"""
from typing import Dict, Optional, Tuple

import torch
import torch.nn.functional as F
from mmengine.dist import all_reduce
from mmengine.model import BaseModule
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

    def __init__(
        self,
        patch_size: int = 16,
        in_channels: int = 3,
        loss_pred: Optional[dict] = dict(type='HPMRelativeLoss')
    ) -> None:
        super().__init__(
            patch_size=patch_size,
            loss=dict(
                type='PixelReconstructionLoss',
                criterion='L1',
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
            return hpm_losses(
                self.patch_losses(pred, imgs), mask, scores, self.loss_pred)


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

    def __init__(
        self,
        embed_dims: int = 768,
        num_embed: int = 8192,
        loss_pred: Optional[dict] = dict(type='HPMRelativeLoss'),
        init_cfg=dict(type='TruncNormal', layer='Linear', std=0.02, bias=0)
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


@MODELS.register_module()
class HPMiBOTHead(BaseModule):
    """iBOT's two self-distillation losses, the masked-patch one per patch,
    plus HPM's predicting loss.

    As ``iBOTLoss`` of iBOT's ``main_ibot.py``: the teacher's outputs are
    centred (an EMA of their batch mean, all-reduced over the ranks) and
    sharpened (temperature warmed up linearly from ``warmup_teacher_temp``
    over ``warmup_teacher_temp_epochs`` epochs, per epoch), the student's
    divided by ``student_temp``; cross-entropies between their softmaxes:

    - ``loss_cls``: the student's CLS of every view against the teacher's
      CLS of every *other* global view, averaged over the pairs (DINO);
    - ``loss_rec``: each masked patch of a global view against the
      teacher's same patch of the same (unmasked) view -- the per-patch
      loss the predictor learns; its mean per image over its masked
      patches, averaged over the images (an unmasked image counts 0), is
      iBOT's patch loss.

    Args:
        out_channels (int): Prototypes K (the neck's). Defaults to 8192.
        student_temp (float): Defaults to 0.1.
        teacher_temp (float): CLS temperature after warmup. Defaults to 0.07
            (iBOT's ViT recipes).
        teacher_patch_temp (float): Patch temperature after warmup.
            Defaults to 0.07.
        warmup_teacher_temp (float): Defaults to 0.04.
        warmup_teacher_patch_temp (float): Defaults to 0.04.
        warmup_teacher_temp_epochs (int): Defaults to 30.
        center_momentum (float): Of the CLS center. Defaults to 0.9.
        patch_center_momentum (float): Defaults to 0.9.
        lambda_cls (float): Weight of ``loss_cls``. Defaults to 1.0.
        lambda_patch (float): Weight of ``loss_rec``. Defaults to 1.0.
        loss_pred (dict, optional): The predicting loss; None trains no
            predictor (plain iBOT). Defaults to
            ``dict(type='HPMRelativeLoss')``.
    """

    def __init__(
        self,
        out_channels: int = 8192,
        student_temp: float = 0.1,
        teacher_temp: float = 0.07,
        teacher_patch_temp: float = 0.07,
        warmup_teacher_temp: float = 0.04,
        warmup_teacher_patch_temp: float = 0.04,
        warmup_teacher_temp_epochs: int = 30,
        center_momentum: float = 0.9,
        patch_center_momentum: float = 0.9,
        lambda_cls: float = 1.0,
        lambda_patch: float = 1.0,
        loss_pred: Optional[dict] = dict(type='HPMRelativeLoss')
    ) -> None:
        super().__init__()
        self.student_temp = student_temp
        self.temps = ((warmup_teacher_temp, teacher_temp),
                      (warmup_teacher_patch_temp, teacher_patch_temp))
        self.warmup_epochs = warmup_teacher_temp_epochs
        self.momenta = (center_momentum, patch_center_momentum)
        self.lambda_cls = lambda_cls
        self.lambda_patch = lambda_patch
        self.loss_pred = MODELS.build(loss_pred) if loss_pred else None
        self.register_buffer('center', torch.zeros(1, out_channels))
        self.register_buffer('patch_center', torch.zeros(1, out_channels))
        self.epoch = 0

    def set_epoch(self, epoch: float) -> None:
        """The epoch whose teacher temperatures :meth:`loss` uses."""
        self.epoch = int(epoch)

    def teacher_temps(self) -> Tuple[float, float]:
        """(CLS, patch) teacher temperatures at this epoch: iBOT's
        ``np.linspace(warmup, final, W)[epoch]``, then ``final``."""
        r = min(self.epoch / max(self.warmup_epochs - 1, 1), 1.) \
            if self.warmup_epochs > 0 else 1.
        return tuple(w + r * (f - w) for w, f in self.temps)

    def patch_losses(self, student_patch: torch.Tensor,
                     teacher_patch: torch.Tensor,
                     mask: torch.Tensor) -> torch.Tensor:
        """Per-patch distillation cross-entropy, (G * B, N) fp32, 0 where
        visible.

        Args:
            student_patch (torch.Tensor): (M, K) student logits of the
                masked patches (``mask`` order).
            teacher_patch (torch.Tensor): (G, B, N, K) teacher logits.
            mask (torch.Tensor): (G * B, N), 1 = masked.
        """
        m = mask.bool()
        temp = self.teacher_temps()[1]
        target = F.softmax(
            (teacher_patch.flatten(0, 1)[m].float() - self.patch_center) /
            temp,
            dim=-1)
        ce = -(target * F.log_softmax(
            student_patch.float() / self.student_temp, dim=-1)).sum(-1)
        return torch.zeros(m.shape, device=ce.device).masked_scatter(m, ce)

    def loss(self, student_cls: torch.Tensor, student_patch: torch.Tensor,
             teacher_out: torch.Tensor, scores: Optional[torch.Tensor],
             mask: torch.Tensor) -> Dict[str, torch.Tensor]:
        """``loss_cls``, ``loss_rec`` and, with a predictor, ``loss_pred``
        and ``rank_acc``; then the centers move.

        Args:
            student_cls (torch.Tensor): (V, B, K) student CLS logits of the
                V views, the G global ones first.
            student_patch (torch.Tensor): (M, K) student logits of the
                masked patches of the global views (``mask`` order).
            teacher_out (torch.Tensor): (G, B, 1 + N, K) teacher logits of
                the unmasked global views, CLS first.
            scores (torch.Tensor, optional): (G * B, N) predicted losses.
            mask (torch.Tensor): (G * B, N), 1 = masked.
        """
        with torch.autocast(device_type=mask.device.type, enabled=False):
            # the patches stay in the step's precision: fp32 copies of the
            # masked ones only (patch_losses) and fp32 sums (the center)
            teacher = teacher_out.detach()
            t_cls, t_patch = teacher[:, :, 0].float(), teacher[:, :, 1:]
            p_cls = F.softmax(
                (t_cls - self.center) / self.teacher_temps()[0], dim=-1)
            log_s = F.log_softmax(
                student_cls.float() / self.student_temp, dim=-1)
            # (G, V): mean over the batch of CE(teacher g, student v)
            ce = -torch.einsum('gbk,vbk->gv', p_cls, log_s) / log_s.shape[1]
            other = ~torch.eye(*ce.shape, dtype=torch.bool, device=ce.device)
            losses = hpm_losses(
                self.patch_losses(student_patch, t_patch, mask),
                mask,
                scores,
                self.loss_pred,
                per_image=True)
            losses['loss_rec'] = losses['loss_rec'] * self.lambda_patch
            self.update_centers(t_cls, t_patch)
        return dict(loss_cls=ce[other].mean() * self.lambda_cls, **losses)

    @torch.no_grad()
    def update_centers(self, t_cls: torch.Tensor,
                       t_patch: torch.Tensor) -> None:
        """EMA of the teacher's mean CLS and mean patch output (every
        patch of every global view, all ranks). A non-finite batch (whose
        step the optimizer wrapper's guard skips) leaves them as they were,
        decided on the device."""
        for center, batch, m in ((self.center, t_cls.mean(
            (0, 1)), self.momenta[0]), (self.patch_center,
                                        t_patch.mean((0, 1, 2),
                                                     dtype=torch.float32),
                                        self.momenta[1])):
            all_reduce(batch, op='mean')
            moved = center * m + batch.unsqueeze(0) * (1 - m)
            center.copy_(
                torch.where(torch.isfinite(batch).all(), moved, center))
