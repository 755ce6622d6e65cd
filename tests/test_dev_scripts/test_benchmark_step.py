"""The step benchmark's FLOP model and a tiny end-to-end run (no timing
is asserted: ratios are for the benchmark's printout, not for tests)."""
import os.path as osp
import sys

import pytest
from helpers import REPO

sys.path.insert(0, osp.join(REPO, '.dev_scripts'))
import benchmark_step as bench  # noqa: E402


def test_flop_model_vit_b():
    mae, hpm = bench.flop_model(768, 12, 196)
    assert mae / 1e9 == pytest.approx(29.3, abs=0.1)
    assert hpm / 1e9 == pytest.approx(68.4, abs=0.1)
    # the teacher is forward-only: removing it removes enc(197) + pred(197)
    _, no_teacher = bench.flop_model(768, 12, 196, teacher=False)
    teacher = (
        bench.vit_macs(197, 768, 12) + 196 * 768 * 768 + 197 * 768 * 512 +
        bench.vit_macs(197, 512, 8) + 197 * 512 * 768)
    assert hpm - no_teacher == pytest.approx(teacher)
    # half-resolution teacher: 7x7 patches
    f_m, f_h = bench.fast_flops('b', 224, teacher_scale=0.5)
    assert f_m == mae
    assert f_h - no_teacher == pytest.approx(
        bench.vit_macs(50, 768, 12) + 49 * 768 * 768 + 50 * 768 * 512 +
        bench.vit_macs(50, 512, 8) + 50 * 512 * 768)


def test_benchmark_runs_tiny(capsys):
    res = bench.main([
        '--archs', 't', '--img-size', '32', '--batch', '2', '--iters', '1',
        '--fast', 'teacher_half_res', 'alpha0_no_teacher'
    ])
    out = capsys.readouterr().out
    assert '| ViT-T |' in out and 'teacher_half_res |' in out
    assert set(res['t']['fast']) == {'teacher_half_res', 'alpha0_no_teacher'}
    assert res['t']['hpm']['step'] > 0 and res['t']['mae']['step'] > 0
    # the sections of the real modules were timed, every step of them
    hpm = res['t']['hpm']
    assert all(hpm[k] > 0
               for k in ('teacher', 'mask', 'student_fwd', 'losses'))
    # (no relation between timings is asserted: two timed loops differ by
    # more than any tolerance on a loaded machine; the benchmark prints them)
    assert res['t']['fast']['teacher_half_res']['flop_ratio'] < \
        res['t']['flop_ratio']


def test_benchmark_builds_from_the_configs():
    """The timed models are the configs' (mmpretrain's own MAE, hpm_mm's
    HPM) at the requested ViT size, with the fast settings applied."""
    mae, hpm = bench.model_cfgs('s', 64, {
        'teacher.input_scale': 0.5,
        'neck.predictor_depth': 2
    })
    assert mae['type'] == 'MAE' and mae['backbone']['type'] == 'MAEViT'
    assert hpm['type'] == 'HPM' and hpm['teacher']['input_scale'] == 0.5
    assert hpm['neck']['predictor_depth'] == 2
    for cfg in (mae, hpm):
        assert cfg['backbone']['arch']['embed_dims'] == 384
        assert cfg['neck']['num_patches'] == 16


def test_authors_mask_loop_is_hpm_masking():
    """The re-implemented per-image loop the mask benchmark times masks
    what hpm_mm's generator masks: the same count per image, the hardest
    num_hard always, the others uniformly."""
    import torch

    from hpm_mm.models import HPMMaskGenerator
    torch.manual_seed(0)
    scores = torch.randn(400, 16)
    mask = bench.authors_mask(scores, num_masked=12, num_hard=6)
    assert torch.all(mask.sum(1) == 12)
    top = scores.topk(6, dim=1).indices
    assert torch.all(mask.gather(1, top) == 1)
    # the 6 random ones are drawn from the 10 others: 0.6 each
    rest = torch.ones_like(mask).scatter_(1, top, 0.).bool()
    assert mask[rest].mean().item() == pytest.approx(0.6, abs=0.03)
    gen = HPMMaskGenerator(mask_ratio=0.75, alpha_0=0.5, alpha_T=0.5)
    assert (gen.num_masked(16), gen.num_hard(16, 1.)) == (12, 6)
    res = bench.mask_bench(16, 8, torch.device('cpu'), iters=2)
    assert res['vectorised'] > 0 and res['authors_loop'] > 0


class RecordingOps(bench.DeviceOps):
    """The CUDA timing path's calls, recorded on the CPU: synchronisation,
    the peak-memory reset and its read."""

    def __init__(self, device):
        super().__init__(device)
        self.calls = []

    def sync(self):
        self.calls.append('sync')

    def reset_peak(self):
        self.calls.append('reset_peak')

    def peak_gib(self):
        self.calls.append('peak')
        return 1.5


def test_benchmark_cuda_timing_path_dry_run(capsys, monkeypatch):
    """What the CUDA path does, run on the CPU with the device calls
    recorded: warm-up steps untimed, the device synchronised before and
    after every timed step and section, peak memory reset after the
    warm-up and read after the timed steps, memory in every row; an
    out-of-memory row is reported and the run goes on."""
    import torch
    x = torch.randn(2, 3, 32, 32)
    mae_cfg, hpm_cfg = bench.model_cfgs('t', 32)
    ops = RecordingOps(x.device)
    res = bench.measure(hpm_cfg, x, iters=3, warmup=2, breakdown=True, ops=ops)
    # sync + reset after the warm-up; 3 timed steps; peak read; then 3
    # steps with sections: each section and the step synchronised twice
    assert ops.calls[:2] == ['sync', 'reset_peak']
    assert ops.calls[2:8] == ['sync'] * 6 and ops.calls[8] == 'peak'
    sections = res['teacher'], res['mask'], res['student_fwd']
    assert all(s > 0 for s in sections)
    assert ops.calls[9:].count('sync') >= 2 * (3 + 3 * 5)
    assert res['peak_mem_gib'] == 1.5 and res['img_s'] > 0
    assert res['skipped_steps'] == 0
    monkeypatch.setattr(bench, 'DeviceOps', RecordingOps)
    real = bench._measure

    def oom_for_half_res(cfg, *args):
        if cfg.get('teacher', {}).get('input_scale') == 0.5:
            raise torch.OutOfMemoryError('CUDA out of memory (test)')
        return real(cfg, *args)

    monkeypatch.setattr(bench, '_measure', oom_for_half_res)
    out = bench.main([
        '--archs', 't', '--img-size', '32', '--batch', '2', '--iters', '1',
        '--warmup', '2', '--fast', 'teacher_half_res', 'predictor_2blocks',
        '--no-breakdown'
    ])
    text = capsys.readouterr().out
    half = out['t']['fast']['teacher_half_res']
    assert half['oom'] and 'step' not in half and 'ratio' not in half
    assert '| ViT-T | teacher_half_res | OOM |' in text
    assert '| ViT-T | predictor_2blocks |' in text and '| 1.5 |' in text
    assert 'after 2 warm-up' in text


def test_teacher_section_covers_the_scoring_pass():
    """The work each timed section names runs inside it: the teacher's
    encoder and its loss predictor inside 'teacher' (once the section held
    only the EMA update), the student's encoder inside 'student_fwd', the
    head's losses inside 'losses' -- for the faithful and the
    half-resolution teacher alike."""
    import torch
    from mmpretrain.registry import MODELS
    for overrides in ({}, {'teacher.input_scale': 0.5}):
        cfg = bench.model_cfgs('t', 32, overrides)[1]
        torch.manual_seed(0)
        model = MODELS.build(cfg)
        model.set_progress(1.0)
        optim = bench.optim_wrapper(model, None)
        data = dict(inputs=torch.randn(2, 3, 32, 32), data_samples=None)
        model.train_step(dict(data), optim)  # 1st step copies the teacher
        timer = bench.Timer(bench.DeviceOps('cpu'))
        undo = bench.sections(model, timer)
        where = {}

        def record(name):

            def hook(module, args):
                where.setdefault(name, list(timer.open))

            return hook

        t = model.teacher.module
        for name, module in (('teacher_encoder', t['backbone']),
                             ('teacher_predictor', t['predictor']),
                             ('student_encoder', model.backbone.layers[0])):
            module.register_forward_pre_hook(record(name))
        t['predictor'].predictor.blocks[0].register_forward_pre_hook(
            record('teacher_predictor'))
        model.train_step(dict(data), optim)
        for u in undo:
            u()
        assert where['teacher_encoder'] == ['teacher']
        assert where['teacher_predictor'] == ['teacher']
        assert where['student_encoder'] == ['student_fwd']
        assert timer.times['teacher'] and timer.times['losses']
