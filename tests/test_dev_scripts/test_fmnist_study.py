"""The Fashion-MNIST study (.dev_scripts/fmnist_study/): the plan's variants
are configs, a run trains through hpm_mm.apis and stops for time at an
epoch boundary, and the page and figure come from the committed jsons."""
import importlib
import json
import math
import os.path as osp
import sys

import pytest
from helpers import REPO
from mmengine.config import Config

STUDY = osp.join(REPO, '.dev_scripts', 'fmnist_study')


@pytest.fixture
def study(tmp_path, monkeypatch):
    """The phase modules, with their results and work dirs in tmp_path."""
    monkeypatch.syspath_prepend(STUDY)
    for name in ('common', 'pretrain', 'evaluate', 'report'):
        sys.modules.pop(name, None)
    mods = {
        n: importlib.import_module(n)
        for n in ('common', 'pretrain', 'evaluate', 'report')
    }
    for mod in mods.values():
        for key, sub in (('RESULTS', 'results'), ('WORK', 'work')):
            if hasattr(mod, key):
                monkeypatch.setattr(mod, key, str(tmp_path / sub))
    return type('Study', (), mods)


def test_variants_are_configs_that_differ_in_their_knobs(study):
    variants = study.common.PLAN['variants']
    hpm = Config.fromfile(osp.join(REPO, variants['hpm']['config']))
    for name, spec in variants.items():
        cfg = Config.fromfile(osp.join(REPO, spec['config']))
        assert cfg.train_dataloader.dataset.indices == 10000, name
        if name == 'mae':
            assert cfg.model.type == 'MAE'
            continue
        gen = cfg.model.mask_generator
        assert cfg.model.backbone == hpm.model.backbone, name
        assert (gen.alpha_0, gen.alpha_T) == dict(
            hpm=(0., .5), random=(0., 0.), **{'all-hard': (1., 1.)})[name]


def test_a_run_is_its_variant_scaled_to_its_length(study):
    cfg, steps = study.pretrain.run_config('hpm', 3, 30, 60000)
    assert steps == 30 * math.ceil(60000 / 256)
    assert cfg.train_cfg.max_epochs == 30 and cfg.randomness.seed == 3
    assert cfg.train_dataloader.dataset.indices is None  # all 60k
    assert cfg.param_scheduler[1]['end'] == 30
    assert cfg.model.teacher.momentum == pytest.approx(
        1 / (0.025 * steps), rel=1e-3)
    # the kNN hook's data stay in the run's config for evaluate.py
    assert any(h['type'] == 'KNNEvalHook' for h in cfg.custom_hooks)
    # fp32 on every machine: the variants are not AMP configs
    assert 'Amp' not in cfg.optim_wrapper.get('type', 'OptimWrapper')


def test_a_run_out_of_time_stops_at_an_epoch_and_the_same_command_continues(
        study, tmp_path, monkeypatch):
    """Trained in this process through hpm_mm.apis.train: with too few
    minutes the TimeLimitHook ends it after epoch 1 of 2 (checkpoint
    written, exit 3); the same command resumes it to the end, and the
    record keeps both attempts. The hook's clock gains an hour a reading,
    so the first run is out of time on any machine."""
    from types import SimpleNamespace

    from hpm_mm.engine.hooks import time_limit_hook
    hours = iter(range(0, 10**6, 3600))
    monkeypatch.setattr(time_limit_hook, 'time',
                        SimpleNamespace(time=lambda: next(hours)))
    with pytest.raises(SystemExit) as stop:
        study.pretrain.main([
            'mae', '--seed', '0', '--epochs', '2', '--images', '256',
            '--minutes', '60'
        ])
    assert stop.value.code == study.pretrain.STOPPED
    work = tmp_path / 'work' / 'mae_2e_0k_seed0'
    assert (work / 'epoch_1.pth').exists()
    assert not (work / 'epoch_2.pth').exists()
    study.pretrain.main(
        ['mae', '--seed', '0', '--epochs', '2', '--images', '256'])
    record = json.loads((work / 'pretrain.json').read_text())
    assert record['finished'] and record['precision'] == 'fp32'
    assert [a['until_epoch'] for a in record['attempts']] == [1, 2]
    assert (work / 'epoch_2.pth').exists()
    assert not (work / 'knn.json').exists()  # evaluate.py evaluates


def test_evaluate_writes_the_runs_record(study, tmp_path, monkeypatch):
    """The record: the pretraining record, the frozen metrics (best k, by
    k, linear) on both features, the fine-tunes and the phase commands."""
    work = tmp_path / 'work' / 'hpm_100e_10k_seed1'
    work.mkdir(parents=True)
    (work / 'pretrain.json').write_text(
        json.dumps(
            dict(
                name=work.name,
                variant='hpm',
                seed=1,
                epochs=100,
                images_per_epoch=10000,
                steps=4000,
                precision='fp32',
                finished=True,
                attempts=[dict(seconds=60.),
                          dict(seconds=40.)])))
    seen = []
    monkeypatch.setattr(
        study.evaluate, 'frozen', lambda work, ckpt, seed: seen.append(
            (work, ckpt, seed)) or dict(knn_avg=84., linear_avg=85.))
    monkeypatch.setattr(
        study.evaluate, 'finetune', lambda work, ckpt, seed, p: seen.append(
            (p, ckpt)) or 80. + p)
    study.evaluate.main([work.name])
    out = json.loads((tmp_path / 'results' / f'{work.name}.json').read_text())
    ckpt = str(work / 'epoch_100.pth')
    assert seen == [(str(work), ckpt, 1), (1, ckpt), (10, ckpt)]
    assert out['metrics'] == dict(
        knn_avg=84., linear_avg=85., finetune_1pct=81., finetune_10pct=90.)
    assert out['train_seconds'] == 100.
    assert out['commands'][-1].endswith(
        f'evaluate.py {work.name} --finetune 1 10')
    # scratch: the fine-tunes from random init only
    seen.clear()
    study.evaluate.main(['scratch_seed2', '--finetune', '10'])
    assert seen == [(10, None)]
    with pytest.raises(SystemExit, match='has not finished pretraining'):
        study.evaluate.main(['mae_100e_10k_seed0'])


def record(variant, seed, knn):
    return dict(
        name=f'{variant}_100e_10k_seed{seed}',
        variant=variant,
        seed=seed,
        epochs=100,
        images_per_epoch=10000,
        machine=dict(cpu_class='AVX2'),
        train_seconds=600,
        metrics=dict(knn_avg=knn, knn_cls=knn - 1))


def test_report_pairs_seeds_with_t_intervals(study, tmp_path):
    results = tmp_path / 'results'
    results.mkdir()
    for seed, knns in enumerate([(80., 81., 80.), (79., 80.5, 80.),
                                 (81., 81., 81.5)]):
        for variant, knn in zip(('mae', 'hpm', 'random'), knns):
            r = record(variant, seed, knn)
            (results / f"{r['name']}.json").write_text(json.dumps(r))
    records = study.common.load_records(str(results))
    text = study.report.tables(records)
    # differences +1.0, +1.5, 0.0: mean 0.83, sd 0.76, t(2) = 4.303
    half = 4.303 * 0.7637626 / math.sqrt(3)
    assert f'| hpm - mae | 0.83 ± {half:.2f} (+1.00, +1.50, +0.00) |' in text
    assert '| hpm - random | 0.33 ± ' in text  # (+1.00, +0.50, -0.50)
    assert '| mae (3) | 80.00 ± 2.48 |' in text
    lo, hi = 2.5 / 3 - half, 2.5 / 3 + half
    assert f'- hpm - mae: 95% interval above 0 on none; below 0 on none; ' \
        f'containing 0 on kNN avg [{lo:+.2f}, {hi:+.2f}], kNN CLS ' in text
    for table in text.split('\n\n'):  # every row has its header's columns
        rows = [r for r in table.splitlines() if r.startswith('|')]
        assert len({r.count('|') for r in rows}) <= 1, table
    data = study.report.figure_data(records)
    assert data['kNN avg']['runs']['hpm'] == [[0, 81.], [1, 80.5], [2, 81.]]
    c = data['kNN avg']['contrasts']['hpm - mae']
    assert c['diffs'] == [[0, 1.], [1, 1.5], [2, 0.]]
    assert c['half'] == pytest.approx(half, rel=1e-3)
    assert study.report.todo(records)[:2] == ['scratch_seed0', 'scratch_seed1']


def test_the_committed_page_and_figure_are_the_jsons(study, tmp_path):
    """docs/study.md's tables and the numbers plotted in
    docs/images/fmnist_study.png are what report.py makes of the committed
    jsons (rerun it after adding one)."""
    from PIL import Image
    records = study.common.load_records()
    assert records, 'no committed study results'
    page = open(study.report.DOC).read()
    begin, end = study.report.MARKS
    assert page.split(begin)[1].split(end)[0].strip() == \
        study.report.tables(records)
    plotted = json.loads(Image.open(study.report.FIGURE).text['Description'])
    assert plotted == json.loads(
        json.dumps(study.report.figure_data(records), sort_keys=True))
    assert plotted['kNN avg']['contrasts']['hpm - mae']['diffs'] == [[
        s, records[f'hpm_100e_10k_seed{s}']['metrics']['knn_avg'] -
        records[f'mae_100e_10k_seed{s}']['metrics']['knn_avg']
    ] for s in (0, 1, 2)]
    # report.py rewrites only its section
    doc = tmp_path / 'study.md'
    doc.write_text(f'head\n{begin}\nold\n{end}\ntail\n')
    study.report.main(doc=str(doc), figure=str(tmp_path / 'f.png'))
    out = doc.read_text()
    assert out.startswith('head\n') and out.endswith('tail\n')
    assert 'old' not in out and '| hpm - mae |' in out
