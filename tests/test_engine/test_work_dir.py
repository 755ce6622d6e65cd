"""One run per work dir (hpm_mm.engine.work_dir, tools/train.py): a second
run refuses in one line naming the owner; a killed run leaves nothing stuck
(issue #29)."""
import os
import signal
import subprocess
import sys
import time

import pytest
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
