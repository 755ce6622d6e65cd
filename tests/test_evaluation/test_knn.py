import math

import pytest
import torch
from helpers import FMNIST_CFG

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
def test_knn_matches_brute_force(seed, device):
    g = torch.Generator().manual_seed(seed)
    C, D = 4, 8
    centers = torch.randn(C, D, generator=g)
    train_labels = torch.randint(0, C, (120, ), generator=g)
    test_labels = torch.randint(0, C, (37, ), generator=g)
    train = centers[train_labels] + 1.5 * torch.randn(120, D, generator=g)
    test = centers[test_labels] + 1.5 * torch.randn(37, D, generator=g)
    ks = (1, 5, 10, 20, 100)
    got = knn_classify(
        train.to(device),
        train_labels.to(device),
        test.to(device),
        test_labels.to(device),
        ks,
        0.07,
        num_classes=C,
        chunk_size=8)
    for k in ks:
        want = knn_brute_force(train, train_labels, test, test_labels, k, 0.07,
                               C)
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


def test_pool_features_cls_token():
    tokens = torch.randn(2, 5, 3)
    assert torch.equal(pool_features((tokens, ), feature='cls'), tokens[:, 0])
    with pytest.raises(ValueError, match='CLS token'):
        pool_features(tokens, num_extra_tokens=0, feature='cls')
    with pytest.raises(ValueError, match='token outputs'):
        pool_features(torch.randn(2, 3, 4, 4), feature='cls')
    with pytest.raises(ValueError, match='feature must be one of'):
        pool_features(tokens, feature='max')


def _gray_folder_loader(tmp_path, classes, per_class, batch_size):
    """A dataloader over a generated folder of grayscale images."""
    from helpers import folder_loader, make_image_folder
    from mmengine.runner import Runner
    root = make_image_folder(str(tmp_path / 'imgs'), classes, per_class)
    return Runner.build_dataloader(
        folder_loader(root, batch_size, size=None), seed=0)


@pytest.mark.parametrize('feature', ['cls', 'avg'])
def test_knn_on_model_features_matches_brute_force(tmp_path, feature, device):
    """extract_features on a real (tiny) HPM through a dataloader, then kNN,
    against features taken by hand from the encoder's tokens and the
    one-sample-at-a-time brute force."""
    from helpers import tiny_hpm

    from hpm_mm.evaluation import extract_features
    loader = _gray_folder_loader(tmp_path, 3, 6, 5)
    model = tiny_hpm(
        device=device,
        seed=0,
        img_size=32,
        patch_size=8,
        embed_dims=16,
        num_layers=1,
        data_preprocessor=dict(mean=[50.], std=[60.]))
    got = extract_features(model, loader, progress=False, feature=feature)
    want, labels = [], []
    with torch.no_grad():
        for batch in loader:
            data = model.data_preprocessor(batch, False)
            tokens = model.backbone(data['inputs'])[0]  # (B, 1 + N, D)
            want.append(tokens[:,
                               0] if feature == 'cls' else tokens[:,
                                                                  1:].mean(1))
            labels += [int(s.gt_label) for s in data['data_samples']]
    want = torch.cat(want).cpu()
    assert torch.allclose(got['feats'].cpu(), want, atol=1e-5)
    assert got['labels'].tolist() == labels
    # leave-nothing-out kNN on those features = the brute force
    y = got['labels'].cpu()
    acc = knn_classify(
        got['feats'], y, got['feats'], y, ks=(3, ), temperature=0.07)
    assert acc[3] == pytest.approx(
        knn_brute_force(want, y, want, y, 3, 0.07, 3))


# ---------------------------------------------------------- kNN under autocast
def test_knn_features_under_autocast_close_to_fp32():
    """Where the rule picks bf16 (the run's precision, or a timed forward
    that is faster in bf16), the kNN features under autocast stay close to
    fp32's."""
    from mmengine.config import Config

    from hpm_mm.apis import load_model
    from hpm_mm.evaluation import extract_features
    torch.manual_seed(0)
    model = load_model(Config.fromfile(FMNIST_CFG))
    from mmpretrain.structures import DataSample
    batch = dict(
        inputs=torch.randint(0, 255, (8, 1, 28, 28), dtype=torch.uint8),
        data_samples=[DataSample().set_gt_label(i % 2) for i in range(8)])
    fp32 = extract_features(model, [batch], False)
    bf16 = extract_features(model, [batch], False, amp=torch.bfloat16)
    assert bf16['feats'].dtype == torch.float32
    cos = torch.nn.functional.cosine_similarity(fp32['feats'], bf16['feats'])
    assert cos.min() > 0.99 and not torch.equal(fp32['feats'], bf16['feats'])


def test_a_blocks_tokens_are_read_at_any_layer(tmp_path):
    """extract_features(layer=i) reads encoder block i's tokens: the last
    block's through the encoder's final norm are the default features; an
    earlier block's differ; a block the encoder lacks is one line."""
    from helpers import tiny_hpm

    from hpm_mm.evaluation import extract_features
    loader = _gray_folder_loader(tmp_path, 2, 4, 4)
    model = tiny_hpm(
        seed=0,
        img_size=32,
        patch_size=8,
        embed_dims=16,
        num_layers=3,
        data_preprocessor=dict(mean=[50.], std=[60.]))
    run = dict(progress=False, feature='cls')
    default = extract_features(model, loader, **run)['feats']
    last = extract_features(model, loader, layer=-1, **run)['feats']
    with torch.no_grad():
        assert torch.allclose(model.backbone.ln1(last), default, atol=1e-5)
    first = extract_features(model, loader, layer=0, **run)['feats']
    assert not torch.allclose(first, last)
    with pytest.raises(ValueError, match='layer 3: the encoder has 3 blocks'):
        extract_features(model, loader, layer=3, **run)
