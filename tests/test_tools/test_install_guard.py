"""tools/install.sh guards its environment: an unsupported interpreter is
refused in one line before anything is made, one install at a time per
environment (a second one waits), and a killed pip is said to be killed."""
import fcntl
import os
import signal
import subprocess
import sys
import time

from helpers import REPO


def _install(env, **kw):
    return subprocess.Popen(['bash', 'tools/install.sh', 'pretrain'],
                            cwd=REPO,
                            env=dict(os.environ, HPM_SKIP_DATA='1', **env),
                            stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT,
                            text=True,
                            start_new_session=True,
                            **kw)


def test_an_unsupported_python_is_refused_before_anything_is_made(tmp_path):
    old = tmp_path / 'python3.9'
    old.write_text('#!/bin/sh\n[ "$1" = -V ] && echo "Python 3.9.18" '
                   '|| exit 1\n')
    old.chmod(0o755)
    venv = tmp_path / 'venv'
    proc = _install(dict(HPM_VENV=str(venv), HPM_PYTHON=str(old)))
    out = proc.communicate(timeout=60)[0].strip().splitlines()
    assert proc.returncode == 1 and len(out) == 1, out
    assert 'Python 3.9.18; hpm_mm supports Python 3.10-3.12' in out[0]
    assert 'Fix: ' in out[0] and not venv.exists()


def test_a_second_install_waits_for_the_first(tmp_path):
    venv = tmp_path / 'venv'
    lock = open(f'{venv}.install.lock', 'a')
    fcntl.flock(lock, fcntl.LOCK_EX)  # the first install, busy
    proc = _install(dict(HPM_VENV=str(venv), HPM_PYTHON=sys.executable))
    try:
        line = proc.stdout.readline()
        assert 'another install.sh is setting up' in line and \
            'waiting for it to finish' in line, line
        time.sleep(1)
        assert not venv.exists()  # nothing done beside the first
        fcntl.flock(lock, fcntl.LOCK_UN)  # the first ends: this one goes on
        assert 'creating virtual environment' in proc.stdout.readline()
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        lock.close()


def test_a_killed_pip_is_reported_as_killed(tmp_path):
    venv = tmp_path / 'venv'
    subprocess.run([sys.executable, '-m', 'venv', '--without-pip',
                    str(venv)],
                   check=True)
    real = venv / 'bin' / 'python.real'
    os.replace(os.path.realpath(venv / 'bin' / 'python'), real) \
        if not os.path.islink(venv / 'bin' / 'python') else \
        os.symlink(os.path.realpath(venv / 'bin' / 'python'), real)
    (venv / 'bin' / 'python').unlink(missing_ok=True)
    (venv / 'bin' / 'python').write_text(
        '#!/bin/sh\n[ "$2" = pip ] && kill -9 $$\n'
        f'exec {real} "$@"\n')
    (venv / 'bin' / 'python').chmod(0o755)
    proc = _install(dict(HPM_VENV=str(venv), HPM_PYTHON=sys.executable))
    out = proc.communicate(timeout=120)[0]
    assert proc.returncode == 1
    last = out.strip().splitlines()[-1]
    assert 'the step was killed (signal 9, KILL), not refused' in last, out
    assert 'Fix: rerun bash tools/install.sh pretrain' in last
