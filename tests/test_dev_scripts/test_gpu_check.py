"""The one prepared GPU call (``gpu_check.sh OUT all``) at toy sizes on the
CPU: every part runs whole (no deadline share, no time budget: nothing
here depends on the machine's pace) and writes what comes back; the only
skips are the CUDA-only parts, each saying why (no timing asserted). Its
Python commands run in a warm interpreter (:mod:`warm_python`: the stack
imported once, each command forked from it), not seven cold ones."""
import json
import os
import os.path as osp
import subprocess
import sys

import pytest
from helpers import CUDA, REPO

NO_GRAPHS = {'skipped': 'CUDA graphs need a CUDA device'}


def test_the_warm_interpreter_runs_commands_as_a_new_one(warm, tmp_path):
    """Each way of naming the program, with the caller's streams, folder,
    environment and exit status."""
    (tmp_path / 'prog.py').write_text(
        'import os, sys\nprint(sys.argv[1:], os.getcwd(), os.environ["X"])\n'
        'sys.exit(3)\n')
    runs = [
        ([str(tmp_path / 'prog.py'), 'a'], '', 3, f"['a'] {tmp_path} x", ''),
        (['-c', 'import sys; print(sys.stdin.read()); sys.exit("no")'], 'fed',
         1, 'fed', 'no'),
        (['-S', '-', 'b'], 'import sys; print(sys.argv)', 0, "['-', 'b']", ''),
        (['-m', 'json.tool'], '{"k": 1}', 0, '"k": 1', ''),
    ]
    for argv, stdin, code, says, err in runs:
        proc = subprocess.run([warm, *argv],
                              input=stdin,
                              cwd=tmp_path,
                              env=dict(os.environ, X='x'),
                              capture_output=True,
                              text=True)
        assert proc.returncode == code and says in proc.stdout and \
            err in proc.stderr, (argv, proc)


def test_the_gpu_call_runs_at_toy_sizes(warm, tmp_path):
    if not osp.isfile(
            osp.join(REPO, 'data', 'fashion_mnist',
                     'train-images-idx3-ubyte')):
        pytest.skip('Fashion-MNIST is not prepared (tools/install.sh)')
    out = tmp_path / 'out'
    proc = subprocess.run(
        ['bash', '.dev_scripts/gpu_check.sh',
         str(out), 'all'],
        cwd=REPO,
        env=dict(
            os.environ,
            HPM_GPU_TINY='1',
            HPM_GPU_INSTALL='0',  # this environment has the stack
            HPM_GPU_DEADLINE='1',  # spent at once: the dry run ignores it
            HPM_PYTHON=warm,
            HPM_GPU_WORK=str(tmp_path / 'work'),  # the checkout untouched
            PATH=f'{osp.dirname(sys.executable)}:{os.environ["PATH"]}'),
        capture_output=True,
        text=True)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-4000:]
    files = sorted(os.listdir(out))
    assert files == [
        'all.log', 'cuda_tests.xml', 'decode.json', 'main_job.json',
        'pace_b.json', 'pace_compile.json', 'pace_graphs.json',
        'pace_sdpa.json'
    ], files
    cuda_tests = (out / 'cuda_tests.xml').read_text()
    assert ('value="no CUDA device"' in cuda_tests) == (not CUDA)
    main = json.loads((out / 'main_job.json').read_text())
    graphs = json.loads((out / 'pace_graphs.json').read_text())
    if CUDA:
        assert [r['compile'] for r in graphs['rows']] == ['reduce-overhead']
    else:
        assert graphs == NO_GRAPHS
    assert main['work_dir'].startswith(str(tmp_path / 'work' / 'gpu_'))
    assert main['knn']['best'] > 0 and main['precision']['precision']
    assert main['train_s'] > 0 and 0 <= main['data_share'] < 1, main
    rows = json.loads((out / 'pace_b.json').read_text())['rows']
    assert {r['setting'] for r in rows} == {'mae', 'hpm', 'fast'}
    compiled = json.loads((out / 'pace_compile.json').read_text())['rows']
    assert [r['compile'] for r in compiled] == ['default']
    for r in rows + compiled:  # a compiled row compiled the step's parts
        assert bool(r['compiled']) == (r['compile'] is not False), r
    sdpa = json.loads((out / 'pace_sdpa.json').read_text())['rows']
    assert [r['sdpa'] for r in sdpa] == ['math', 'flash']
    for r in rows + compiled + sdpa:  # each measured: nothing skipped; the
        assert r['step'] > 0, r  # operators counted where they run eager
        assert ('ops_per_step' in r) == (r['compile'] is False), r
    for r in rows:  # the step makes the host wait for nothing
        assert r['syncs'] == 0, r
    decode = json.loads((out / 'decode.json').read_text())
    assert decode['device_decode']['images_s'] > 0
    assert decode['per_core']['device_decode']['images_s'] > 0
    for setting in ('mae', 'fast'):  # the step on both real loaders
        fed = decode['step'][setting]
        assert fed['synthetic'] > 0 and fed['fed'] > 0, fed
        assert fed['hpm_mm'] > 0 and fed['device_decode'] > 0, fed
        assert set(fed['skipped_steps'].values()) == {0}, fed  # all finite
