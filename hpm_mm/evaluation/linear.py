"""Linear probing on cached frozen features: the linear-probe configs' head
and recipe, trained on features extracted once (the pass kNN reads)."""
import math
from typing import Dict

import torch
import torch.nn as nn


def linear_probe(train_feats: torch.Tensor,
                 train_labels: torch.Tensor,
                 test_feats: torch.Tensor,
                 test_labels: torch.Tensor,
                 epochs: int = 10,
                 lr: float = 0.1,
                 batch_size: int = 256,
                 warmup_epochs: int = 1,
                 seed: int = 0) -> Dict[str, float]:
    """Top-1 (%) of ``BatchNorm1d(affine=False)`` + ``Linear`` trained on
    frozen features with the linear-probe configs' recipe (SGD, momentum 0.9,
    no decay, linear warm-up then cosine, per iteration). Returns ``top1`` and
    ``train_top1``."""
    gen = torch.Generator().manual_seed(seed)
    num_classes = int(max(train_labels.max(), test_labels.max())) + 1
    dim = train_feats.shape[1]
    torch.manual_seed(seed)
    head = nn.Sequential(
        nn.BatchNorm1d(dim, affine=False), nn.Linear(dim, num_classes))
    nn.init.trunc_normal_(head[1].weight, std=0.01)  # the configs' init
    nn.init.zeros_(head[1].bias)
    opt = torch.optim.SGD(
        head.parameters(), lr=lr, momentum=0.9, weight_decay=0.)
    x, y = train_feats.float(), train_labels.long()
    iters = math.ceil(len(x) / batch_size)
    total, warm = epochs * iters, warmup_epochs * iters
    step = 0
    for _ in range(epochs):
        head.train()
        for idx in torch.randperm(len(x), generator=gen).split(batch_size):
            if step < warm:
                factor = 1e-3 + (1 - 1e-3) * step / warm
            else:
                factor = 0.5 * (1 +
                                math.cos(math.pi *
                                         (step - warm) / max(total - warm, 1)))
            for group in opt.param_groups:
                group['lr'] = lr * factor
            loss = nn.functional.cross_entropy(head(x[idx]), y[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
            step += 1
    head.eval()
    with torch.no_grad():
        test = (head(test_feats.float()).argmax(1) == test_labels).float()
        train = (head(x).argmax(1) == y).float()
    return dict(
        top1=100. * test.mean().item(), train_top1=100. * train.mean().item())
