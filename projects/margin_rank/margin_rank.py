"""An L_pred loss, a loss predictor and a hook from outside the repository
(docs/extending.md): a pairwise margin ranking loss in place of the relative
BCE, a linear loss predictor, and a hook that writes each epoch's ranking
accuracy to the work dir."""
import json
import os.path as osp

import torch
from mmengine.hooks import Hook
from mmpretrain.registry import HOOKS, MODELS


@MODELS.register_module()
class MarginRankLoss(torch.nn.Module):
    """Mean over ordered pairs (i, j) of masked patches of an image with
    l_j > l_i of max(0, margin - (s_j - s_i)), in fp32."""

    def __init__(self, margin: float = 0.1, loss_weight: float = 1.0):
        super().__init__()
        self.margin, self.loss_weight = margin, loss_weight

    def forward(self, pred, target, mask):
        with torch.autocast(pred.device.type, enabled=False):
            s, loss_t, m = pred.float(), target.detach().float(), mask.bool()
            diff = s.unsqueeze(1) - s.unsqueeze(2)  # [b, i, j] = s_j - s_i
            harder = (loss_t.unsqueeze(1) > loss_t.unsqueeze(2)) & \
                m.unsqueeze(1) & m.unsqueeze(2)
            hinge = torch.relu(self.margin - diff)[harder]
            return self.loss_weight * (
                hinge.mean() if hinge.numel() else s.sum() * 0)


@HOOKS.register_module()
class RankAccLog(Hook):
    """Appends ``{"epoch": E, "rank_acc": mean}`` to WORK_DIR/rank_acc.jsonl
    after each epoch, from the message hub's ``train/rank_acc``."""

    def after_train_epoch(self, runner):
        buf = runner.message_hub.log_scalars.get('train/rank_acc')
        if buf is not None:
            with open(osp.join(runner.work_dir, 'rank_acc.jsonl'), 'a') as f:
                f.write(
                    json.dumps(
                        dict(
                            epoch=runner.epoch +
                            1, rank_acc=float(buf.mean()))) + '\n')


@MODELS.register_module()
class LinearLossPredictor(torch.nn.Module):
    """A loss predictor as small as it gets: LayerNorm + Linear on each
    patch token of the encoder output (B, 1 + N, C) -> (B, N) scores."""

    def __init__(self, embed_dim: int):
        super().__init__()
        self.norm = torch.nn.LayerNorm(embed_dim)
        self.fc = torch.nn.Linear(embed_dim, 1)

    def forward(self, x):
        return self.fc(self.norm(x[:, 1:])).squeeze(-1)

    def predict_scores(self, x, ids_restore=None, patch_resolution=None):
        return self(x)
