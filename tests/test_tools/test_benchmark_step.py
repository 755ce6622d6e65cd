"""The step benchmark's FLOP model and a tiny end-to-end run (no timing
is asserted: ratios are for the benchmark's printout, not for tests)."""
import os.path as osp
import sys

import pytest
from conftest import REPO

sys.path.insert(0, osp.join(REPO, 'tools', 'analysis_tools'))
import benchmark_step as bench  # noqa: E402


def test_flop_model_vit_b():
    mae, hpm = bench.flop_model(768, 12, 196)
    assert mae / 1e9 == pytest.approx(29.3, abs=0.1)
    assert hpm / 1e9 == pytest.approx(68.4, abs=0.1)
    # the teacher is forward-only: removing it removes enc(197) + pred(197)
    _, no_teacher = bench.flop_model(768, 12, 196, teacher=False)
    teacher = (bench.vit_macs(197, 768, 12) + 196 * 768 * 768 +
               197 * 768 * 512 + bench.vit_macs(197, 512, 8) +
               197 * 512 * 768)
    assert hpm - no_teacher == pytest.approx(teacher)
    # half-resolution teacher: 7x7 patches
    f_m, f_h = bench.fast_flops('b', 224, teacher_scale=0.5)
    assert f_m == mae
    assert f_h - no_teacher == pytest.approx(
        bench.vit_macs(50, 768, 12) + 49 * 768 * 768 + 50 * 768 * 512 +
        bench.vit_macs(50, 512, 8) + 50 * 512 * 768)


def test_benchmark_runs_tiny(capsys):
    res = bench.main(['--archs', 't', '--img-size', '32', '--batch', '2',
                      '--iters', '1', '--fast', 'teacher_half_res',
                      'alpha0_no_teacher'])
    out = capsys.readouterr().out
    assert '| ViT-T |' in out and 'teacher_half_res |' in out
    assert set(res['t']['fast']) == {'teacher_half_res', 'alpha0_no_teacher'}
    assert res['t']['hpm']['step'] > 0 and res['t']['mae']['step'] > 0
    # the sections of the real modules were timed, every step of them
    hpm = res['t']['hpm']
    assert all(hpm[k] > 0 for k in ('teacher', 'mask', 'student_fwd',
                                    'losses'))
    assert hpm['teacher'] + hpm['mask'] + hpm['student_fwd'] + \
        hpm['losses'] + hpm['rest'] == pytest.approx(hpm['step'], rel=0.5)
    assert res['t']['fast']['teacher_half_res']['flop_ratio'] < \
        res['t']['flop_ratio']


def test_benchmark_builds_from_the_configs():
    """The timed models are the configs' (mmpretrain's own MAE, hpm_mm's
    HPM) at the requested ViT size, with the fast settings applied."""
    mae, hpm = bench.model_cfgs('s', 64, {'teacher.input_scale': 0.5,
                                          'neck.predictor_depth': 2})
    assert mae['type'] == 'MAE' and mae['backbone']['type'] == 'MAEViT'
    assert hpm['type'] == 'HPM' and hpm['teacher']['input_scale'] == 0.5
    assert hpm['neck']['predictor_depth'] == 2
    for cfg in (mae, hpm):
        assert cfg['backbone']['arch']['embed_dims'] == 384
        assert cfg['neck']['num_patches'] == 16
