"""The precision rule (hpm_mm.engine.precision): bf16 autocast on a CPU only
where torch reports native bf16 and a timed probe confirms it is faster;
the CPU's capability and the probe are mocked both ways."""
import json

import pytest
import torch
from conftest import run_tool, tiny_config

from hpm_mm.engine import precision as P


@pytest.fixture
def cpu(monkeypatch):
    """Mock the CPU: ``cpu(cls, bf16_over_fp32)``; the probe counts its
    calls. The cached decision is cleared before and after."""
    calls = []

    def make(cls, ratio=None):
        P._cpu_decision.cache_clear()
        monkeypatch.setattr(P, 'cpu_class', lambda: cls)

        def probe(*args, **kwargs):
            calls.append(1)
            return dict(
                fp32_ms=1.0,
                bf16_ms=ratio,
                bf16_over_fp32=ratio,
                shape=list(P.PROBE_SHAPE))

        monkeypatch.setattr(P, 'probe_bf16', probe)
        return calls

    yield make
    P._cpu_decision.cache_clear()


def test_avx2_cpu_runs_fp32_without_a_probe(cpu):
    calls = cpu('AVX2')
    p = P.choose_precision(True, 'cpu')
    assert (p.name, p.dtype) == ('fp32', None)
    assert calls == []  # no bf16 probe where torch reports no native bf16
    line = p.line()
    assert line.startswith('precision: fp32') and 'AVX2' in line \
        and 'no native bf16' in line and 'falls back to fp32' in line


@pytest.mark.parametrize('cls', ['AVX512-BF16', 'AMX'])
def test_native_bf16_cpu_confirmed_by_the_probe(cpu, cls):
    calls = cpu(cls, ratio=0.4)
    p = P.choose_precision(True, 'cpu')
    assert (p.name, p.dtype) == ('bf16', torch.bfloat16)
    assert p.probe['bf16_over_fp32'] == 0.4 and cls in p.line()
    P.choose_precision(True, 'cpu')
    assert len(calls) == 1  # one probe per process


def test_native_bf16_cpu_where_the_probe_finds_no_gain(cpu):
    cpu('AVX512-BF16', ratio=1.3)
    p = P.choose_precision(True, 'cpu')
    assert p.name == 'fp32' and 'no gain' in p.reason


def test_fp32_when_not_asked_and_fp16_on_cuda(cpu):
    calls = cpu('AMX', ratio=0.4)
    assert P.choose_precision(False, 'cpu').name == 'fp32'
    assert P.choose_precision(True, 'cuda').dtype == torch.float16
    assert P.choose_precision(False, 'cuda').name == 'fp32'
    assert calls == []


def test_the_real_probe_and_capability():
    """On this machine: a class torch names, and a probe that times both
    dtypes (sub-second on an idle machine; generous under a loaded run)."""
    import time
    assert isinstance(P.cpu_class(), str) and P.cpu_class()
    t = time.perf_counter()
    probe = P.probe_bf16(repeats=1)
    assert time.perf_counter() - t < 10
    assert probe['fp32_ms'] > 0 and probe['bf16_ms'] > 0


def test_optim_wrapper_follows_the_precision(cpu):
    from hpm_mm.engine.optimizers import amp_optim_wrapper_cfg
    amp_cfg = dict(
        type='AmpOptimWrapper',
        loss_scale='dynamic',
        optimizer=dict(type='AdamW', lr=1e-3))
    cpu('AVX2')
    fp32 = amp_optim_wrapper_cfg(amp_cfg, P.choose_precision(True, 'cpu'))
    assert fp32['type'] == 'GuardedOptimWrapper' and 'loss_scale' not in fp32
    cpu('AMX', ratio=0.3)
    bf16 = amp_optim_wrapper_cfg(amp_cfg, P.choose_precision(True, 'cpu'))
    assert (bf16['type'], bf16['dtype']) == ('AutocastOptimWrapper',
                                             'bfloat16')
    fp16 = amp_optim_wrapper_cfg(
        dict(type='OptimWrapper', optimizer={}),
        P.choose_precision(True, 'cuda'))
    assert fp16['type'] == 'GuardedAmpOptimWrapper'


@pytest.mark.parametrize('cls,ratio,autocast', [('AVX2', None, False),
                                                ('AMX', 0.3, True)])
def test_knn_features_follow_the_precision(cpu, cls, ratio, autocast):
    """extract_features(amp=True) autocasts only where the rule says bf16
    (the kNN hook and knn_eval.py go through it)."""
    from hpm_mm.evaluation import knn
    cpu(cls, ratio)
    seen = []

    class Model(torch.nn.Module):

        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 3)

        def data_preprocessor(self, batch, training):
            return batch

        def extract_feat(self, x):
            seen.append(torch.is_autocast_enabled('cpu'))
            return self.lin(x)

    class Sample:
        gt_label = torch.tensor([1])

    batch = dict(inputs=torch.randn(2, 4), data_samples=[Sample(), Sample()])
    out = knn.extract_features(Model(), [batch], False, amp=True)
    assert seen == [autocast] and out['feats'].dtype == torch.float32


def test_train_prints_and_records_the_precision(tmp_path):
    """tools/train.py --amp: the decision is the console's first line and
    work_dir/precision.json."""
    cfg = tiny_config(
        tmp_path, num_images=8, body='train_cfg = dict(max_epochs=1)')
    work = tmp_path / 'work'
    proc = run_tool('tools/train.py', cfg, '--work-dir', str(work), '--amp',
                    '--quiet')
    record = json.loads((work / 'precision.json').read_text())
    # the console's line is the record's, and the decision the rule's for
    # the record's own probe (on a CPU with native bf16 the probe's timings,
    # under load even its verdict, differ from run to run)
    assert proc.stdout.splitlines()[0] == \
        f"precision: {record['precision']} ({record['reason']})"
    assert record['cpu_class'] == P.cpu_class()
    probe = record.get('probe')
    if probe is None:
        assert record['precision'] == P.choose_precision(True, 'cpu').name
    else:
        assert record['precision'] == ('bf16' if probe['bf16_over_fp32']
                                       <= P.PROBE_MAX_RATIO else 'fp32')
