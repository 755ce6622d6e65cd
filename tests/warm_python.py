"""``python script.py args`` for the tests, without a new interpreter's
imports each time.

A new interpreter spends ~10 s importing torch, torchvision, mmengine,
mmpretrain and hpm_mm before a tool does anything, and the suite runs ~110
tool commands. Here one server per test process imports them once and
forks a child per command: the child points fds 0/1/2 at /dev/null and two
files, takes the command's working directory, environment and
``sys.argv``, runs the script as ``__main__`` with the script's folder
first on ``sys.path`` (as ``python script.py`` does), runs the exit
functions and exits with the script's code. Each child is a fresh copy of
the server, which only ever imports, so no command sees another's state.

Where the environment differs from the server's in anything but
``IGNORED_ENV`` (any variable may be read at start-up, as PYTHONPATH or
OMP_NUM_THREADS are), or the command is not a script (``-m``, ``-c``),
:func:`run` starts a new interpreter instead, as it does with ``cold``
(conftest.python: ``HPM_TEST_COLD=1``, to compare or to rule the server
out).
"""
import atexit
import io
import json
import os
import os.path as osp
import select
import signal
import subprocess
import sys
import tempfile

# What every tool imports; imported once, in the server.
PRELOAD = ('torch', 'torchvision', 'mmengine.runner', 'mmpretrain', 'hpm_mm')
# variables no start-up reads: the child gets the command's value (the
# stream buffering is set per command; pytest names each test in the last)
IGNORED_ENV = {'PYTHONUNBUFFERED', 'PYTEST_CURRENT_TEST'}


def _exit_code(exc: SystemExit) -> int:
    """The status ``python`` exits with for ``sys.exit(exc.code)``."""
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code
    print(exc.code, file=sys.stderr)
    return 1


def _child(req: dict) -> None:
    """In the forked child: become ``python argv...`` and exit."""
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    for fd, path in ((1, req['stdout']), (2, req['stderr'])):
        f = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(f, fd)
        os.close(f)
    sys.stdin = io.TextIOWrapper(io.FileIO(0, 'r', closefd=False))
    sys.stdout = io.TextIOWrapper(
        io.FileIO(1, 'w', closefd=False), encoding='utf-8', write_through=True)
    sys.stderr = io.TextIOWrapper(
        io.FileIO(2, 'w', closefd=False),
        encoding='utf-8',
        errors='backslashreplace',
        write_through=True)
    sys.__stdin__, sys.__stdout__, sys.__stderr__ = (sys.stdin, sys.stdout,
                                                     sys.stderr)
    os.chdir(req['cwd'])
    os.environ.clear()
    os.environ.update(req['env'])
    script = osp.abspath(req['argv'][0])
    sys.argv = list(req['argv'])
    sys.path[0] = osp.dirname(script)
    code = 0
    try:  # the interpreter's way: a fresh __main__, its loader, no spec
        import builtins
        import importlib.machinery
        import types
        main = types.ModuleType('__main__')
        main.__dict__.update(
            __file__=script,
            __builtins__=builtins,
            __loader__=importlib.machinery.SourceFileLoader(
                '__main__', script),
            __cached__=None)
        sys.modules['__main__'] = main
        with open(script, 'rb') as f:
            code_object = compile(f.read(), script, 'exec')
        exec(code_object, main.__dict__)
    except SystemExit as exc:
        code = _exit_code(exc)
    except BaseException as exc:  # as the interpreter: the hook, status 1
        tb = exc.__traceback__  # from the script's frame on, without ours
        while tb and tb.tb_frame.f_code.co_filename != script:
            tb = tb.tb_next
        tb = tb or exc.__traceback__
        sys.excepthook(type(exc), exc.with_traceback(tb), tb)
        code = 1
    try:
        import threading
        threading._shutdown()  # non-daemon threads, as at interpreter exit
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code)


def serve() -> None:
    """Read one JSON request per line on stdin; answer the child's pid, then
    its exit status (``returncode`` as :mod:`subprocess` gives it)."""
    import importlib
    for name in PRELOAD:
        importlib.import_module(name)
    print(json.dumps({'ready': os.getpid()}), flush=True)
    for line in sys.stdin:
        req = json.loads(line)
        pid = os.fork()
        if pid == 0:
            _child(req)
        print(json.dumps({'pid': pid}), flush=True)
        _, status = os.waitpid(pid, 0)
        print(
            json.dumps({'returncode': os.waitstatus_to_exitcode(status)}),
            flush=True)


class _Server:
    """The client's end: one server, started at the first command."""

    def __init__(self):
        self.proc = None
        self.env = None
        self.runs = 0  # commands run in the server
        atexit.register(self.stop)

    def start(self):
        self.env = dict(os.environ)
        self.log = tempfile.TemporaryFile()
        self.proc = subprocess.Popen([sys.executable, __file__],
                                     stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE,
                                     stderr=self.log,
                                     env=self.env)
        self.buf = b''
        self._read(None)

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.stdin.close()
            self.proc.wait(timeout=60)

    def _read(self, timeout):
        """The server's next message; None after ``timeout`` seconds."""
        fd = self.proc.stdout.fileno()
        while b'\n' not in self.buf:
            if not select.select([fd], [], [], timeout)[0]:
                return None
            chunk = os.read(fd, 4096)
            if not chunk:
                self.log.seek(0)
                raise RuntimeError('tests/warm_python.py ended:\n' +
                                   self.log.read().decode()[-4000:])
            self.buf += chunk
        line, self.buf = self.buf.split(b'\n', 1)
        return json.loads(line)

    def run(self, argv, cwd, env, timeout):
        if self.proc is None or self.proc.poll() is not None:
            self.start()
        self.runs += 1
        with tempfile.TemporaryDirectory() as tmp:
            out, err = osp.join(tmp, 'stdout'), osp.join(tmp, 'stderr')
            self.proc.stdin.write(
                json.dumps(
                    dict(argv=argv, cwd=cwd, env=env, stdout=out,
                         stderr=err)).encode() + b'\n')
            self.proc.stdin.flush()
            pid = self._read(None)['pid']
            done = self._read(timeout)
            if done is None:  # as subprocess.run's timeout: kill, then raise
                os.kill(pid, signal.SIGKILL)
                self._read(None)
            with open(out, errors='replace') as f:
                stdout = f.read()
            with open(err, errors='replace') as f:
                stderr = f.read()
        if done is None:
            raise subprocess.TimeoutExpired([sys.executable, *argv], timeout,
                                            stdout, stderr)
        return subprocess.CompletedProcess([sys.executable, *argv],
                                           done['returncode'], stdout, stderr)


_SERVER = _Server()


def run(args,
        cwd,
        env=None,
        timeout=600,
        cold=False) -> subprocess.CompletedProcess:
    """``subprocess.run([sys.executable, *args], cwd=cwd, env=env,
    capture_output=True, text=True, timeout=timeout)``, through the warm
    server where that is the same thing (see the module's docstring)."""
    env = dict(os.environ if env is None else env)
    server_env = _SERVER.env if _SERVER.proc else os.environ
    differs = {
        k
        for k in set(env) | set(server_env) if env.get(k) != server_env.get(k)
    } - IGNORED_ENV
    if cold or differs or not args or args[0].startswith('-'):
        return subprocess.run([sys.executable, *args],
                              cwd=cwd,
                              env=env,
                              capture_output=True,
                              text=True,
                              timeout=timeout)
    return _SERVER.run(list(args), str(cwd), env, timeout)


def bench(args, n=5) -> str:
    """``python tests/warm_python.py --bench SCRIPT ARGS...``: the median of
    ``n`` runs of the command in a new interpreter and in the warm server
    (started beforehand), side by side."""
    import time
    env = dict(os.environ)
    run(args, os.getcwd(), env)  # the server's start is not a command's

    def median(cold):
        times = []
        for _ in range(n):
            start = time.perf_counter()
            run(args, os.getcwd(), env, cold=cold)
            times.append(time.perf_counter() - start)
        return sorted(times)[n // 2]

    new, warm = median(True), median(False)
    return (f'{" ".join(args)}, median of {n}, OMP_NUM_THREADS='
            f'{env.get("OMP_NUM_THREADS")}: new interpreter {new:.2f} s, '
            f'warm server {warm:.2f} s, {new / warm:.1f}x')


if __name__ == '__main__':
    if sys.argv[1:2] == ['--bench']:
        print(bench(sys.argv[2:]))
    else:
        serve()
