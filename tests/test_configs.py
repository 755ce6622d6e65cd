"""Every config parses and its model builds (and the names tell the truth)."""
import copy
import glob
import importlib
import os.path as osp

import pytest
import torch
from helpers import FULL_PROFILE, NEEDS_FULL, REPO, is_det_seg
from mmengine.config import Config

import hpm_mm  # noqa: F401

CONFIGS = sorted([
    p for p in glob.glob(
        osp.join(REPO, 'configs', '**', '*.py'), recursive=True)
    if '_base_' not in p
] + glob.glob(osp.join(REPO, 'projects', '*', 'configs', '*.py')))


@pytest.mark.parametrize(
    'path', [
        pytest.param(p, marks=NEEDS_FULL if is_det_seg(p) else ())
        for p in CONFIGS
    ],
    ids=[osp.relpath(p, REPO) for p in CONFIGS])
def test_config_builds(path, monkeypatch, tmp_path):
    """Through the config room's checks (none refuses a config of the tree,
    nor its dump: tests/test_engine/test_config_check.py), its model builds."""
    from hpm_mm.apis import load_config
    monkeypatch.syspath_prepend(REPO)  # projects/ import from the repo root
    cfg = load_config(path)
    cfg.dump(str(tmp_path / 'dumped.json'))  # every variable kept (the .py
    load_config(str(tmp_path / 'dumped.json'))  # dump: test_engine's)
    scope = cfg.get('default_scope', 'mmpretrain')
    MODELS = importlib.import_module(f'{scope}.registry').MODELS
    name = osp.basename(path)
    try:
        with torch.device('meta'):  # build without allocating ViT-L weights
            model = MODELS.build(copy.deepcopy(cfg.model))
    except RuntimeError:  # a module that calls .item() while building
        model = MODELS.build(copy.deepcopy(cfg.model))
    assert sum(p.numel() for p in model.parameters()) > 0
    if '-amp-' in name:
        from hpm_mm.engine.precision import precision_key
        assert precision_key(cfg) == 'auto'
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
    hits = [
        p for p in glob.glob(
            osp.join(REPO, 'configs', '**', '*.py'), recursive=True)
        if 'feedforward_channels=768' in open(p).read()
    ]
    assert [osp.relpath(p, REPO)
            for p in hits] == ['configs/_base_/models/vit-mini-p4.py']


def test_ablations_differ_only_in_their_knobs():
    bases = {
        suffix: Config.fromfile(osp.join(REPO, 'configs', 'hpm', name))
        for suffix, name in (
            ('_in1k.py', 'hpm_vit-base-p16_8xb512-amp-coslr-200e_in1k.py'),
            ('_fmnist.py', 'hpm_vit-mini-p4_1xb256-coslr-10e_fmnist.py'))
    }
    paths = glob.glob(
        osp.join(REPO, 'configs', 'hpm', 'ablations', 'hpm-*.py'))
    assert {p[p.rindex('_'):] for p in paths} == set(bases)
    for path in paths:
        cfg = Config.fromfile(path)
        base = bases[path[path.rindex('_'):]]
        a, b = cfg.to_dict(), base.to_dict()
        a['model'].pop('mask_generator'), b['model'].pop('mask_generator')
        a['model']['head'].pop('loss_pred'), b['model']['head'].pop(
            'loss_pred')
        assert a == b, path


def test_tools_build_the_model_with_the_configs_normalisation():
    from helpers import FMNIST_CFG

    from hpm_mm.apis import load_model
    model = load_model(Config.fromfile(FMNIST_CFG))
    pre = model.data_preprocessor
    assert pre.mean.flatten().tolist() == pytest.approx([72.94])
    assert pre.std.flatten().tolist() == pytest.approx([90.02])


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
    main = [
        p for p in CONFIGS
        if p.endswith('hpm_vit-base-p16_8xb512-amp-coslr-200e_in1k.py')
    ]
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
            loader = Runner.build_dataloader(
                dict(
                    dataset=dataset,
                    batch_size=2,
                    collate_fn=collate,
                    sampler=dict(type='DefaultSampler', shuffle=False)))
            assert len(next(iter(loader))['inputs']) == 2, path
