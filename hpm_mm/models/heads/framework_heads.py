"""HPM heads for the mask-token frameworks (SimMIM, BEiT, iBOT): each
computes its framework's loss per patch, whose mean over the masked
patches is the framework's loss (tested against mmpretrain's heads)."""
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
    """SimMIM's L1 pixel loss per masked patch (the mean over a patch's pixels;
    their mean is mmpretrain's :class:`SimMIMHead` loss), plus HPM's
    predicting loss (``loss_pred``; None: plain SimMIM).

    Args:
        patch_size (int): the patch side, pixels. Defaults to 16.
        in_channels (int): image channels. Defaults to 3.
        loss_pred (dict, optional): HPM's predicting loss; None: plain SimMIM.
            Defaults to HPMRelativeLoss.
    """

    def __init__(
        self,
        patch_size: int = 16,
        in_channels: int = 3,
        loss_pred: Optional[dict] = dict(type='HPMRelativeLoss')
    ) -> None:
        super().__init__(
            patch_size,
            dict(
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
        """``loss_rec`` (SimMIM's), ``loss_pred``, ``rank_acc`` of ``pred`` and
        ``imgs`` (B, C, H, W) over ``mask`` (B, N)."""
        with torch.autocast(device_type=mask.device.type, enabled=False):
            return hpm_losses(
                self.patch_losses(pred, imgs), mask, scores, self.loss_pred)


@MODELS.register_module()
class HPMBEiTHead(BEiTV1Head):
    """BEiT's masked visual-token cross-entropy per masked patch (the
    classifier on the masked tokens only, as :class:`BEiTV1Head`), plus HPM's
    predicting loss (``loss_pred``; None: plain BEiT). ``num_embed``: the
    tokenizer's vocabulary (8192, DALL-E).

    Args:
        embed_dims (int): the encoder's width. Defaults to 768.
        num_embed (int): the tokenizer's vocabulary. Defaults to 8192 (DALL-E).
        loss_pred (dict, optional): HPM's predicting loss; None: plain BEiT.
            Defaults to HPMRelativeLoss.
        init_cfg (dict): the classifier's initialisation. Defaults to truncated
            normal, std 0.02.
    """

    def __init__(
        self,
        embed_dims: int = 768,
        num_embed: int = 8192,
        loss_pred: Optional[dict] = dict(type='HPMRelativeLoss'),
        init_cfg=dict(type='TruncNormal', layer='Linear', std=0.02, bias=0)
    ) -> None:
        super().__init__(embed_dims, num_embed, dict(type='CrossEntropyLoss'),
                         init_cfg)
        self.loss_pred = MODELS.build(loss_pred) if loss_pred else None

    def patch_losses(self, feats: torch.Tensor, target: torch.Tensor,
                     mask: torch.Tensor) -> torch.Tensor:
        """Per-patch token cross-entropy (B, N) fp32, 0 where visible, of the
        encoder output (B, 1 + N, C) against the tokenizer's logits."""
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
    """iBOT's two self-distillation losses (``iBOTLoss`` of ``main_ibot.py``),
    the masked-patch one per patch, plus HPM's predicting loss. The teacher's
    outputs are centred (EMA of the batch mean, all-reduced) and sharpened
    (temperatures warmed up per epoch); ``loss_cls``: each view's CLS against
    the teacher's CLS of every other global view; ``loss_rec``: each masked
    patch against the teacher's same patch, averaged per image (an unmasked
    image 0). The arguments are iBOT's (temperatures, their warm-up, the
    centers' momenta, ``lambda_cls`` / ``lambda_patch``); ``loss_pred`` None:
    plain iBOT.

    Args:
        out_channels (int): the projection head's prototypes. Defaults to 8192.
        student_temp (float): the student's temperature. Defaults to 0.1.
        teacher_temp (float): the teacher's CLS temperature after the warm-up.
            Defaults to 0.07.
        teacher_patch_temp (float): the teacher's patch temperature after the
            warm-up. Defaults to 0.07.
        warmup_teacher_temp (float): the CLS temperature at the start. Defaults
            to 0.04.
        warmup_teacher_patch_temp (float): the patch temperature at the start.
            Defaults to 0.04.
        warmup_teacher_temp_epochs (int): epochs of the warm-up. Defaults to
            30.
        center_momentum (float): the CLS center's EMA momentum. Defaults to
            0.9.
        patch_center_momentum (float): the patch center's. Defaults to 0.9.
        lambda_cls (float): ``loss_cls``'s weight. Defaults to 1.
        lambda_patch (float): ``loss_rec``'s weight. Defaults to 1.
        loss_pred (dict, optional): HPM's predicting loss; None: plain iBOT.
            Defaults to HPMRelativeLoss.
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
        """Per-patch distillation cross-entropy (G * B, N) fp32, 0 where
        visible: ``student_patch`` (M, K) in ``mask`` order against
        ``teacher_patch`` (G, B, N, K)."""
        m = mask.bool()
        logits = teacher_patch.flatten(0, 1)[m].float() - self.patch_center
        target = F.softmax(logits / self.teacher_temps()[1], dim=-1)
        ce = -(target * F.log_softmax(
            student_patch.float() / self.student_temp, dim=-1)).sum(-1)
        return torch.zeros(m.shape, device=ce.device).masked_scatter(m, ce)

    def loss(self, student_cls: torch.Tensor, student_patch: torch.Tensor,
             teacher_out: torch.Tensor, scores: Optional[torch.Tensor],
             mask: torch.Tensor) -> Dict[str, torch.Tensor]:
        """``loss_cls``, ``loss_rec`` and, with ``scores``, ``loss_pred`` and
        ``rank_acc``; then the centers move. ``student_cls`` (V, B, K), the G
        global views first; ``student_patch`` (M, K) in ``mask`` order;
        ``teacher_out`` (G, B, 1 + N, K); ``mask`` (G * B, N)."""
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
            per_patch = self.patch_losses(student_patch, t_patch, mask)
            losses = hpm_losses(per_patch, mask, scores, self.loss_pred)
            m = mask.float()  # iBOT's: each image's mean, an unmasked one 0
            per_image = (per_patch * m).sum(1) / m.sum(1).clamp(min=1.)
            losses['loss_rec'] = per_image.mean() * self.lambda_patch
            self.update_centers(t_cls, t_patch)
        return dict(loss_cls=ce[other].mean() * self.lambda_cls, **losses)

    @torch.no_grad()
    def update_centers(self, t_cls: torch.Tensor,
                       t_patch: torch.Tensor) -> None:
        """EMA of the teacher's mean CLS and mean patch output (every
        patch of every global view, all ranks). A non-finite batch (whose
        step the optimizer wrapper's guard skips) leaves them as they were,
        decided on the device."""
        batches = t_cls.mean((0, 1)), t_patch.mean((0, 1, 2),
                                                   dtype=torch.float32)
        for center, batch, m in zip((self.center, self.patch_center), batches,
                                    self.momenta):
            all_reduce(batch, op='mean')
            moved = center * m + batch.unsqueeze(0) * (1 - m)
            center.copy_(moved.where(batch.isfinite().all(), center))
