"""configs/hpm/README.md's tables are generated from the metafile and the
results json (.dev_scripts/generate_readme.py), and the page keeps
mmpretrain's size."""
import importlib.util
import json
import os.path as osp

import yaml
from helpers import REPO


def _generator():
    spec = importlib.util.spec_from_file_location(
        'generate_readme', osp.join(REPO, '.dev_scripts',
                                    'generate_readme.py'))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_committed_tables_are_the_metafile_and_the_json():
    g = _generator()
    page = open(g.README).read()
    begin, end = g.MARKS
    assert page.split(begin)[1].split(end)[0].strip() == g.generate()
    assert len(page.splitlines()) <= 180
    # the metafile's measured kNN is the main job's json, to the digit
    main = json.load(open(g.MAIN_JOB))
    model = {
        m['Name']: m
        for m in yaml.safe_load(open(g.METAFILE))['Models']
    }['hpm-fast_vit-mini-p4_1xb256-coslr-10e_fmnist']
    assert model['Results'][0]['Metrics']['kNN Top 1 (k=10)'] == round(
        main['acc']['10'], 2)
    assert main['machine']['cpu_class'] and main['command']


def test_every_metafile_model_is_a_row_with_its_config():
    g = _generator()
    meta = yaml.safe_load(open(g.METAFILE))
    rows = g.models_table(meta)[2:]
    assert len(rows) == len(meta['Models'])
    for m, row in zip(meta['Models'], rows):
        assert row.startswith(f"| {m['Name']} |")
        assert osp.exists(osp.join(REPO, m['Config'])), m['Config']
