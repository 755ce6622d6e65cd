"""The one prepared GPU call (``gpu_check.sh OUT all``) at toy sizes on the
CPU: every part runs and writes what comes back (no timing asserted), and
the pace benchmark's rows hold their columns."""
import json
import os
import os.path as osp
import subprocess
import sys

import pytest
from helpers import REPO

sys.path.insert(0, osp.join(REPO, '.dev_scripts'))
import gpu_pace  # noqa: E402


def test_the_gpu_call_runs_at_toy_sizes(tmp_path):
    if not osp.isfile(
            osp.join(REPO, 'data', 'fashion_mnist',
                     'train-images-idx3-ubyte')):
        pytest.skip('Fashion-MNIST is not prepared (tools/install.sh)')
    env = dict(
        os.environ,
        HPM_GPU_TINY='1',
        HPM_GPU_INSTALL='0',  # this environment has the stack
        HPM_GPU_DEADLINE='900',
        HPM_PYTHON=sys.executable,
        PATH=f'{osp.dirname(sys.executable)}:{os.environ["PATH"]}')
    out = tmp_path / 'out'
    proc = subprocess.run(
        ['bash', '.dev_scripts/gpu_check.sh',
         str(out), 'all'],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=1500)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-4000:]
    files = sorted(os.listdir(out))
    assert files == [
        'all.log', 'cuda_tests.xml', 'main_job.json', 'pace_b.json',
        'pace_compile.json', 'pace_l.json'
    ], files
    assert len(files) <= 8  # what a lent machine gives back
    main = json.loads((out / 'main_job.json').read_text())
    assert main['knn']['best'] > 0 and main['precision']['precision']
    pace = json.loads((out / 'pace_b.json').read_text())
    rows = pace['rows']
    assert {(r['setting'], r['optimizer'], r['before'])
            for r in rows
            } == {(s, o, False)
                  for s in ('mae', 'hpm', 'fast')
                  for o in ('foreach', 'fused')} | {('hpm', 'foreach', True)}
    for r in rows:
        assert r['step'] > 0 and r['syncs'] >= 0 and r['ops_per_step'] > 0
    fused = {
        r['setting']: r
        for r in rows if r['optimizer'] == 'fused' and not r['before']
    }
    assert fused['hpm']['syncs'] == fused['mae']['syncs'] == 1, fused
    l_rows = json.loads((out / 'pace_l.json').read_text())['rows']
    assert all('sections' in r for r in l_rows if r['setting'] != 'mae')
    compiled = json.loads((out / 'pace_compile.json').read_text())['rows']
    assert [r['compile'] for r in compiled] == [True]
    assert compiled[0]['step'] > 0 or compiled[0].get('skipped')


def test_table_rows_name_ratio_and_mfu():

    def row(setting, **numbers):
        return dict(
            setting=setting,
            arch='b',
            batch=8,
            amp='bf16',
            optimizer='fused',
            before=False,
            compile=False,
            **numbers)

    timed = dict(syncs=1, first_step_s=1.)
    rows = [
        row('mae', step=0.1, img_s=80., macs=1e9, flop_ratio=1., **timed),
        row('hpm', step=0.2, img_s=40., macs=2e9, flop_ratio=2., **timed),
        row('fast', skipped='time budget spent'),
    ]
    text = gpu_pace.table(rows, tflops=1.)  # 1 TFLOP/s
    lines = text.splitlines()
    assert '| B | 8 | bf16 | HPM faithful, fused | 0.2000 | 40 | 2.00x | ' \
        '2.00x | 16.0% |' in lines[3]  # 40 img/s x 2 x 2e9 / 1e12
    assert 'time budget spent' in lines[4]
