"""The step benchmark (.dev_scripts/bench_step.py): its FLOP model, its
rows built from the configs, and a tiny end-to-end run on the CPU (no
timing is asserted: ratios are for the printout, not for tests)."""
import os.path as osp
import sys

import pytest
import torch
from helpers import REPO

sys.path.insert(0, osp.join(REPO, '.dev_scripts'))
import bench_step as bench  # noqa: E402


def authors_mask(scores, num_masked, num_hard):
    """The authors' ``generate_mask`` (HPM repository) with its per-image
    loop. (B, N) float, 1 = masked."""
    import numpy as np
    B, N = scores.shape
    device = scores.device
    order = torch.argsort(scores, dim=1)  # ascending: hardest last
    ids_shuffle = torch.zeros_like(order)
    for i in range(B):
        hard = order[i, N - num_hard:]
        ids_shuffle[i, N - num_hard:] = hard
        rest = np.delete(np.arange(N), hard.cpu().numpy())
        np.random.shuffle(rest)
        ids_shuffle[i, :N - num_hard] = torch.from_numpy(rest).to(device)
    ids_restore = torch.argsort(ids_shuffle, dim=1)
    mask = torch.ones(B, N, device=device)
    mask[:, :N - num_masked] = 0
    return torch.gather(mask, 1, ids_restore)


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


def test_benchmark_runs_tiny(capsys, tmp_path):
    out = tmp_path / 'rows.json'
    res = bench.main([
        '--arch', 't', 'mini', '--img-size', '32', '--batch', '2', '--iters',
        '1', '--rows', 'mae', 'hpm', 'half_res', 'alpha0', '--sections',
        '--out',
        str(out)
    ])
    text = capsys.readouterr().out
    assert '| t | 2 | fp32 | half_res, default |' in text
    rows = {(r['arch'], r['setting']): r for r in res['rows']}
    assert len(rows) == 8 and all(r['step'] > 0 for r in rows.values())
    # the sections of the real modules were timed, every step of them
    hpm = rows['t', 'hpm']
    assert all(hpm[k] > 0
               for k in ('teacher', 'mask', 'student_fwd', 'losses'))
    assert rows['t', 'half_res']['flop_ratio'] < hpm['flop_ratio']
    assert 'flop_ratio' not in rows['mini', 'hpm']  # (no FLOP model)
    assert rows['mini', 'hpm']['syncs'] >= 0
    assert bench.json.loads(out.read_text())['rows'] == res['rows']


def test_table_rows_name_ratio_and_mfu():

    def row(setting, **numbers):
        return dict(
            setting=setting,
            arch='b',
            batch=8,
            precision='bf16',
            optimizer='fused',
            compile=False,
            **numbers)

    rows = [
        row('mae', step=0.1, img_s=80., macs=1e9, flop_ratio=1., syncs=1),
        row('hpm', step=0.2, img_s=40., macs=2e9, flop_ratio=2., syncs=1),
        row('fast', skipped='time budget spent'),
    ]
    lines = bench.table(rows, tflops=1.).splitlines()  # 1 TFLOP/s
    assert '| b | 8 | bf16 | hpm, fused | 0.2000 | 40 | 2.00x | ' \
        '2.00x | 16.0% | 1 |' in lines[3]  # 40 img/s x 2 x 2e9 / 1e12
    assert 'time budget spent' in lines[4]


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


@pytest.mark.parametrize('options', [{}, dict(mode='default')])
def test_a_compile_row_compiles_with_default_options(options):
    """``--compile`` on the card passed an empty options dict, which the
    trainer read as "no compile": its rows were eager (the H200 call of
    2026-11-27). Every way of asking compiles the step's parts (lazily:
    nothing is compiled until a step runs); None compiles nothing."""
    mae, hpm = bench.model_cfgs('toy', 32)
    for cfg, parts in ((hpm, 'teacher.backbone'), (mae, 'backbone')):
        step = bench.trainer(cfg, torch.device('cpu'), None, 'default',
                             options)[2]
        assert parts in step.compiled, step.compiled
    assert bench.trainer(hpm, torch.device('cpu'))[2].compiled == []


def test_the_vectorised_mask_is_the_authors_loop():
    """hpm_mm's vectorised generator masks what the authors' per-image loop
    (re-implemented above: the brute-force reference) masks: the same
    count per image, the hardest num_hard always, the others uniformly."""
    from hpm_mm.models import HPMMaskGenerator
    torch.manual_seed(0)
    scores = torch.randn(400, 16)
    mask = authors_mask(scores, num_masked=12, num_hard=6)
    assert torch.all(mask.sum(1) == 12)
    top = scores.topk(6, dim=1).indices
    assert torch.all(mask.gather(1, top) == 1)
    # the 6 random ones are drawn from the 10 others: 0.6 each
    rest = torch.ones_like(mask).scatter_(1, top, 0.).bool()
    assert mask[rest].mean().item() == pytest.approx(0.6, abs=0.03)
    gen = HPMMaskGenerator(mask_ratio=0.75, alpha_0=0.5, alpha_T=0.5)
    assert (gen.num_masked(16), gen.num_hard(16, 1.)) == (12, 6)
    torch.manual_seed(0)
    ours = gen(scores, 1.0)
    assert torch.all(ours.sum(1) == 12) and torch.all(ours.gather(1, top) == 1)
    assert ours[rest].mean().item() == pytest.approx(0.6, abs=0.03)


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
        '--arch', 't', '--img-size', '32', '--batch', '2', '--iters', '1',
        '--warmup', '2', '--rows', 'half_res', '2blocks'
    ])
    text = capsys.readouterr().out
    half, two = out['rows']
    assert half['oom'] and 'step' not in half
    assert '| t | 2 | fp32 | half_res, default | OOM |' in text
    assert two['step'] > 0 and two['peak_mem_gib'] == 1.5
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
                             ('teacher_predictor', t['scorer']),
                             ('student_encoder', model.backbone.layers[0])):
            module.register_forward_pre_hook(record(name))
        t['scorer'].predictor.blocks[0].register_forward_pre_hook(
            record('teacher_predictor'))
        model.train_step(dict(data), optim)
        for u in undo:
            u()
        assert where['teacher_encoder'] == ['teacher']
        assert where['teacher_predictor'] == ['teacher']
        assert where['student_encoder'] == ['student_fwd']
        assert timer.times['teacher'] and timer.times['losses']
