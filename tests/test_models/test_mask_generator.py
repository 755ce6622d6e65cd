import pytest
import torch

from hpm_mm.models import HPMMaskGenerator


@pytest.mark.parametrize('gamma,N', [(0.75, 196), (0.5, 64), (0.9, 64),
                                     (0.75, 10)])
@pytest.mark.parametrize('progress', [0., 0.5, 1.])
def test_masks_exactly_gamma_n(gamma, N, progress):
    gen = HPMMaskGenerator(mask_ratio=gamma, alpha_0=0., alpha_T=1.)
    mask = gen(torch.rand(8, N), progress)
    assert mask.shape == (8, N)
    assert set(mask.unique().tolist()) <= {0., 1.}
    assert torch.all(mask.sum(1) == round(gamma * N))


@pytest.mark.parametrize('mode', ['argmax', 'argmin'])
@pytest.mark.parametrize('alpha_0,alpha_T', [(0., .5), (0., 1.), (1., 1.),
                                             (.5, 0.)])
def test_contains_top_k_and_k_follows_schedule(mode, alpha_0, alpha_T):
    N, B = 64, 16
    gen = HPMMaskGenerator(0.75, alpha_0, alpha_T, mode)
    num_mask = 48
    for progress in (0., 0.5, 1.):
        alpha = alpha_0 + progress * (alpha_T - alpha_0)
        k = int(alpha * num_mask + 1e-9)
        assert gen.num_hard(N, progress) == k
        scores = torch.randn(B, N)
        mask = gen(scores, progress)
        if k:
            top = scores.topk(k, dim=1, largest=mode == 'argmax').indices
            assert torch.all(mask.gather(1, top) == 1)


def test_random_part_is_uniform_and_random_masking_needs_no_scores():
    gen = HPMMaskGenerator(0.75, 0., 0.)
    assert not gen.uses_scores
    mask = gen(None, 0.3, num_patches=16, batch_size=4000, device='cpu')
    freq = mask.mean(0)
    assert torch.all((freq - 0.75).abs() < 0.04)
    # with half the masked patches chosen by score, the rest stay random
    gen = HPMMaskGenerator(0.5, 0.5, 0.5)
    scores = torch.arange(16.).repeat(4000, 1)  # patches 12..15 hardest
    mask = gen(scores, 0.)
    assert torch.all(mask[:, 12:] == 1)
    freq = mask[:, :12].mean(0)  # 4 of 12 remaining drawn uniformly
    assert torch.all((freq - 4 / 12).abs() < 0.04)


def test_scores_required_when_k_positive():
    gen = HPMMaskGenerator(0.75, 1., 1.)
    with pytest.raises(ValueError, match='no teacher scores'):
        gen(None, 0., num_patches=16, batch_size=2, device='cpu')


@pytest.mark.parametrize('kwargs,match', [
    (dict(mask_ratio=1.0), 'mask_ratio'),
    (dict(alpha_T=1.5), 'alpha_T'),
    (dict(mode='max'), 'mode'),
])
def test_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        HPMMaskGenerator(**kwargs)
