"""The one prepared GPU call (``gpu_check.sh OUT all``) at toy sizes on the
CPU: every part runs and writes what comes back (no timing asserted)."""
import json
import os
import os.path as osp
import subprocess
import sys

import pytest
from helpers import REPO


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
    main = json.loads((out / 'main_job.json').read_text())
    assert main['knn']['best'] > 0 and main['precision']['precision']
    rows = json.loads((out / 'pace_b.json').read_text())['rows']
    assert {(r['setting'], r['optimizer'])
            for r in rows} == {(s, o)
                               for s in ('mae', 'hpm', 'fast')
                               for o in ('default', 'fused')}
    for r in rows:
        assert r['step'] > 0 and r['syncs'] >= 0 and r['ops_per_step'] > 0
    fused = {r['setting']: r for r in rows if r['optimizer'] == 'fused'}
    assert fused['hpm']['syncs'] == fused['mae']['syncs'] == 1, fused
    l_rows = json.loads((out / 'pace_l.json').read_text())['rows']
    assert all('teacher' in r for r in l_rows if r['setting'] != 'mae')
    compiled = json.loads((out / 'pace_compile.json').read_text())['rows']
    assert [r['compile'] for r in compiled] == [True]
    assert compiled[0].get('step', 0) > 0 or compiled[0].get('skipped')
