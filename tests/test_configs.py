"""Every config parses and its model builds (and the names tell the truth)."""
import copy
import glob
import importlib
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
            assert len(model.neck.predictor_blocks) == 1
        else:
            assert len(model.neck.predictor_blocks) == 2, name


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
    assert '| 79.00 ± 1.41 | 77.00 ± 1.41 | 70.00 (seed 0) | - | 0, 1 |' \
        in table
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


def test_tools_build_every_collate_fn():
    """mmengine passes a collate_fn dict's other keys to the function; a
    config inheriting mmpretrain's bases carries ``_scope_`` there, which
    failed the first batch. The tools' config loader drops it."""
    from hpm_mm.utils.cli import load_config
    main = [p for p in CONFIGS
            if p.endswith('hpm_vit-base-p16_8xb512-amp-coslr-200e_in1k.py')]
    raw = Config.fromfile(main[0])._cfg_dict
    assert any('_scope_' in c for c in _collate_fns(raw))
    for path in CONFIGS:
        if is_det_seg(path) and not FULL_PROFILE:
            continue
        assert not any('_scope_' in c for c in _collate_fns(
            load_config(path)._cfg_dict)), path
