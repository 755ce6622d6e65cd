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
        'all.log', 'cuda_tests.xml', 'decode.json', 'main_job.json',
        'pace_b.json', 'pace_compile.json', 'pace_graphs.json',
        'pace_sdpa.json'
    ], files
    main = json.loads((out / 'main_job.json').read_text())
    for run in (main, main['main_job_graphs']):
        assert run['knn']['best'] > 0 and run['precision']['precision']
        assert run['train_s'] > 0 and 0 <= run['data_share'] < 1, run
    rows = json.loads((out / 'pace_b.json').read_text())['rows']
    assert {r['setting'] for r in rows} == {'mae', 'hpm', 'fast'}
    for r in rows:  # the step makes the host wait for nothing
        assert r['step'] > 0 and r['syncs'] == 0 and r['ops_per_step'] > 0
    sdpa = json.loads((out / 'pace_sdpa.json').read_text())['rows']
    assert [r['sdpa'] for r in sdpa] == ['math', 'efficient']
    decode = json.loads((out / 'decode.json').read_text())
    assert decode['device_decode']['images_s'] > 0
    assert decode['per_core']['device_decode']['images_s'] > 0
    for setting in ('mae', 'fast'):  # the step on both real loaders
        fed = decode['step'][setting]
        assert fed['synthetic'] > 0 and fed['fed'] > 0, fed
        assert fed['hpm_mm'] > 0 and fed['device_decode'] > 0, fed
    for name in ('pace_graphs', 'pace_compile'):
        compiled = json.loads((out / f'{name}.json').read_text())['rows']
        assert [r['compile'] for r in compiled] == [
            'reduce-overhead' if name == 'pace_graphs' else 'default'
        ]
        assert compiled[0].get('step', 0) > 0 or compiled[0].get('skipped')
