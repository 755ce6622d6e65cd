"""Every config parses and its model builds (and the names tell the truth)."""
import copy
import glob
import importlib
import os
import os.path as osp

import pytest
import torch
from conftest import FULL_PROFILE, NEEDS_FULL, REPO, is_det_seg
from mmengine.config import Config
from mmengine.registry import init_default_scope

import hpm_mm  # noqa: F401

CONFIGS = sorted(
    [p for p in glob.glob(osp.join(REPO, 'configs', '**', '*.py'),
                          recursive=True) if '_base_' not in p] +
    glob.glob(osp.join(REPO, 'projects', '*', 'configs', '*.py')))


@pytest.mark.parametrize('path', [
    pytest.param(p, marks=NEEDS_FULL if is_det_seg(p) else ())
    for p in CONFIGS], ids=[osp.relpath(p, REPO) for p in CONFIGS])
def test_config_builds(path, monkeypatch):
    monkeypatch.syspath_prepend(REPO)  # projects/ import from the repo root
    cfg = Config.fromfile(path)
    scope = cfg.get('default_scope', 'mmpretrain')
    init_default_scope(scope)
    MODELS = importlib.import_module(f'{scope}.registry').MODELS
    name = osp.basename(path)
    try:
        with torch.device('meta'):  # build without allocating ViT-L weights
            model = MODELS.build(copy.deepcopy(cfg.model))
    except RuntimeError:  # a module that calls .item() while building
        model = MODELS.build(copy.deepcopy(cfg.model))
    assert sum(p.numel() for p in model.parameters()) > 0
    if '-amp-' in name:
        from hpm_mm.engine.optimizers.autocast_optim_wrapper import AMP_TYPES
        assert cfg.optim_wrapper.type in AMP_TYPES
    if 'xb' in name:  # {gpus}xb{batch} matches the dataloader batch size
        batch = int(name.split('xb')[1].split('-')[0].split('_')[0])
        assert cfg.train_dataloader.batch_size == batch, name
    if cfg.model.type == 'HPM':
        assert any(h.type == 'HPMScheduleHook' for h in cfg.custom_hooks)
        assert cfg.optim_wrapper.clip_grad.max_norm == 5.0
        gpus = int(name.split('_')[2].split('xb')[0])
        if 'auto_scale_lr' in cfg:
            assert cfg.auto_scale_lr.base_batch_size == gpus * batch


def test_every_architecture_is_written_once():
    """The mini ViT's numbers stand in one config file; the others refer to
    it (``{{_base_.vit_mini...}}``)."""
    hits = [p for p in glob.glob(osp.join(REPO, 'configs', '**', '*.py'),
                                 recursive=True)
            if 'feedforward_channels=768' in open(p).read()]
    assert [osp.relpath(p, REPO) for p in hits] == [
        'configs/_base_/models/vit-mini-p4.py']


def test_ablations_differ_only_in_their_knobs():
    base = Config.fromfile(
        osp.join(REPO, 'configs', 'hpm',
                 'hpm_vit-base-p16_8xb512-amp-coslr-200e_in1k.py'))
    for path in glob.glob(osp.join(REPO, 'configs', 'hpm', 'ablations',
                                   'hpm-*.py')):
        cfg = Config.fromfile(path)
        a, b = cfg.to_dict(), base.to_dict()
        a['model'].pop('mask_generator'), b['model'].pop('mask_generator')
        a['model']['head'].pop('loss_pred'), b['model']['head'].pop(
            'loss_pred')
        assert a == b, path


def test_tools_build_the_model_with_the_configs_normalisation():
    from conftest import FMNIST_CFG

    from hpm_mm.utils import build_model
    model = build_model(Config.fromfile(FMNIST_CFG))
    pre = model.data_preprocessor
    assert pre.mean.flatten().tolist() == pytest.approx([72.94])
    assert pre.std.flatten().tolist() == pytest.approx([90.02])


def test_study_variants_build():
    """Every variant of tools/analysis_tools/fmnist_study.py is a valid
    config + --cfg-options and builds its model."""
    import sys
    from mmengine.config import DictAction
    sys.path.insert(0, osp.join(REPO, 'tools', 'analysis_tools'))
    try:
        import fmnist_study
    finally:
        sys.path.pop(0)
    from hpm_mm.utils import build_model
    for name, (config, options, _) in fmnist_study.VARIANTS.items():
        cfg = Config.fromfile(osp.join(REPO, config))
        opts = {}
        for o in options:
            k, v = o.split('=', 1)
            opts[k] = DictAction._parse_iterable(v)
        cfg.merge_from_dict(opts)
        model = build_model(cfg)
        if name == 'mae':
            assert type(model).__name__ == 'MAE'
            continue
        for key, value in opts.items():  # every option reached the model
            obj = model
            for attr in key.split('.')[1:]:
                obj = getattr(obj, attr, None)
            if obj is not None:
                assert obj == value, (name, key)
        if name.startswith('hpm-'):
            assert model.teacher.grid == (4, 4), name
        if name == 'hpm-fast':
            assert len(model.neck.predictor.blocks) == 1
        else:
            assert len(model.neck.predictor.blocks) == 2, name


def test_study_report_only_tabulates_finished_runs(tmp_path):
    """--report-only trains nothing and reports mean ± std (sample std) of
    the finished runs, with the commands that made them."""
    import json
    import sys
    sys.path.insert(0, osp.join(REPO, 'tools', 'analysis_tools'))
    try:
        import fmnist_study
    finally:
        sys.path.pop(0)
    for seed, best in ((0, 78.0), (1, 80.0)):
        work = tmp_path / f'mae_seed{seed}'
        work.mkdir()
        (work / 'last_checkpoint').write_text(str(work / 'epoch_10.pth'))
        (work / 'knn.json').write_text(json.dumps(dict(best=best)))
        (work / 'knn_cls.json').write_text(json.dumps(dict(best=best - 2)))
    (tmp_path / 'mae_seed0' / 'linear').mkdir()  # probed on seed 0 only
    (tmp_path / 'mae_seed0' / 'linear' / 'metrics.json').write_text(
        json.dumps({'accuracy/top1': 70.0}))
    (tmp_path / 'hpm_seed0').mkdir()  # unfinished: left out
    fmnist_study.main(['--report-only', '--out', str(tmp_path),
                       '--variants', 'mae', 'hpm'])
    table = (tmp_path / 'study.md').read_text()
    assert '| mae |' in table
    # kNN on the patch average and on the CLS token; the linear column names
    # the one seed it covers, not the row's two; no CLS linear probe ran
    assert '| 79.00 ± 1.41 | 77.00 ± 1.41 | 70.00 (seed 0) | - | - | - | ' \
        '0, 1 |' in table
    assert '| hpm |' not in table
    res = json.loads((tmp_path / 'study.json').read_text())
    assert set(res) == {'mae'} and set(res['mae']) == {'0', '1'}
    assert 'tools/train.py' in res['mae']['0']['commands'][0]


def test_study_resumes_an_interrupted_run(tmp_path, monkeypatch):
    """A run whose last checkpoint is not the final epoch is not finished:
    --report-only leaves it out and a study run resumes it (--resume) rather
    than evaluating the epoch-9 weights as if they were the result."""
    import json
    import sys
    sys.path.insert(0, osp.join(REPO, 'tools', 'analysis_tools'))
    try:
        import fmnist_study
    finally:
        sys.path.pop(0)
    work = tmp_path / 'hpm_seed0'
    work.mkdir()
    (work / 'last_checkpoint').write_text(str(work / 'epoch_9.pth'))
    (work / 'knn.json').write_text(json.dumps(dict(best=50.0)))
    fmnist_study.main(['--report-only', '--out', str(tmp_path),
                       '--variants', 'hpm', '--seeds', '0'])
    assert '| hpm |' not in (tmp_path / 'study.md').read_text()

    calls = []

    def fake_run(cmd, log):  # training finishes; kNN writes its result
        calls.append(cmd)
        if 'tools/train.py' in cmd:
            (work / 'last_checkpoint').write_text(str(work / 'epoch_10.pth'))
        else:
            (work / 'knn.json').write_text(json.dumps(dict(best=60.0)))

    monkeypatch.setattr(fmnist_study, 'run', fake_run)
    res = fmnist_study.one_run('hpm', 0, str(tmp_path), linear=False)
    # resumed, and the stale kNN result of the epoch-9 weights is redone
    assert calls[0][-1] == '--resume'
    assert 'knn_eval.py' in calls[1][1] and res['knn'] == 60.0

    calls.clear()
    monkeypatch.setattr(fmnist_study, 'run', lambda cmd, log: calls.append(
        cmd))  # training dies again before the final epoch
    (work / 'last_checkpoint').write_text(str(work / 'epoch_9.pth'))
    (work / 'knn.json').unlink()
    with pytest.raises(SystemExit, match='ended before its final epoch'):
        fmnist_study.one_run('hpm', 0, str(tmp_path), linear=False)


def _collate_fns(node):
    if isinstance(node, dict):
        if isinstance(node.get('collate_fn'), dict):
            yield node['collate_fn']
        for value in node.values():
            yield from _collate_fns(value)
    elif isinstance(node, (list, tuple)):
        for value in node:
            yield from _collate_fns(value)


def test_every_collate_fn_builds():
    """mmengine passes a collate_fn dict's other keys to the function; a
    config inheriting a package's bases carries ``_scope_`` there, which
    failed the first batch. mmengine's Runner (patched by hpm_mm.compat)
    builds each config's collate_fn, ``_scope_`` and all."""
    from mmengine.runner import Runner
    main = [p for p in CONFIGS
            if p.endswith('hpm_vit-base-p16_8xb512-amp-coslr-200e_in1k.py')]
    raw = Config.fromfile(main[0])._cfg_dict
    assert any('_scope_' in c for c in _collate_fns(raw))
    dataset = [dict(inputs=torch.zeros(2))] * 2
    for path in CONFIGS:
        if is_det_seg(path) and not FULL_PROFILE:
            continue
        for collate in _collate_fns(Config.fromfile(path)._cfg_dict):
            if collate.get('type') not in ('default_collate',
                                           'pseudo_collate'):
                continue
            loader = Runner.build_dataloader(dict(
                dataset=dataset, batch_size=2, collate_fn=collate,
                sampler=dict(type='DefaultSampler', shuffle=False)))
            assert len(next(iter(loader))['inputs']) == 2, path


def _study():
    import sys
    sys.path.insert(0, osp.join(REPO, 'tools', 'analysis_tools'))
    try:
        import fmnist_study
    finally:
        sys.path.pop(0)
    return fmnist_study


def _merged(config, options):
    from mmengine.config import DictAction
    cfg = Config.fromfile(osp.join(REPO, config))
    cfg.merge_from_dict({k: DictAction._parse_iterable(v) for k, v in (
        o.split('=', 1) for o in options)})
    return cfg


def test_study_schedule_scales_warmup_and_teacher_to_its_steps():
    """--epochs / --train-images: the configs' own schedule is the rule's
    fixed point (1 warm-up epoch, momentum 0.1 -> 0.025 at 400 steps); a
    100-epoch run over all 60k images gets 5 warm-up epochs and a teacher
    lagging 2.5% -> 10% of its 23,500 steps; the options reach the config."""
    study = _study()
    cfg = study.HPM_CFG
    assert study.Schedule().options(cfg) == []
    same = study.Schedule(10, 10000)
    assert same.steps(cfg) == 400 and same.warmup(cfg) == 1
    assert same.momentum(cfg) == pytest.approx((0.1, 0.025))
    base = Config.fromfile(osp.join(REPO, cfg))
    assert (base.model.teacher.momentum, base.model.teacher.end_momentum) \
        == same.momentum(cfg)
    long = study.Schedule(100, 60000)
    assert long.steps(cfg) == 100 * 235 and long.warmup(cfg) == 5
    m0, m1 = long.momentum(cfg)
    assert 1 / m0 == pytest.approx(0.025 * 23500)
    assert 1 / m1 == pytest.approx(0.1 * 23500)
    merged = _merged(cfg, long.options(cfg))
    assert merged.train_cfg.max_epochs == 100
    warm, cos = merged.param_scheduler
    assert (warm.end, cos.begin, cos.T_max, cos.end) == (5, 5, 95, 100)
    assert merged.train_dataloader.dataset.indices is None  # all 60k
    assert merged.model.teacher.momentum_epochs == 100
    assert merged.model.teacher.momentum == pytest.approx(m0, rel=1e-3)
    # MAE has no teacher; a 20k-image run keeps its subset
    mae = _merged(study.MAE_CFG, study.Schedule(40, 20000).options(
        study.MAE_CFG, teacher=False))
    assert mae.train_dataloader.dataset.indices == 20000
    assert 'teacher' not in mae.model
    # a dry run of 4 steps: the teacher lags 2 (mmengine needs m < 1)
    assert study.Schedule(2, 512).momentum(cfg) == (.5, .5)


def test_study_low_label_finetunes_on_a_label_subset():
    study = _study()
    for percent, epochs in study.LOW_LABEL_EPOCHS.items():
        cfg = _merged(study.FINETUNE_CFG, study.low_label_options(percent))
        assert cfg.train_dataloader.dataset.indices == 600 * percent
        assert cfg.train_cfg.max_epochs == epochs == cfg.train_cfg.val_interval
        assert cfg.param_scheduler[1].end == epochs
        assert cfg.val_dataloader.dataset.split == 'test'


def test_study_pack_unpack_round_trip(tmp_path):
    """The encoders (fp16) and result files of finished runs travel in
    files of at most the limit, and come back as runs whose encoder the
    evaluations load and whose results the report reads."""
    import json

    study = _study()
    src, dst = tmp_path / 'gpu', tmp_path / 'cpu'
    for name in ('mae_seed0', 'hpm_seed0', 'hpm_seed1'):
        work = src / name
        work.mkdir(parents=True)
        state = {'backbone.w': torch.randn(300, 300),
                 'backbone.step': torch.tensor(3),
                 'neck.w': torch.randn(10)}
        torch.save(dict(state_dict=state), work / 'epoch_4.pth')
        (work / 'last_checkpoint').write_text(str(work / 'epoch_4.pth'))
        (work / 'knn.json').write_text(json.dumps(dict(best=70.0)))
        (work / 'pretrain.json').write_text(json.dumps(dict(epochs=4)))
    old = study.PACK_LIMIT
    study.PACK_LIMIT = 300 * 1024  # two runs do not fit in one file
    try:
        files = study.pack(str(src), sorted(os.listdir(src)),
                           str(tmp_path / 'pack'))
    finally:
        study.PACK_LIMIT = old
    assert len(files) == 3
    assert all(os.path.getsize(f) <= 300 * 1024 for f in files)
    names = study.unpack(files, str(dst))
    assert sorted(names) == ['hpm_seed0', 'hpm_seed1', 'mae_seed0']
    for name in names:
        got = torch.load(dst / name / 'encoder.pth')['state_dict']
        want = torch.load(src / name / 'epoch_4.pth')['state_dict']
        assert set(got) == {'backbone.w', 'backbone.step'}
        assert got['backbone.w'].dtype == torch.float32
        torch.testing.assert_close(got['backbone.w'], want['backbone.w'],
                                   atol=1e-2, rtol=1e-3)
        assert json.loads((dst / name / 'knn.json').read_text())['best'] \
            == 70.0
        # a finished run of that schedule for the evaluations
        assert study.final_checkpoint(str(dst / name), study.HPM_CFG, 4) \
            == str(dst / name / 'encoder.pth')
        assert study.final_checkpoint(str(dst / name), study.HPM_CFG,
                                      10) is None


def test_study_report_pairs_seeds_and_compares_studies():
    study = _study()
    results = {
        'mae': {0: dict(knn=78.0, rank_acc=None), 1: dict(knn=79.0)},
        'hpm': {0: dict(knn=77.0, rank_acc=0.9, spearman=0.5),
                1: dict(knn=79.5, rank_acc=0.8, spearman=0.7)},
    }
    short = {'mae': {0: dict(knn=78.0), 1: dict(knn=79.0)},
             'hpm': {0: dict(knn=77.0), 1: dict(knn=78.0)}}
    assert study.paired(results, 'hpm', 'knn') == {0: -1.0, 1: 0.5}
    text = study.report(results, compare=short)
    assert '| hpm - mae | kNN, patch avg | -0.25 ± 1.06 (-1.00, +0.50) | ' \
        '-1.00 ± 0.00 (-1.00, -1.00) |' in text
    assert '| hpm | 0.85 ± 0.07 | 0.60 ± 0.14 |' in text


def test_study_report_only_keeps_low_label_results(tmp_path):
    """Low-label fine-tunes done earlier (another session, a CPU after the
    GPU) are reported by --report-only, with the scratch baseline."""
    import json
    study = _study()
    for run in ('mae_seed0', 'scratch_seed0'):
        ll = tmp_path / run / 'lowlabel1'
        ll.mkdir(parents=True)
        (ll / 'metrics.json').write_text(json.dumps({'accuracy/top1': 60.}))
    work = tmp_path / 'mae_seed0'
    (work / 'last_checkpoint').write_text(str(work / 'epoch_10.pth'))
    (work / 'knn.json').write_text(json.dumps(dict(best=78.0)))
    res = study.main(['--report-only', '--out', str(tmp_path), '--variants',
                      'mae', '--seeds', '0'])
    assert res['mae'][0]['ll1'] == res['scratch'][0]['ll1'] == 60.
    assert '| scratch | random init, fine-tuned only |' in (
        tmp_path / 'study.md').read_text()
