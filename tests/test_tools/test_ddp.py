"""Two processes (gloo, CPU) through tools/dist_train.sh, with DDP and with
FSDP (mmengine's FlexibleRunner), equal one process with the same global
batch."""
import glob
import json
import os
import subprocess
import sys

import torch
from helpers import FMNIST_CFG, HPM_HOOKS, REPO, process, tiny_config
from torch.distributed.elastic.utils.distributed import get_free_port

import hpm_mm  # noqa: F401

# alpha 1 -> 1: every masked patch is chosen by the teacher, so masks are a
# function of the weights and the image only (no per-rank random stream
# enters the comparison); a deterministic pipeline; no shuffling; SGD, whose
# step is linear in the gradient (Adam's first steps are ~lr * sign(grad),
# which turns float reduction-order noise on tiny gradients into lr-sized
# differences). A small max_norm keeps gradient clipping active, so a
# per-shard clipping norm under FSDP would show.
MAX_NORM = 0.05
BODY = f'''
optim_wrapper = dict(optimizer=dict(_delete_=True, type='SGD', lr=0.05,
                                    momentum=0.9, weight_decay=1e-4),
                     clip_grad=dict(max_norm={MAX_NORM}))
model = dict(mask_generator=dict(alpha_0=1.0, alpha_T=1.0))
train_cfg = dict(_delete_=True, type='IterBasedTrainLoop', max_iters=3)
param_scheduler = []
default_hooks = dict(checkpoint=dict(by_epoch=False, interval=3))
randomness = dict(seed=0, diff_rank_seed=True)
'''
RESIZE = "dict(type='Resize', scale=28)"
# The last rank's batch of iteration 1 becomes NaN: that step must be
# skipped on every rank (the optimizer wrapper's guard, one all-reduced
# flag), so the runs still agree afterwards.
NAN_HOOK = '''
import torch
from mmengine.dist import get_rank, get_world_size
from mmengine.hooks import Hook
from mmengine.registry import HOOKS


@HOOKS.register_module()
class NaNInputOnLastRank(Hook):

    def before_train_iter(self, runner, batch_idx, data_batch=None):
        if runner.iter == 1 and get_rank() == get_world_size() - 1:
            x = data_batch['inputs']
            nan = float('nan')
            data_batch['inputs'] = [i.float() * nan for i in x] \\
                if isinstance(x, list) else x.float() * nan
'''
HOOKS = ("custom_imports = dict(imports=['hpm_mm', 'nan_injection'], "
         "allow_failed_imports=False)\n"
         "custom_hooks = [dict(type='HPMScheduleHook'), "
         "dict(type='NaNInputOnLastRank')]")


def _nan_env(tmp_path):
    (tmp_path / 'nan_injection.py').write_text(NAN_HOOK)
    return dict(
        PYTHONPATH=os.pathsep.join(
            [str(tmp_path), os.environ.get('PYTHONPATH', '')]))


FSDP = '''
runner_type = 'HPMFlexibleRunner'
strategy = dict(type='HPMFSDPStrategy', state_dict_cfg='full',
                model_wrapper=dict(type='HPMFullyShardedDataParallel'))
'''


def _two_processes(tmp_path,
                   name,
                   body,
                   *args,
                   base=FMNIST_CFG,
                   transform=RESIZE):
    """The weights after 3 steps of 2 processes (``args``: train.py's)."""
    cfg = tiny_config(
        tmp_path / name,
        base,
        body,
        num_images=12,
        transform=transform,
        batch_size=2,
        shuffle=False,
        hooks=HOOKS)
    _dist_train(cfg, tmp_path / name, _nan_env(tmp_path), *args)
    return torch.load(
        sorted((tmp_path / name).glob('iter_*.pth'))[-1],
        map_location='cpu')['state_dict']


def _dist_train(cfg, work, env, *args):
    """``tools/dist_train.sh cfg 2 --work-dir work *args`` on CPU (gloo,
    one thread per process, a free port), ``env`` added; it must
    succeed."""
    env = dict(
        os.environ,
        PYTHON=sys.executable,
        PORT=str(get_free_port()),  # a fixed one another run may hold
        OMP_NUM_THREADS='1',
        **env)
    proc = subprocess.run([
        'bash', 'tools/dist_train.sh', cfg, '2', '--work-dir',
        str(work), *args
    ],
                          cwd=REPO,
                          env=env,
                          capture_output=True,
                          text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-5000:]
    return proc


def _one_process(python,
                 tmp_path,
                 name,
                 body,
                 base=FMNIST_CFG,
                 transform=RESIZE):
    cfg = tiny_config(
        tmp_path / name,
        base,
        body,
        num_images=12,
        transform=transform,
        batch_size=4,
        shuffle=False,
        hooks=HOOKS)
    proc = process(  # the NaN injection is imported at start-up
        'tools/train.py',
        cfg,
        '--work-dir',
        tmp_path / name,
        env=_nan_env(tmp_path),
        python=python)  # the warm fixture's: one process all the same
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    log = glob.glob(str(tmp_path / name / '*' / '*.log'))[0]
    assert 'optimizer step skipped' in open(log).read()
    return torch.load(
        sorted((tmp_path / name).glob('iter_*.pth'))[-1],
        map_location='cpu')['state_dict']


def _assert_equal_weights(sa, sb, name):
    assert sa.keys() == sb.keys(), name
    # identical (finite) weights after 3 iterations, the NaN one skipped,
    # up to float32 reduction order: student and teacher (updated on every
    # rank, never reduced)
    for k in sa:
        assert torch.allclose(sa[k], sb[k], rtol=1e-4, atol=1e-6), \
            (name, k, (sa[k] - sb[k]).abs().max())
    # the teacher follows applied steps only: copied at iteration 0, updated
    # at 1 (after step 0), not at 2 (step 1 was skipped)
    assert int(sa['teacher.steps']) == int(sb['teacher.steps']) == 2


def test_two_processes_equal_one(tmp_path, warm):
    sa = _one_process(warm, tmp_path, 'one', BODY)
    # gradient clipping was active in the reference run
    scalars = glob.glob(
        str(tmp_path / 'one' / '*' / 'vis_data' / 'scalars.json'))[0]
    norms = [
        json.loads(line)['grad_norm'] for line in open(scalars)
        if 'grad_norm' in line
    ]
    assert max(norms) > MAX_NORM
    # the steps moved the student away from its EMA teacher
    assert not torch.equal(
        sa['backbone.layers.0.attn.qkv.weight'],
        sa['teacher.module.backbone.layers.0.attn.qkv.'
           'weight'])
    _assert_equal_weights(sa, _two_processes(tmp_path, 'ddp', BODY), 'ddp')


def test_fsdp_two_processes_equal_one(tmp_path, warm):
    """FSDP (FlexibleRunner, HPMFullyShardedDataParallel: sharded student,
    replicated EMA teacher, FSDP-wide gradient clipping) against one
    process of the same FlexibleRunner (which seeds the model's
    construction differently from Runner, so it is its own reference).
    The FSDP run keeps mmengine's one optimizer group per parameter (as
    hpm_mm saved before merging them); resumed from its step-2 checkpoint
    it ends where it did: the fit check reads the unsharded shapes,
    HPMFSDPStrategy loads the optimizer's state (mmengine's FSDPStrategy
    failed to) and the groups, keyed by name, are merged."""
    flexible = "\nrunner_type = 'HPMFlexibleRunner'\n"
    sa = _one_process(warm, tmp_path, 'one', BODY + flexible)
    sb = _two_processes(
        tmp_path, 'fsdp', BODY + FSDP, '--cfg-options',
        'default_hooks.checkpoint.interval=1', 'optim_wrapper.constructor='
        'DefaultOptimWrapperConstructor')
    _assert_equal_weights(sa, sb, 'fsdp')
    cfg, second = tmp_path / 'fsdp' / 'tiny_cfg.py', tmp_path / 'resumed'
    out = _dist_train(cfg, second, _nan_env(tmp_path), '--resume',
                      tmp_path / 'fsdp' / 'iter_2.pth').stdout
    assert 'resumed epoch: 0, iter: 2' in out and 'optimizer groups (one ' \
        'per parameter) merged by setting into 2' in out, out[-3000:]
    resumed = torch.load(second / 'iter_3.pth', map_location='cpu')
    _assert_equal_weights(sb, resumed['state_dict'], 'fsdp resumed')
    assert len(resumed['optimizer']['param_groups']) == 2


def test_ibot_two_processes_equal_one(tmp_path, warm):
    """HPM on iBOT under DDP: the centers are all-reduced (equal on both
    ranks and to one process's), per-parameter clipping, the guard. Every
    image 25% masked, all by the teacher's score (no per-rank random
    stream); deterministic multi-crop views."""
    base = os.path.join(REPO, 'configs', 'hpm', 'frameworks',
                        'hpm-ibot_vit-mini-p4_1xb256-coslr-10e_fmnist.py')
    views = ("dict(type='MultiView', num_views=[2, 2], transforms=["
             "[dict(type='Resize', scale=28)], "
             "[dict(type='Resize', scale=16)]])")
    body = BODY.replace('alpha_T=1.0)',
                        'alpha_T=1.0, mask_ratio=[(.25, .25)])')
    assert 'mask_ratio' in body
    sa = _one_process(warm, tmp_path, 'one', body, base, views)
    assert sa['head.center'].abs().sum() > 0
    _assert_equal_weights(
        sa, _two_processes(tmp_path, 'ddp', body, base=base, transform=views),
        'ibot-ddp')


def test_dist_launchers_use_the_project_environment(tmp_path):
    """Not `python` from PATH (a fresh shell often has none with torch),
    but the environment tools/install.sh made; a venv, config, checkpoint
    or option with spaces reaches train.py / test.py whole (the launchers
    quote every expansion)."""
    import os
    import stat
    venv = tmp_path / 'my venv'
    (venv / 'bin').mkdir(parents=True)
    fake = venv / 'bin' / 'python'
    fake.write_text('#!/bin/sh\necho "venv python"\n'
                    'for a in "$@"; do echo "[$a]"; done\n')
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    wrong = tmp_path / 'path'
    wrong.mkdir()
    (wrong / 'python').write_text('#!/bin/sh\necho "PATH python"\nexit 3\n')
    (wrong / 'python').chmod(0o755)
    env = dict(
        os.environ,
        HPM_VENV=str(venv),
        PATH=f'{wrong}{os.pathsep}{os.environ["PATH"]}')
    env.pop('PYTHON', None)
    for script, args in (('dist_train.sh', [
            'my cfg.py', '2', '--work-dir', 'my work'
    ]), ('dist_test.sh',
         ['my cfg.py', 'my ckpt.pth', '2', '--out', 'a b.json'])):
        out = subprocess.run(['bash', f'tools/{script}', *args],
                             cwd=REPO,
                             env=env,
                             capture_output=True,
                             text=True)
        assert out.returncode == 0, out.stdout + out.stderr
        first, *rest = out.stdout.splitlines()
        argv = [ln[1:-1] for ln in rest]
        assert first == 'venv python' and argv[:2] == [
            '-m', 'torch.distributed.run'
        ]
        tail = [a for a in args if a != '2']
        assert argv[-len(tail) -
                    2:] == [*tail[:-2], '--launcher', 'pytorch',
                            *tail[-2:]], argv


def test_killing_the_launcher_ends_its_workers(tmp_path):
    """kill -9 of tools/dist_train.sh (torchrun) mid-training: its two
    workers end within seconds instead of training on as orphans."""
    import signal
    import time
    cfg = tiny_config(
        tmp_path,
        FMNIST_CFG,
        'train_cfg = dict(_delete_=True, by_epoch=False, max_iters=100000)\n'
        'param_scheduler = []\n',
        num_images=12,
        transform=RESIZE,
        batch_size=2,
        hooks=HPM_HOOKS)
    env = dict(
        os.environ,
        PYTHON=sys.executable,
        PORT=str(get_free_port()),  # a fixed one another run may hold
        OMP_NUM_THREADS='1')
    proc = subprocess.Popen([
        'bash', 'tools/dist_train.sh', cfg, '2', '--work-dir',
        str(tmp_path / 'work')
    ],
                            cwd=REPO,
                            env=env,
                            stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    workers = []

    def alive():
        return [
            p for p in workers if os.path.exists(f'/proc/{p}')
            and 'Z' not in open(f'/proc/{p}/stat').read().split()[2]
        ]

    def wait_for(state, what):  # the bound only catches a hang
        deadline = time.time() + 600
        while not state():
            assert time.time() < deadline, what
            time.sleep(0.2)

    try:
        # the state itself, not a time: both workers training (iterations
        # logged), then, after the kill, both gone
        wait_for(
            lambda: proc.poll() is not None or list(
                (tmp_path / 'work').glob('*/vis_data/scalars.json')),
            'the run logged no iteration')
        assert proc.poll() is None, f'the launcher ended: {proc.returncode}'
        workers = [
            int(p) for p in subprocess.run(
                ['pgrep', '-P', str(proc.pid)], capture_output=True,
                text=True).stdout.split()
        ]
        assert len(workers) == 2, f'workers: {workers}'
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        wait_for(lambda: not alive(),
                 f'workers {alive()} outlived their launcher')
    finally:
        for p in workers:
            try:
                os.kill(p, signal.SIGKILL)
            except OSError:
                pass


def _fsdp_wrap_on_rank(rank, port, out):
    """Spawned: rank ``rank`` builds other weights (its own seed), wraps
    them and saves the full weights the wrapper starts from."""
    import torch.distributed as dist
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

    from hpm_mm.engine.model_wrappers import HPMFullyShardedDataParallel
    dist.init_process_group(
        'gloo', f'tcp://127.0.0.1:{port}', rank=rank, world_size=2)
    torch.manual_seed(rank)
    wrapped = HPMFullyShardedDataParallel(torch.nn.Linear(4, 3))
    with FSDP.summon_full_params(wrapped):
        torch.save(wrapped.module.weight.detach().clone(), f'{out}/{rank}.pt')
    dist.destroy_process_group()


def test_fsdp_ranks_start_from_rank_0s_weights(tmp_path):
    """Ranks that built different weights (diff_rank_seed) start from rank
    0's, as DDP does (the two-process FSDP run above agrees without it)."""
    torch.multiprocessing.spawn(
        _fsdp_wrap_on_rank, args=(get_free_port(), str(tmp_path)), nprocs=2)
    torch.manual_seed(0)
    want = torch.nn.Linear(4, 3).weight.detach()
    for rank in (0, 1):
        assert torch.equal(torch.load(tmp_path / f'{rank}.pt'), want), rank
