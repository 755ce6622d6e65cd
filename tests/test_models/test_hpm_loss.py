import math

import pytest
import torch
from helpers import autocast_dtypes

from hpm_mm.models import (HPMAbsoluteLoss, HPMRelativeLoss,
                           pairwise_rank_accuracy)


def relative_loss_double_loop(pred, target, mask):
    """Paper Eq. 4 / the authors' code, one pair at a time, in float64."""
    total, pairs = 0., 0
    B, N = pred.shape
    for b in range(B):
        for i in range(N):
            for j in range(N):
                if i == j or not (mask[b, i] and mask[b, j]):
                    continue
                li, lj = float(target[b, i]), float(target[b, j])
                if li == lj:
                    continue  # ties excluded
                d = float(pred[b, j]) - float(pred[b, i])
                sig = 1 / (1 + math.exp(-d))
                total += -math.log(sig) if lj > li else -math.log(1 - sig)
                pairs += 1
    return total / pairs


def random_case(seed, B=3, N=12, ties=True, device='cpu'):
    g = torch.Generator().manual_seed(seed)
    pred = torch.randn(B, N, generator=g)
    # quantised targets -> many exact ties
    target = torch.randint(0, 5 if ties else 10**6, (B, N), generator=g)
    target = target.float() / 7
    mask = torch.zeros(B, N)
    for b in range(B):
        mask[b, torch.randperm(N, generator=g)[:N * 3 // 4]] = 1
    return pred.to(device), target.to(device), mask.to(device)


@pytest.mark.parametrize('seed', range(5))
@pytest.mark.parametrize('ties', [True, False])
def test_relative_loss_matches_double_loop(seed, ties, device):
    pred, target, mask = random_case(seed, ties=ties, device=device)
    got = HPMRelativeLoss()(pred, target, mask)
    want = relative_loss_double_loop(pred, target, mask)
    assert got.dtype == torch.float32
    assert abs(float(got) - want) < 1e-5 * max(1., want)


def test_relative_loss_ignores_visible_patches_and_detaches_target():
    pred, target, mask = random_case(0)
    target.requires_grad_(True)
    pred.requires_grad_(True)
    loss = HPMRelativeLoss()(pred, target, mask)
    loss.backward()
    assert target.grad is None
    # visible patches get no gradient, masked ones do
    assert torch.all(pred.grad[mask == 0] == 0)
    assert pred.grad[mask == 1].abs().sum() > 0
    # changing a visible patch's prediction or target changes nothing
    pred2, target2 = pred.detach().clone(), target.detach().clone()
    vis = mask == 0
    pred2[vis] += 10
    target2[vis] *= 3
    assert torch.allclose(HPMRelativeLoss()(pred2, target2, mask), loss)


def test_relative_loss_fp32_under_autocast(device):
    """Scores from a bf16 or fp16 predictor: the loss is computed in fp32
    (equal to the double loop on the rounded scores)."""
    pred, target, mask = random_case(1, device=device)
    for dtype in autocast_dtypes(device):
        with torch.autocast(device.type, dtype=dtype):
            loss = HPMRelativeLoss()(pred.to(dtype), target, mask)
        assert loss.dtype == torch.float32
        ref = relative_loss_double_loop(pred.to(dtype).float(), target, mask)
        assert abs(float(loss) - ref) < 1e-5


def test_relative_loss_perfect_ranking_is_low():
    # seeded: two near-equal random targets (a gap under ~1e-5) make the
    # scaled logit small and the loss of a perfect ranking not low; the
    # draw depended on what the worker ran before
    torch.manual_seed(0)
    target = torch.rand(2, 16)
    mask = torch.ones(2, 16)
    good = HPMRelativeLoss()(target * 1e5, target, mask)
    bad = HPMRelativeLoss()(-target * 1e5, target, mask)
    assert good < 1e-3 < bad


def test_absolute_loss_matches_reference(device):
    pred, target, mask = random_case(2, ties=False, device=device)
    got = HPMAbsoluteLoss()(pred, target, mask)
    total, count = 0., 0
    for b in range(pred.shape[0]):
        m = mask[b].bool()
        t = target[b][m].double()
        t_std = (t - t.mean()) / torch.sqrt(t.var(unbiased=True) + 1e-6)
        total += float(((pred[b][m].double() - t_std)**2).sum())
        count += int(m.sum())
    assert abs(float(got) - total / count) < 1e-5


def test_rank_accuracy_against_double_loop(device):
    pred, target, mask = random_case(3, device=device)
    pred[0, :4] = 0.  # some tied predictions count as half right
    right, pairs = 0., 0
    for b in range(pred.shape[0]):
        for i in range(pred.shape[1]):
            for j in range(pred.shape[1]):
                if i == j or not (mask[b, i] and mask[b, j]):
                    continue
                if target[b, i] == target[b, j]:
                    continue
                pairs += 1
                if pred[b, i] == pred[b, j]:
                    right += 0.5
                elif (pred[b, j] > pred[b, i]) == (target[b, j] > target[b,
                                                                         i]):
                    right += 1
    acc = pairwise_rank_accuracy(pred, target, mask)
    assert abs(float(acc) - right / pairs) < 1e-6
    assert float(pairwise_rank_accuracy(target, target, mask)) == 1.0
