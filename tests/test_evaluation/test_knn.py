import math

import pytest
import torch

from hpm_mm.evaluation import knn_classify, pool_features


def knn_brute_force(train, train_labels, test, test_labels, k, T, C):
    """One test sample at a time, neighbours by a full sort."""
    right = 0
    for x, y in zip(test, test_labels):
        sims = []
        for f, label in zip(train, train_labels):
            cos = float(x @ f) / (float(x.norm()) * float(f.norm()))
            sims.append((cos, int(label)))
        sims.sort(key=lambda s: -s[0])
        votes = [0.] * C
        for cos, label in sims[:k]:
            votes[label] += math.exp(cos / T)
        right += int(max(range(C), key=lambda c: votes[c]) == int(y))
    return 100. * right / len(test)


@pytest.mark.parametrize('seed', [0, 1])
def test_knn_matches_brute_force(seed):
    g = torch.Generator().manual_seed(seed)
    C, D = 4, 8
    centers = torch.randn(C, D, generator=g)
    train_labels = torch.randint(0, C, (120, ), generator=g)
    test_labels = torch.randint(0, C, (37, ), generator=g)
    train = centers[train_labels] + 1.5 * torch.randn(120, D, generator=g)
    test = centers[test_labels] + 1.5 * torch.randn(37, D, generator=g)
    ks = (1, 5, 10, 20, 100)
    got = knn_classify(train, train_labels, test, test_labels, ks, 0.07,
                       num_classes=C, chunk_size=8)
    for k in ks:
        want = knn_brute_force(train, train_labels, test, test_labels, k,
                               0.07, C)
        assert got[k] == pytest.approx(want), k
    assert got[20] > 100. / C  # better than chance on separable data


def test_k_larger_than_memory_bank_is_clipped():
    train, labels = torch.randn(5, 3), torch.tensor([0, 1, 0, 1, 0])
    got = knn_classify(train, labels, train, labels, ks=(200, ))
    assert list(got) == [5]


def test_pool_features():
    tokens = torch.randn(2, 5, 3)
    assert torch.allclose(pool_features((tokens, )), tokens[:, 1:].mean(1))
    fmap = torch.randn(2, 3, 4, 4)
    assert torch.allclose(pool_features(fmap), fmap.mean((2, 3)))
    assert pool_features(torch.ones(2, 3)).shape == (2, 3)
