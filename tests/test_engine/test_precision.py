"""The precision rule (hpm_mm.engine.precision), one sentence: 'auto' (and
--amp) is bf16 autocast on a CUDA device with bf16, fp16 with a dynamic
loss scale on one without, fp32 on a CPU; the other values as asked."""
import json

import pytest
import torch
from helpers import TINY_RUN, tiny_config, train

from hpm_mm.engine import precision as P
from hpm_mm.engine.optimizers.guarded_optim_wrapper import fused_on_cuda
from hpm_mm.errors import HPMError

WRAPPER = dict(type='OptimWrapper', optimizer=dict(type='AdamW'))


def decide(precision, device, bf16=True, monkeypatch=None):
    if monkeypatch is not None:
        monkeypatch.setattr(torch.cuda, 'is_bf16_supported', lambda: bf16)
    return P.run_precision(
        dict(precision=precision, optim_wrapper=WRAPPER), device)


def test_auto_on_a_cpu_is_fp32_and_says_how_to_get_bf16():
    p = decide('auto', 'cpu')
    assert (p.name, p.dtype, p.device) == ('fp32', None, 'cpu')
    assert p.line() == "precision: fp32 (CPU: fp32; precision='bf16' for " \
        'bf16 autocast)'


@pytest.mark.parametrize('bf16,name,dtype', [(True, 'bf16', torch.bfloat16),
                                             (False, 'fp16', torch.float16)])
def test_auto_on_cuda_is_bf16_where_the_card_has_it(monkeypatch, bf16, name,
                                                    dtype):
    p = decide('auto', 'cuda', bf16, monkeypatch)
    assert (p.name, p.dtype) == (name, dtype)
    wrapper = fused_on_cuda(P.optim_wrapper_cfg(WRAPPER, p), p.device)
    assert wrapper['type'] == ('AutocastOptimWrapper'
                               if bf16 else 'GuardedAmpOptimWrapper')
    assert wrapper['optimizer'] == dict(type='AdamW', fused=True)


def test_asked_values_are_taken_or_refused_in_one_line(monkeypatch):
    bf16 = decide('bf16', 'cpu')
    assert (bf16.name, bf16.dtype) == ('bf16', torch.bfloat16)
    assert "as configured: precision='bf16'" in bf16.line()
    assert decide('fp32', 'cpu').reason == "as configured: precision='fp32'"
    for value, device, match in (('fp16', 'cpu', 'has none'),
                                 ('fp64', 'cpu', 'is not one of'),
                                 ('bf16', 'cuda', 'does not support bf16')):
        with pytest.raises(HPMError, match=match) as e:
            decide(value, device, False, monkeypatch)
        assert '\n' not in str(e.value) and 'Fix:' in str(e.value)


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


def test_optim_wrapper_follows_the_precision(monkeypatch):
    amp_cfg = dict(
        type='AmpOptimWrapper',
        loss_scale='dynamic',
        optimizer=dict(type='AdamW', lr=1e-3))
    fp32 = P.optim_wrapper_cfg(amp_cfg, P.run_precision(amp_cfg, 'cpu'))
    assert fp32['type'] == 'GuardedOptimWrapper' and 'loss_scale' not in fp32
    bf16 = P.optim_wrapper_cfg(amp_cfg, decide('bf16', 'cpu'))
    assert (bf16['type'], bf16['dtype']) == ('AutocastOptimWrapper',
                                             'bfloat16')
    # a CPU: the optimizer as given; CUDA: fused unless the config says
    assert 'fused' not in fp32['optimizer'] and 'fused' not in \
        bf16['optimizer']
    own = fused_on_cuda(
        dict(type='OptimWrapper', optimizer=dict(type='AdamW', foreach=True)),
        'cuda')
    assert own['optimizer'] == dict(type='AdamW', foreach=True)
    lars = fused_on_cuda(
        dict(type='OptimWrapper', optimizer=dict(type='LARS')), 'cuda')
    assert 'fused' not in lars['optimizer']


def test_knn_features_follow_the_precision():
    """The kNN pass autocasts in the dtype it is given (the run's, or
    run_precision's for --amp) and returns fp32 features."""
    from hpm_mm.evaluation import knn
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
    for dtype in (decide('bf16', 'cpu').dtype, decide('auto', 'cpu').dtype):
        out = knn.extract_features(Model(), [batch], False, amp=dtype)
        assert out['feats'].dtype == torch.float32
    assert seen == [True, False]


def test_train_with_amp_decides_at_once_and_records_it(tmp_path):
    """--amp on this machine (a CPU): fp32, decided before the run is built
    (no step is timed), the console line is the record's."""
    from unittest import mock
    cfg = tiny_config(
        tmp_path, num_images=8, body=TINY_RUN.format(keep=1, epochs=1))

    def no_step(*args, **kwargs):
        raise AssertionError('the precision decision ran a module')

    with mock.patch('torch.nn.Module.__call__', no_step):
        P.run_precision(dict(precision='auto'), 'cpu')  # runs no step
    log = train(cfg, tmp_path / 'a', amp=True, quiet=True)
    record = json.loads((tmp_path / 'a' / 'precision.json').read_text())
    assert record['precision'] == 'fp32' and record['device'] == 'cpu'
    assert f" - INFO - precision: fp32 ({record['reason']})\n" in log
