"""Linear probing on cached frozen features.

The linear-probe configs (``configs/benchmarks/classification/fmnist/``)
train ``BatchNorm1d(affine=False)`` + a linear layer on a frozen encoder,
re-running the encoder over the data every epoch. With the encoder frozen,
its features can be extracted once (the pass that kNN also reads) and the
same head trained on them in seconds: :func:`linear_probe`. The Fashion-MNIST
probe configs train without augmentation, so the two are one protocol
(85.93 config-driven against 85.98 cached on one encoder: docs/study.md).
"""
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
    frozen features: the linear-probe configs' head and recipe (SGD,
    momentum 0.9, no weight decay, a linear warm-up from 1e-3 x lr over
    ``warmup_epochs`` then a cosine to 0, per iteration).

    Args:
        train_feats (torch.Tensor): (N, D) features of the training images.
        train_labels (torch.Tensor): (N,) int labels.
        test_feats (torch.Tensor): (M, D).
        test_labels (torch.Tensor): (M,).
        epochs (int): Defaults to 10 (the configs').
        lr (float): Defaults to 0.1 (the configs').
        batch_size (int): Defaults to 256.
        warmup_epochs (int): Defaults to 1.
        seed (int): Initialisation and data order. Defaults to 0.

    Returns:
        dict: ``top1`` on the test features and ``train_top1``.
    """
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
