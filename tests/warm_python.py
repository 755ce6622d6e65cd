"""A warm interpreter for tests that run a script of many Python commands
(the GPU call's dry run): one server imports the stack once and forks a
child per command, which runs it with the caller's argv, cwd, environment
and standard streams (passed as file descriptors); the caller is a small
client that exits with the child's status. The command runs as written,
without the ~5 s each new interpreter spends importing torch and the
OpenMMLab stack (nothing here times anything).

    with warm_python(tmp_path) as python:  # an executable: python ARGS
        subprocess.run([python, 'tools/train.py', ...])

Understood: ``python FILE ARGS``, ``-c CODE``, ``-m MODULE``, ``-`` (the
program on stdin), after any of ``-S -u -B``."""
import atexit
import contextlib
import json
import os
import os.path as osp
import runpy
import signal
import socket
import struct
import subprocess
import sys
import time
import traceback

CLIENT = '''#!{python} -S
import json, os, socket, struct, sys
s = socket.socket(socket.AF_UNIX)
s.connect({sock!r})
msg = json.dumps(dict(argv=sys.argv[1:], cwd=os.getcwd(),
                      env=dict(os.environ))).encode()
socket.send_fds(s, [struct.pack('!Q', len(msg))], [0, 1, 2])
s.sendall(msg)
code = b''
while True:
    part = s.recv(64)
    if not part:
        break
    code += part
sys.exit(int(code or b'1'))
'''


def _run(request: dict) -> int:
    """Run one command in this (forked) process; its exit status."""
    argv = list(request['argv'])
    while argv and argv[0] in ('-S', '-u', '-B'):
        argv.pop(0)
    os.chdir(request['cwd'])
    os.environ.clear()
    os.environ.update(request['env'])
    sys.path[1:1] = [  # what a new interpreter reads at its start
        p for p in os.environ.get('PYTHONPATH', '').split(os.pathsep) if p
    ]
    try:
        if argv[:1] == ['-c']:
            sys.argv = ['-c'] + argv[2:]
            exec(
                compile(argv[1], '<string>', 'exec'), {'__name__': '__main__'})
        elif argv[:1] == ['-m']:
            sys.argv, sys.path[0] = argv[1:], os.getcwd()
            runpy.run_module(argv[1], run_name='__main__', alter_sys=True)
        elif argv[:1] == ['-']:
            sys.argv = argv
            exec(
                compile(sys.stdin.read(), '<stdin>', 'exec'),
                {'__name__': '__main__'})
        else:
            sys.argv = argv
            sys.path[0] = osp.dirname(osp.abspath(argv[0]))
            runpy.run_path(argv[0], run_name='__main__')
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 0 if e.code is None \
            else 1
        if not isinstance(e.code, (int, type(None))):
            print(e.code, file=sys.stderr)
    except BaseException:
        traceback.print_exc()
        code = 1
    atexit._run_exitfuncs()
    return code


def serve(path: str) -> None:
    """Import the stack, then fork a child per connection on ``path``."""
    import mmpretrain.models  # noqa: F401

    import hpm_mm  # noqa: F401  (the warm part: torch, mmengine, ...)
    server = socket.socket(socket.AF_UNIX)
    server.bind(path + '.new')
    server.listen()
    os.rename(path + '.new', path)  # ready: accepting
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children reap themselves
    while True:
        conn, _ = server.accept()
        head, fds, _, _ = socket.recv_fds(conn, 8, 3)
        size, msg = struct.unpack('!Q', head)[0], b''
        while len(msg) < size:
            msg += conn.recv(size - len(msg))
        if os.fork() == 0:
            server.close()
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            for i, fd in enumerate(fds):
                os.dup2(fd, i)
                os.close(fd)
            code = _run(json.loads(msg))
            for stream in (sys.stdout, sys.stderr):
                with contextlib.suppress(ValueError):  # (a closed one)
                    stream.flush()
            conn.sendall(str(code).encode())
            os._exit(code)
        conn.close()
        for fd in fds:
            os.close(fd)


@contextlib.contextmanager
def warm_python(folder):
    """Start a server in ``folder``; yield the path of its client, an
    executable taking a Python interpreter's arguments."""
    import tempfile
    sock = osp.join(tempfile.mkdtemp(prefix='warm'), 's')  # (a short path)
    client = osp.join(folder, 'python')
    with open(client, 'w') as f:
        f.write(CLIENT.format(python=sys.executable, sock=sock))
    os.chmod(client, 0o755)
    proc = subprocess.Popen([sys.executable, __file__, sock])
    try:
        while not osp.exists(sock):  # (it binds once the stack is imported)
            if proc.poll() is not None:
                raise RuntimeError(f'the warm interpreter exited: '
                                   f'{proc.returncode}')
            time.sleep(0.05)
        yield client
    finally:
        proc.terminate()
        proc.wait()


if __name__ == '__main__':
    serve(sys.argv[1])
