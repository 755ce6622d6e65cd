"""tests/warm_python.py: a command run in the warm server's fork is what
``python script.py`` gives (output, exit status, working directory, argv,
sys.path, environment, exit functions, tracebacks), each in a fresh state;
a timeout kills it; a start-up environment of its own gets a new
interpreter."""
import os
import re
import subprocess
import sys

import pytest
import warm_python

SCRIPT = r'''
import atexit, os, sys
import hpm_mm
atexit.register(lambda: print('atexit ran'))
print(__name__, __file__, sys.argv, os.getcwd(), sys.path[0])
print('PYTHONUNBUFFERED', os.environ.get('PYTHONUNBUFFERED'))
print('to stderr', file=sys.stderr)
print('seen before:', getattr(hpm_mm, 'touched', False))
hpm_mm.touched = True
mode = sys.argv[1]
if mode == 'code':
    sys.exit(3)
if mode == 'message':
    sys.exit('a message')
if mode == 'raise':
    raise ValueError('bad input')
'''


def cold(args, cwd, env):
    return subprocess.run([sys.executable, *args],
                          cwd=cwd,
                          env=env,
                          capture_output=True,
                          text=True,
                          timeout=600)


@pytest.mark.parametrize('mode,code', [('ok', 0), ('code', 3), ('message', 1),
                                       ('raise', 1)])
def test_a_command_runs_as_in_a_new_interpreter(tmp_path, mode, code):
    script = tmp_path / 'tool' / 'script.py'
    script.parent.mkdir()
    script.write_text(SCRIPT)
    env = dict(os.environ, PYTHONUNBUFFERED='x')
    args = [os.path.relpath(script, tmp_path), mode, 'two words']
    runs = warm_python._SERVER.runs
    warm_python.run(args, tmp_path, env)  # the second run sees no state
    warm = warm_python.run(args, tmp_path, dict(env, PYTHONUNBUFFERED='y'))
    new = cold(args, tmp_path, dict(env, PYTHONUNBUFFERED='y'))
    assert warm_python._SERVER.runs == runs + 2  # both in the server
    assert (warm.returncode, warm.stdout,
            warm.stderr) == (new.returncode, new.stdout, new.stderr)
    assert warm.returncode == code
    assert 'seen before: False' in warm.stdout
    assert f"__main__ {script} ['tool/script.py', '{mode}'" in warm.stdout
    assert 'PYTHONUNBUFFERED y' in warm.stdout and 'atexit ran' in warm.stdout
    if mode == 'raise':
        assert warm.stderr.splitlines()[-1] == 'ValueError: bad input'
        assert 'warm_python' not in warm.stderr and 'runpy' not in warm.stderr


def test_the_command_is_a_fork_of_the_server(tmp_path):
    """Where the environment allows it the parent is the server; an
    environment the server did not start with (any variable may be read at
    start-up) gets a new interpreter."""
    script = tmp_path / 'ppid.py'
    script.write_text('import os; print(os.getppid())')
    warm = warm_python.run([str(script)], tmp_path, dict(os.environ))
    assert int(warm.stdout) == warm_python._SERVER.proc.pid
    new = warm_python.run([str(script)], tmp_path,
                          dict(os.environ, HPM_WARM_TEST='1'))
    assert int(new.stdout) == os.getpid()
    cold = warm_python.run([str(script)],
                           tmp_path,
                           dict(os.environ),
                           cold=True)
    assert int(cold.stdout) == os.getpid()


def test_a_timeout_kills_the_command_and_the_server_goes_on(tmp_path):
    script = tmp_path / 'sleep.py'
    script.write_text("import time; print('started', flush=True); "
                      'time.sleep(600)')
    with pytest.raises(subprocess.TimeoutExpired) as exc:
        warm_python.run([str(script)], tmp_path, dict(os.environ), timeout=5)
    assert exc.value.output == 'started\n'
    script.write_text("print('next')")
    assert warm_python.run([str(script)], tmp_path,
                           dict(os.environ)).stdout == 'next\n'


def test_bench_times_both_ways(tmp_path):
    script = tmp_path / 'hello.py'
    script.write_text("print('hello')")
    line = warm_python.bench([str(script)], n=1)
    assert re.fullmatch(
        f'{script}, median of 1, OMP_NUM_THREADS=.*: new interpreter '
        r'[\d.]+ s, warm server [\d.]+ s, [\d.]+x', line), line
