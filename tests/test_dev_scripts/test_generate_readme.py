"""The docs' tables are generated from the records in docs/results/
(.dev_scripts/generate_readme.py): each block a registered builder writes
into its page, every record in one schema, the metafile's measured figure
its record's, and ``--check`` naming a stale block."""
import glob
import importlib.util
import json
import os.path as osp
import shutil

import pytest
import yaml
from helpers import REPO

# figures that are history, a tool's own format, or no run's record
NOT_RECORDS = {'machines_history.json', 'loss_path.json'}


def _generator():
    spec = importlib.util.spec_from_file_location(
        'generate_readme', osp.join(REPO, '.dev_scripts',
                                    'generate_readme.py'))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope='module')
def g():
    return _generator()


def test_every_record_has_the_schema(g):
    """Each json under docs/results/ names its command, commit, date and
    machine class, so each row of a table can name them."""
    names = [
        osp.relpath(p, g.RESULTS) for p in glob.glob(
            osp.join(g.RESULTS, '**', '*.json'), recursive=True)
    ]
    bad = {
        n: g.problem(json.load(open(osp.join(g.RESULTS, n))))
        for n in names if n not in NOT_RECORDS
    }
    assert len(bad) > 50 and not {n: p for n, p in bad.items() if p}
    assert g.problem({'command': 'x', 'commit': 'abc1234',
                      'date': '2026-12-02', 'machine': {}}) == \
        'no machine.cpu_class or machine.gpu'


def test_the_metafile_figure_is_its_record(g):
    main = json.load(
        open(osp.join(g.RESULTS, 'main_job', 'avx2_07bc03c.json')))
    model = {
        m['Name']: m
        for m in yaml.safe_load(open(g.METAFILE))['Models']
    }['hpm-fast_vit-mini-p4_1xb256-coslr-10e_fmnist']
    assert model['Results'][0]['Metrics']['kNN Top 1 (k=10)'] == round(
        main['values']['knn']['10'], 2)
    assert model['Metadata']['Hardware'].startswith(
        f"2 CPU cores ({main['machine']['cpu_class']})")
    assert len(open(osp.join(REPO, g.HPM_README)).read().splitlines()) <= 180


def test_every_metafile_model_is_a_row_with_its_config(g):
    meta = yaml.safe_load(open(g.METAFILE))
    rows = g.models_table()[2:]
    assert len(rows) == len(meta['Models'])
    for m, row in zip(meta['Models'], rows):
        assert row.startswith(f"| {m['Name']} |")
        assert osp.exists(osp.join(REPO, m['Config'])), m['Config']


def test_check_names_a_stale_block_and_a_new_record_is_one_regeneration(
        g, tmp_path, monkeypatch, capsys):
    """In a copy of the pages and records: --check passes, a hand edit in a
    block or a new record makes it exit 1 naming the block, and one
    regeneration writes the record's row (its file named) into it."""
    pages = {page for page, _, _ in g.BLOCKS.values()}
    for page in pages:
        (tmp_path / page).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(osp.join(REPO, page), tmp_path / page)
    shutil.copytree(g.RESULTS, tmp_path / 'docs' / 'results')
    shutil.copytree(
        osp.join(REPO, 'configs'), tmp_path / 'configs', dirs_exist_ok=True)
    monkeypatch.setattr(g, 'ROOT', str(tmp_path))
    monkeypatch.setattr(g, 'RESULTS', str(tmp_path / 'docs' / 'results'))
    assert g.main(['--check']) == 0
    for mine in (tmp_path / 'docs' / 'results' / 'main_job').glob('avx2_*'):
        mine.unlink()  # the new record below is then AVX2's only run
    assert g.main([]) == 0
    speed = tmp_path / 'docs' / 'speed.md'
    text = speed.read_text()
    speed.write_text(
        text.replace('| AMX (266 GFLOP/s), fp32 | d1ac16d',
                     '| AMX (266 GFLOP/s), fp32 | 0000000'))
    capsys.readouterr()
    assert g.main(['--check']) == 1
    assert 'docs/speed.md, block main-job' in capsys.readouterr().out
    assert g.main([]) == 0 and speed.read_text() == text
    record = json.load(
        open(tmp_path / 'docs' / 'results' / 'main_job' /
             'avx512-bf16_94274e2.json'))
    record.update(
        commit='1234567',
        machine=dict(cpu_class='AVX2', fp32_gemm_gflops=91.4))
    record['values'].update(total_s=900, train_and_knn_s=880)
    (tmp_path / 'docs' / 'results' / 'main_job' /
     'avx2_1234567.json').write_text(json.dumps(record))
    assert g.main(['--check']) == 1
    assert g.main([]) == 0 and g.main(['--check']) == 0
    assert '| AVX2 (91 GFLOP/s), fp32 | 1234567 |' in speed.read_text()
    assert '`main_job/avx2_1234567.json`' in speed.read_text()
    readme = (tmp_path / 'README.md').read_text()
    assert 'AVX2 15.0 min (1 run)' in readme
    # a record without its commit, a json cut short, a page without its
    # block: one line naming the file, exit 2, nothing written
    results = tmp_path / 'docs' / 'results' / 'main_job'
    del record['commit']
    (results / 'avx2_1234567.json').write_text(json.dumps(record))
    (tmp_path / 'docs' / 'results' / 'install' / 'x.json').write_text('{"wh')
    before = speed.read_text()
    for cut in ('commit', 'json'):
        capsys.readouterr()
        assert g.main([]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1
        assert ('main_job/avx2_1234567.json: no commit' in err
                if cut == 'commit' else 'install/x.json is not json' in err)
        (results / 'avx2_1234567.json').unlink(missing_ok=True)
    (tmp_path / 'docs' / 'results' / 'install' / 'x.json').unlink()
    speed.write_text(before.replace('<!-- end generated: fused -->', ''))
    assert g.main(['--check']) == 2
    assert 'docs/speed.md holds no single block fused' in \
        capsys.readouterr().err
    assert not list(tmp_path.glob('**/*.part'))


def test_an_estimate_is_printed_as_one_and_a_stand_in_is_not_its_class(
        g, tmp_path, monkeypatch):
    """Without an AVX2 suite record the AVX2 figure comes from the stand-in
    runs times the calibration's ratios and says it is an estimate; a
    measured AVX2 run replaces it; a stand-in's own time never counts as its
    class's measurement."""
    lo, hi = g.calibration()
    assert 0.5 < lo < 1 < hi < 2
    measured = g.expectations()[1]
    assert 'AVX2: estimated' not in measured
    assert g.records('suite/avx2_*.json') and 'AVX2 ' in measured
    shutil.copytree(g.RESULTS, tmp_path / 'results')
    for mine in (tmp_path / 'results' / 'suite').glob('avx2_*'):
        mine.unlink()
    monkeypatch.setattr(g, 'RESULTS', str(tmp_path / 'results'))
    line = g.expectations()[1]
    est_lo, est_hi = g.avx2_estimate()
    assert f'AVX2: estimated {g.mins(est_lo, est_hi)}' in line
    assert 'not measured' in line
    standins = g.records('suite/standin_*.json')
    assert standins and all(r['machine'].get('code_paths') == 'AVX2'
                            for _, r in standins)
    classes = g.by_class(standins, lambda r: r['values']['pytest_s'])
    assert classes == {}
    assert all('(estimate)' in row for row in g.suite_table()
               if '| stand-in |' in row)
