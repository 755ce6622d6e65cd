"""The bf16-vs-fp32 study's drivers (issue #50): the paired report's numbers
against a hand computation, the part-by-part numerics' statistics against
brute force, and their measurement on a tiny HPM."""
import math
import os.path as osp
import sys

import pytest
import torch
from helpers import REPO, tiny_hpm

sys.path.insert(0, osp.join(REPO, '.dev_scripts'))
import precision_numerics  # noqa: E402
import precision_study  # noqa: E402


def record(precision, seed, knn, epochs=2):
    return dict(
        name=f'{precision}_{epochs}e_seed{seed}',
        precision=precision,
        seed=seed,
        epochs=epochs,
        train_seconds=1.0,
        metrics=dict(
            knn_k10=knn,
            knn_best=knn,
            linear=knn + 1,
            loss_rec=0.5,
            rank_acc=0.7))


def test_the_report_pairs_by_seed(tmp_path):
    import json
    runs = [
        record('fp32', 0, 70.0),
        record('bf16', 0, 69.0),
        record('fp32', 1, 71.0),
        record('bf16', 1, 71.5),
        record('fp32', 2, 72.0),
        record('bf16', 2, 71.0),
        record('bf16', 3, 99.0),  # no fp32 partner: not paired
        record('fp32', 0, 10.0, epochs=10),  # another length
    ]
    for r in runs:
        (tmp_path / f"{r['name']}.json").write_text(json.dumps(r))
    records = [json.loads(p.read_text()) for p in tmp_path.glob('*.json')]
    diffs = precision_study.paired(records, 'knn_k10')
    assert sorted(diffs) == [-1.0, -1.0, 0.5]
    mean, half = precision_study.interval(diffs)
    sd = math.sqrt(sum((d - mean)**2 for d in diffs) / 2)
    assert mean == pytest.approx(-0.5)
    assert half == pytest.approx(4.302653 * sd / math.sqrt(3), rel=1e-5)
    text = precision_study.report(str(tmp_path))
    assert '| knn_k10 | 3 | -0.5 |' in text
    assert precision_study.interval([1.0]) == (1.0, None)


def test_rank_statistics_against_brute_force():
    from scipy.stats import spearmanr
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(5, 16, generator=g), torch.randn(5, 16, generator=g)
    got = precision_numerics.spearman(a, a + 0.5 * b)
    for i in range(5):
        want = spearmanr(a[i].numpy(), (a[i] + 0.5 * b[i]).numpy())[0]
        assert got[i].item() == pytest.approx(want, abs=1e-5)
    s = torch.tensor([[1., 2., 2., 3.], [4., 5., 6., 7.]])
    assert precision_numerics.tie_share(s) == pytest.approx(2 / 8)


def test_the_numerics_of_a_tiny_hpm():
    """fp32 against itself would say nothing: bf16 moves the scores and the
    losses a little, keeps the ranking nearly whole, and the losses are
    computed in fp32 in both."""
    model = tiny_hpm(seed=0)
    model.eval()
    model.set_progress(1.0, epoch=1, max_epochs=1)
    N = model.backbone.num_patches
    k = model.mask_generator.num_hard(N, 1.0)
    inputs = torch.randn(4, 1, 16, 16)
    r = precision_numerics.measure(model, [inputs], k)
    assert 0.9 < r['teacher']['spearman'] <= 1
    assert 0.5 < r['teacher']['topk_same'] <= 1
    fp32, bf16 = r['student']['fp32'], r['student']['bf16']
    assert fp32['loss_rec'] == pytest.approx(bf16['loss_rec'], rel=0.05)
    assert fp32['loss_rec'] != bf16['loss_rec']
