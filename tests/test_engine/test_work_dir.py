"""One run per work dir (hpm_mm.engine.work_dir, tools/train.py): a second
run refuses in one line naming the owner; a killed run leaves nothing stuck
(issue #29). A command's outputs: planned before its work, never over an
input or a file hpm_mm did not write, written as a set."""
import os
import os.path as osp
import signal
import subprocess
import sys
import tempfile
import time

import pytest
import torch
from helpers import REPO, tiny_config, train

from hpm_mm.engine.work_dir import (LOCK_NAME, WorkDirBusy, own_work_dir,
                                    release_work_dir)


def start(cfg, work):
    return subprocess.Popen(
        [sys.executable, 'tools/train.py', cfg, '--work-dir',
         str(work)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=dict(os.environ, PYTHONUNBUFFERED='1'))


def wait_for_lock(proc, work, timeout=600):  # the bound: a hang
    lock = work / LOCK_NAME
    end = time.time() + timeout
    while time.time() < end:
        if lock.exists() and f'pid {proc.pid}' in lock.read_text():
            return
        assert proc.poll() is None, proc.stdout.read()
        time.sleep(0.2)
    raise AssertionError('run A never took the work dir')


def test_a_second_run_refuses_and_a_killed_one_frees_the_dir(tmp_path):
    cfg = tiny_config(
        tmp_path, num_images=64, body='train_cfg = dict(max_epochs=10**6)')
    work = tmp_path / 'work'
    a = start(cfg, work)
    try:
        wait_for_lock(a, work)
        with pytest.raises(WorkDirBusy) as b:
            train(cfg, work)
        last = str(b.value)
        assert f'is in use by a running job (pid {a.pid}' in last
        assert 'Fix: wait for it to finish, or give this run its own ' \
            '--work-dir' in last
        assert a.poll() is None  # run A goes on
    finally:
        a.send_signal(signal.SIGKILL)
        a.wait()
    # killed with -9: the lock went with it; a new run may train there
    log = train(
        tiny_config(
            tmp_path / 'c',
            num_images=8,
            body='train_cfg = dict(max_epochs=1)'), work)
    assert 'Saving checkpoint at 1 epochs' in log


def test_a_killed_runs_forked_workers_do_not_keep_the_dir(tmp_path):
    """A trainer killed with kill -9 while its forked (persistent) data
    workers live on: the next run starts at once (it was refused for
    ~5 s, naming the dead pid, while the workers held the lock)."""
    work = str(tmp_path / 'work')
    script = ('import os, sys, time\n'
              'from hpm_mm.engine.work_dir import own_work_dir\n'
              f'handle = own_work_dir({work!r})\n'
              'child = os.fork()\n'
              'if child == 0:\n'
              '    time.sleep(3600)  # a persistent data worker\n'
              '    os._exit(0)\n'
              'print(child, flush=True)\n'
              'time.sleep(3600)\n')
    proc = subprocess.Popen([sys.executable, '-c', script],
                            stdout=subprocess.PIPE,
                            text=True)
    worker = int(proc.stdout.readline())
    try:
        with pytest.raises(WorkDirBusy):
            own_work_dir(work)  # the trainer holds it
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        time.sleep(0.2)
        os.kill(worker, 0)  # the worker lives on
        release_work_dir(own_work_dir(work))  # and the dir is free
    finally:
        try:
            os.kill(worker, signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_outputs_are_planned_before_any_work(tmp_path):
    """plan_outputs, every tool's check before its work: a folder that
    takes no file (root on /proc: os.access said yes; a file: it said
    'mkdir -p' it), an output that is an
    input (its path, another spelling, a symlink, a hard link), one file
    named twice, an existing file hpm_mm did not write: one line each. What
    hpm_mm wrote (its mark in a header, a json key, a checkpoint's meta;
    a folder's files: in its index) is written over."""
    from hpm_mm.engine.work_dir import MARK, plan_outputs
    from hpm_mm.errors import HPMError
    src = tmp_path / 'in.pth'
    src.write_bytes(b'the weights')
    os.symlink(src, tmp_path / 'link')
    os.link(src, tmp_path / 'hard')
    (tmp_path / 'a').mkdir()
    (tmp_path / 'mine.py').write_text("_base_ = 'my_base.py'\n")
    cases = [
        (['/proc/hpm_mm.json'], 'not writable'),
        ([tmp_path / 'no' / 'x.json'], 'does not exist. Fix: mkdir -p'),
        ([tmp_path / 'mine.py' / 'x.json'], 'is a file. Fix: another path'),
        ([src], 'is the input'),
        ([tmp_path / 'a' / '..' / 'in.pth'], 'is the input'),
        ([tmp_path / 'link'], 'is the input'),
        ([tmp_path / 'hard'], 'is the input'),
        ([tmp_path / 'x.py', tmp_path / 'a' / '..' / 'x.py'],
         'two of its outputs would be one file'),
        ([tmp_path / 'mine.py'], 'mine.py exists and hpm_mm did not write it'),
    ]
    for outputs, says in cases:
        with pytest.raises(HPMError) as refused:
            plan_outputs([str(p) for p in outputs], 'the output', [str(src)])
        assert says in str(refused.value) and '\n' not in str(refused.value)
    (tmp_path / 'ours.py').write_text(f'# {MARK}: a config\n')
    (tmp_path / 'ours.json').write_text(f'{{"{MARK}": "knn_eval.py"}}')
    torch.save(dict(state_dict={}, meta={MARK: 'x'}), tmp_path / 'ours.pth')
    plan_outputs([
        str(tmp_path / n) for n in ('ours.py', 'ours.json', 'ours.pth', 'new')
    ], 'the output', [str(src)])
    plan_outputs([str(tmp_path / 'mine.py')], 'the output', (),
                 str(tmp_path / 'ours.json'))  # a folder hpm_mm wrote
    assert not [n for n in os.listdir(tmp_path) if 'probe' in n]


WRITE = '''import os, signal, sys
from hpm_mm.engine.work_dir import text_writer, write_outputs
a, b, when = sys.argv[1:]
real = os.replace


def stopped(part):
    text_writer('new')(part)
    os.kill(os.getpid(), signal.SIGTERM)
    text_writer('new')(part)


def replace(*args):
    os.replace = real
    os.kill(os.getpid(), signal.SIGTERM)
    real(*args)


if when == 'renames':
    os.replace = replace
write_outputs({a: text_writer('new'),
               b: stopped if when == 'writing' else text_writer('new')})
print('not reached')
'''


def test_a_set_of_outputs_is_written_whole_or_not_at_all(tmp_path, warm):
    """write_outputs: Ctrl-C, or SIGTERM (whose default kills without
    cleanup), while the files are written: the earlier ones as they were,
    no part file; during the renames: they finish first (all new). A full
    disk: one line, the earlier files."""
    from hpm_mm.engine.work_dir import text_writer, write_outputs
    from hpm_mm.errors import HPMError
    a, b = tmp_path / 'a.txt', tmp_path / 'b.txt'

    def interrupted(part):
        text_writer('half')(part)
        os.kill(os.getpid(), signal.SIGINT)
        text_writer('new')(part)

    for when, after in (('ctrl-c', 'old'), ('writing', 'old'), ('renames',
                                                                'new')):
        a.write_text('old')
        b.write_text('old')
        if when == 'ctrl-c':
            with pytest.raises(KeyboardInterrupt):
                write_outputs({
                    str(a): text_writer('new'),
                    str(b): interrupted
                })
        else:
            proc = subprocess.run([warm, '-c', WRITE, a, b, when],
                                  capture_output=True,
                                  text=True)
            assert proc.returncode != 0 and 'not reached' not in proc.stdout
        assert (a.read_text(), b.read_text()) == (after, after), when
        assert sorted(os.listdir(tmp_path)) == ['a.txt', 'b.txt'], when

    def full(part):
        text_writer('half')(part)
        raise OSError(28, 'No space left on device')

    with pytest.raises(HPMError, match='No space left on device; nothing'):
        write_outputs({str(a): text_writer('newer'), str(b): full})
    assert (a.read_text(), b.read_text()) == ('new', 'new')
    assert sorted(os.listdir(tmp_path)) == ['a.txt', 'b.txt']


KNN, VIS = 'analysis_tools/knn_eval.py', \
    'analysis_tools/visualize_hard_patches.py'
CONVERT = 'model_converters/hpm2backbone.py'
SMALL = ('--cfg-options',
         'custom_hooks.KNNEvalHook.train_dataloader.dataset.indices=32',
         'custom_hooks.KNNEvalHook.val_dataloader.dataset.indices=16')
#: (tool, its arguments: CFG, CKPT, IMGS, HF replaced, what the line says)
TOOL_OUTPUTS = {
    'knn_proc': (KNN, ['CFG', 'CKPT', '--out', '/proc/hpm_mm.json',
                       *SMALL], 'not writable'),
    'knn_over_ckpt': (KNN, ['CFG', 'CKPT', '--out', 'CKPT',
                            *SMALL], 'is the input'),
    'knn_not_json': (KNN, ['CFG', 'CKPT', '--out', 'CKPT.pkl',
                           *SMALL], 'the accuracies are written as json'),
    'backbone_over_ckpt': (CONVERT, ['CKPT', 'CKPT', '--target',
                                     'mmpretrain'], 'is the input'),
    'backbone_proc':
    (CONVERT, ['CKPT', '/proc/hpm_mm.pth', '--target',
               'mmpretrain'], 'not writable'),
    'timm_over_a_users_folder':
    (CONVERT, ['CKPT', 'HF', '--target', 'timm'],
     'model.safetensors exists and hpm_mm did not write it'),
    'target_over_its_source': ('model_converters/target_weights.py',
                               ['dino', 'CKPT', 'CKPT'], 'is the input'),
    'pictures_over_the_images':
    (VIS, ['CFG', 'CKPT', '--images', 'IMGS', '--out-dir',
           'IMGS'], 'is the input'),
    'pictures_proc': (VIS, ['CFG', 'CKPT', '--out-dir',
                            '/proc/hpm_mm'], 'not writable'),
    'resave_unwritable':
    ('misc/resave_checkpoint.py', ['CKPT'], 'not writable'),
}


@pytest.mark.parametrize('case', TOOL_OUTPUTS)
def test_every_tool_with_an_output_plans_it(tmp_path, hpm_checkpoint,
                                            monkeypatch, case):
    """Each tool refuses, in one line before its work, an output in a folder
    that takes no file (/proc as root; a re-save's folder) and an output
    that is its input (knn_eval.py --out died after the evaluation with a
    traceback, or wrote its json over the checkpoint; the converters wrote
    over their source; the pictures over the images drawn; a timm folder
    over someone's)."""
    import shutil

    from helpers import FMNIST_CFG, make_image_folder, tool_main
    ckpt = str(tmp_path / 'ckpt.pth')
    shutil.copy(hpm_checkpoint, ckpt)
    imgs = osp.join(make_image_folder(str(tmp_path / 'imgs'), 1, 2), 'class_0')
    (tmp_path / 'hf').mkdir()  # someone's model folder
    (tmp_path / 'hf' / 'model.safetensors').write_bytes(b'theirs')
    script, argv, says = TOOL_OUTPUTS[case]
    named = dict(CFG=FMNIST_CFG, CKPT=ckpt, IMGS=imgs, HF=tmp_path / 'hf')
    named['CKPT.pkl'] = ckpt + '.pkl'  # (a pickle: test.py's --out by suffix)
    if case == 'resave_unwritable':

        def refused(*args, **kwargs):
            raise PermissionError(13, 'Permission denied')

        monkeypatch.setattr(tempfile, 'mkstemp', refused)  # root: anywhere
    before = {
        p: open(p, 'rb').read()
        for p in [ckpt] + [osp.join(imgs, n) for n in os.listdir(imgs)]
    }
    proc = tool_main(script, *[named.get(a, a) for a in argv])
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 1 and len(lines) == 1 and says in lines[0], \
        proc.stderr[-2000:]
    assert 'kNN' not in proc.stdout  # no work done first
    assert before == {p: open(p, 'rb').read() for p in before}
    assert sorted(os.listdir(imgs)) == ['000.png', '001.png']


def test_a_tools_own_output_is_written_over(tmp_path, hpm_checkpoint):
    """knn_eval.py --out: the json (with hpm_mm's mark) is written, and
    written again by the next run; a json of the user's is not."""
    import json

    from helpers import FMNIST_CFG, tool_main
    out = tmp_path / 'knn.json'
    for _ in range(2):
        proc = tool_main(KNN, FMNIST_CFG, hpm_checkpoint, '--ks', '3', '--out',
                         out, *SMALL)
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert set(json.loads(out.read_text())['acc']) == {'3'}
    out.write_text('{"acc": "mine"}')
    proc = tool_main(KNN, FMNIST_CFG, hpm_checkpoint, '--out', out, *SMALL)
    assert proc.returncode == 1 and 'hpm_mm did not write it' in proc.stderr
    assert out.read_text() == '{"acc": "mine"}'
