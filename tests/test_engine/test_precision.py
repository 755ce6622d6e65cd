"""The precision rule (hpm_mm.engine.precision): on a CPU, mixed precision is
bf16 autocast only where the work's own timed step is clearly faster in
bf16; the timing is cached per machine and workload, leaves the caller's
random numbers alone, and is what the console line and precision.json say.
The step's speed is made up both ways (a step that sleeps by dtype) and
measured for real through tools/train.py."""
import json
import time

import pytest
import torch
from helpers import TINY_RUN, tiny_config, train

from hpm_mm.engine import precision as P


def sleeper(fp32_s, bf16_s, calls=None):
    """A step that takes ``fp32_s`` in fp32 and ``bf16_s`` under bf16, and
    draws a random number (as a training step does)."""

    def step(dtype):
        if calls is not None:
            calls.append(dtype)
        torch.rand(1)
        time.sleep(fp32_s if dtype is None else bf16_s)

    return step


@pytest.mark.parametrize('cls', ['AVX2', 'AVX512-BF16', 'AMX'])
def test_bf16_where_the_timed_step_is_clearly_faster(cls, monkeypatch):
    """The CPU's class does not decide: the timed step does."""
    monkeypatch.setattr(P, 'cpu_class', lambda: cls)
    p = P.choose_precision(True, 'cpu', sleeper(0.04, 0.01), what='step')
    assert (p.name, p.dtype) == ('bf16', torch.bfloat16)
    assert p.timing['speedup'] >= 3
    # alternating pairs for at least a second of short steps
    assert len(p.timing['bf16_steps']) == len(p.timing['fp32_steps']) >= 3
    assert sum(p.timing['bf16_steps'] + p.timing['fp32_steps']) >= 1.0
    assert p.line().startswith(f'precision: bf16 (CPU {cls}: a step takes ')
    assert f"({p.timing['speedup']:.2f}x)" in p.line()


def test_fp32_where_bf16_is_not_clearly_faster(monkeypatch):
    """bf16 twice as slow (an AVX2 CPU) stops at its first timed step;
    bf16 only a little faster (under MIN_SPEEDUP) is not taken either."""
    monkeypatch.setattr(P, 'cpu_class', lambda: 'AVX2')
    calls = []
    slow = P.choose_precision(True, 'cpu', sleeper(0.01, 0.05, calls))
    assert (slow.name, slow.dtype) == ('fp32', None)
    assert len(slow.timing['bf16_steps']) == 1
    assert calls.count(torch.bfloat16) == 2  # warm-up + one timed step
    assert 'under the 1.2x taken as clearly faster: fp32' in slow.line()
    close = P.choose_precision(True, 'cpu', sleeper(0.03, 0.027))
    assert close.name == 'fp32' and close.timing['speedup'] < P.MIN_SPEEDUP


def test_the_timing_is_cached_per_machine_and_workload(tmp_path, monkeypatch):
    monkeypatch.setenv('HPM_CACHE_DIR', str(tmp_path / 'cache'))
    calls = []
    first = P.choose_precision(True, 'cpu', sleeper(0.03, 0.01, calls), 'a')
    n = len(calls)
    again = P.choose_precision(True, 'cpu', sleeper(0.03, 0.01, calls), 'a')
    assert len(calls) == n and again.name == first.name == 'bf16'
    assert again.timing['cached'] == P.cache_path() and \
        'timed earlier on this machine' in again.line()
    assert again.timing['fp32_s'] == first.timing['fp32_s']
    other = P.choose_precision(True, 'cpu', sleeper(0.01, 0.03, calls), 'b')
    assert len(calls) > n and other.name == 'fp32'  # another workload
    monkeypatch.setattr(torch, 'get_num_threads', lambda: 99)
    P.choose_precision(True, 'cpu', sleeper(0.03, 0.01, calls), 'a')
    assert len(calls) > n + 8  # another machine (threads): timed again
    stored = json.loads((tmp_path / 'cache' / 'precision.json').read_text())
    assert len(stored) == 3
    # an unreadable cache, or an entry without its numbers, is timed
    # again, not an error
    (tmp_path / 'cache' / 'precision.json').write_text(
        json.dumps({P.cache_key('a'): {
                        'fp32_s': 1
                    }}))
    assert P.choose_precision(True, 'cpu', sleeper(0.03, 0.01), 'a').name \
        == 'bf16'
    (tmp_path / 'cache' / 'precision.json').write_text('{not json')
    assert P.choose_precision(True, 'cpu', sleeper(0.03, 0.01), 'a').name \
        == 'bf16'


@pytest.mark.parametrize(
    'entry',
    [
        dict(fp32_s=float('nan'), bf16_s=0.01, speedup=3.),
        dict(fp32_s=-0.03, bf16_s=0.01, speedup=-3.),
        dict(fp32_s=0.03, bf16_s=0.01, speedup=300.),  # not their ratio
        dict(fp32_s=0.03, bf16_s=0.01, speedup=3.),  # no date
        dict(fp32_s=0.03, bf16_s=0.01, speedup=3., measured_at=1.),  # too old
    ])
def test_a_cached_timing_that_cannot_decide_is_timed_again(
        tmp_path, monkeypatch, entry):
    """NaN, negative, inconsistent or aged-out entries are not believed:
    the step is timed again (here fp32 is faster, against the entry)."""
    monkeypatch.setenv('HPM_CACHE_DIR', str(tmp_path))
    (tmp_path / 'precision.json').write_text(
        json.dumps({P.cache_key('w'): entry}))
    calls = []
    got = P.choose_precision(True, 'cpu', sleeper(0.01, 0.03, calls), 'w')
    assert calls and got.name == 'fp32' and 'cached' not in got.timing
    assert P.usable(got.timing)  # the new entry decides next time


def test_the_timing_leaves_the_random_numbers_alone():
    import random

    import numpy as np

    def draw():
        return torch.rand(3), np.random.rand(), random.random()

    def step(dtype):
        draw()

    torch.manual_seed(1), np.random.seed(1), random.seed(1)
    want = draw()
    torch.manual_seed(1), np.random.seed(1), random.seed(1)
    P.choose_precision(True, 'cpu', step)
    got = draw()
    assert torch.equal(got[0], want[0]) and got[1:] == want[1:]


def test_not_asked_no_step_and_cuda():
    calls = []
    assert P.choose_precision(False, 'cpu', sleeper(0, 0, calls)).reason \
        == P.NOT_ASKED
    none = P.choose_precision(True, 'cpu')
    assert none.name == 'fp32' and 'none was given to time' in none.reason
    assert P.choose_precision(True, 'cuda', sleeper(0, 0, calls)).dtype == \
        torch.float16
    assert P.choose_precision(False, 'cuda').name == 'fp32'
    assert calls == []
    assert isinstance(P.cpu_class(), str) and P.cpu_class()


def test_optim_wrapper_follows_the_precision():
    amp_cfg = dict(
        type='AmpOptimWrapper',
        loss_scale='dynamic',
        optimizer=dict(type='AdamW', lr=1e-3))
    fp32 = P.optim_wrapper_cfg(amp_cfg, P.choose_precision(True, 'cpu', None))
    assert fp32['type'] == 'GuardedOptimWrapper' and 'loss_scale' not in fp32
    bf16 = P.optim_wrapper_cfg(
        amp_cfg, P.choose_precision(True, 'cpu', sleeper(0.03, 0.01)))
    assert (bf16['type'], bf16['dtype']) == ('AutocastOptimWrapper',
                                             'bfloat16')
    fp16 = P.optim_wrapper_cfg(
        dict(type='OptimWrapper', optimizer=dict(type='AdamW')),
        P.choose_precision(True, 'cuda'))
    assert fp16['type'] == 'GuardedAmpOptimWrapper'
    # CUDA: AdamW fused, unless the config says otherwise; a CPU: as given
    assert fp16['optimizer'] == dict(type='AdamW', fused=True)
    assert 'fused' not in fp32['optimizer'] and 'fused' not in \
        bf16['optimizer']
    own = P.optim_wrapper_cfg(
        dict(type='OptimWrapper', optimizer=dict(type='AdamW', foreach=True)),
        P.choose_precision(True, 'cuda'))
    assert own['optimizer'] == dict(type='AdamW', foreach=True)
    lars = P.optim_wrapper_cfg(
        dict(type='OptimWrapper', optimizer=dict(type='LARS')),
        P.choose_precision(True, 'cuda'))
    assert 'fused' not in lars['optimizer']


@pytest.mark.parametrize('cfg,key', [
    (dict(), 'fp32'),
    (dict(optim_wrapper=dict(type='GuardedAmpOptimWrapper')), 'auto'),
    (dict(optim_wrapper=dict(type='AmpOptimWrapper')), 'auto'),
    (dict(optim_wrapper=dict(type='AutocastOptimWrapper')), 'bf16'),
    (dict(precision='bf16',
          optim_wrapper=dict(type='AmpOptimWrapper')), 'bf16'),
    (dict(precision='fp32',
          optim_wrapper=dict(type='AmpOptimWrapper')), 'fp32'),
])
def test_precision_is_one_key_old_configs_say_it_by_their_wrapper(cfg, key):
    assert P.precision_key(cfg) == key


def test_precision_key_is_read_in_one_place():
    from hpm_mm.errors import HPMError
    wrapper = dict(type='OptimWrapper', optimizer=dict(type='AdamW'))
    with pytest.raises(HPMError, match="precision='fp64' is not one of"):
        P.run_precision(dict(precision='fp64', optim_wrapper=wrapper))
    with pytest.raises(HPMError, match='needs|has none'):
        P.run_precision(dict(precision='fp16', optim_wrapper=wrapper), 'cpu')
    # 'auto' on a CPU waits for the run's own step
    assert P.run_precision(
        dict(precision='auto', optim_wrapper=wrapper), 'cpu') == (None, None)
    bf16, cfg = P.run_precision(
        dict(precision='bf16', optim_wrapper=wrapper), 'cpu')
    assert (bf16.name, bf16.dtype, cfg['type']) == ('bf16', torch.bfloat16,
                                                    'AutocastOptimWrapper')
    assert "precision='bf16'" in bf16.line()
    fp16, cfg = P.run_precision(
        dict(precision='auto', optim_wrapper=wrapper), 'cuda')
    assert (fp16.name, cfg['type'],
            cfg['optimizer']['fused']) == ('fp16', 'GuardedAmpOptimWrapper',
                                           True)
    fp32, cfg = P.run_precision(dict(optim_wrapper=wrapper), 'cpu')
    assert fp32.reason == P.NOT_ASKED and cfg == wrapper


@pytest.mark.parametrize('fp32_s,bf16_s,autocast', [(0.01, 0.04, False),
                                                    (0.04, 0.01, True)])
def test_knn_features_follow_the_precision(monkeypatch, tmp_path, fp32_s,
                                           bf16_s, autocast):
    """feature_precision times the model's forward on the first batch and
    autocasts only where bf16 is clearly faster (the kNN tool and the kNN
    hook ask it; the hook passes the run's own precision)."""
    from hpm_mm.evaluation import knn
    monkeypatch.setenv('HPM_CACHE_DIR', str(tmp_path))  # its own timing
    seen = []

    class Model(torch.nn.Module):

        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 3)

        def data_preprocessor(self, batch, training):
            return batch

        def extract_feat(self, x):
            on = torch.is_autocast_enabled('cpu')
            seen.append(on)
            time.sleep(bf16_s if on else fp32_s)
            return self.lin(x)

    class Sample:
        gt_label = torch.tensor([1])

    batch = dict(inputs=torch.randn(2, 4), data_samples=[Sample(), Sample()])
    model = Model()
    dtype = P.feature_precision(model, [batch], 'auto').dtype
    assert P.feature_precision(model, [batch], False).dtype is None
    out = knn.extract_features(model, [batch], False, amp=dtype)
    assert seen[-1] == autocast and out['feats'].dtype == torch.float32
    assert len(seen) > 4  # the timed forwards, then the pass


def test_train_times_its_step_and_records_it(tmp_path, monkeypatch):
    """Training with --amp on this machine: the run's own training step is
    timed in both precisions; the console's precision line is the record's,
    the decision follows the measured speed-up, and a second run of the
    same model reuses the timing."""
    cfg = tiny_config(
        tmp_path, num_images=8, body=TINY_RUN.format(keep=1, epochs=1))
    monkeypatch.setenv('HPM_CACHE_DIR', str(tmp_path / 'cache'))
    records = []
    for work in ('a', 'b'):
        log = train(cfg, tmp_path / work, amp=True, quiet=True)
        record = json.loads((tmp_path / work / 'precision.json').read_text())
        line = f"precision: {record['precision']} ({record['reason']})"
        assert f' - INFO - {line}\n' in log, log[-2000:]
        assert record['cpu_class'] == P.cpu_class()
        records.append(record)
    timing = records[0]['timing']
    assert timing['what'] == 'training step' and timing['fp32_s'] > 0
    assert records[0]['precision'] == ('bf16' if timing['speedup']
                                       >= P.MIN_SPEEDUP else 'fp32')
    assert 'cached' not in timing and 'cached' in records[1]['timing']
    assert records[1]['precision'] == records[0]['precision']
