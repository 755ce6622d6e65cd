"""One run per work dir: a lock that a killed run does not leave stuck; a
command's outputs planned before its work and written as a set."""
import datetime
import fcntl
import os
import os.path as osp
import signal
import socket
import sys
import tempfile
import threading
from contextlib import contextmanager, suppress
from typing import IO, Callable, Dict, Optional, Sequence

from hpm_mm.errors import HPMError

LOCK_NAME = '.run.lock'
#: in every file hpm_mm writes beside a run (a config's header, a json key,
#: a checkpoint's meta key): only such a file is written over
MARK = 'hpm_mm_output'


class WorkDirBusy(HPMError):
    """Another live run owns the work dir."""


_HANDOVER = threading.local()
#: the lock files this process holds: a forked child (a dataloader
#: worker) lets go of them at once (:func:`_forget_locks_in_child`)
_HELD = set()


def _forget_locks_in_child() -> None:
    """In a forked child, point the held lock files' descriptors at
    /dev/null: an ``flock`` lives as long as any process has its file
    open, and persistent dataloader workers outlive a killed trainer by
    seconds, during which the next run was refused naming a dead pid. The
    child never uses the lock; the parent's stays as it is."""
    null = os.open(os.devnull, os.O_RDWR)
    for fd in _HELD:
        with suppress(OSError):
            os.dup2(null, fd)
    os.close(null)
    _HELD.clear()


os.register_at_fork(after_in_child=_forget_locks_in_child)


@contextmanager
def hand_over(handle: IO, work_dir: str):
    """Within the block, the next :func:`own_work_dir` of ``work_dir`` in
    this thread (the runner's) takes ``handle`` over instead of locking
    again, so that a command that writes into the work dir before it
    builds the runner (``pretrain_folder``) holds the lock throughout. A
    handle nothing took over is released when the block ends."""
    _HANDOVER.item = (osp.realpath(work_dir), handle)
    try:
        yield
    finally:
        item, _HANDOVER.item = getattr(_HANDOVER, 'item', None), None
        if item is not None:
            release_work_dir(item[1])


def own_work_dir(work_dir: str) -> IO:
    """Take the work dir for this process (an ``flock`` on ``.run.lock``, which
    the OS drops however the owner exits; the file names the owner), or
    raise :class:`WorkDirBusy` in one line. Keep the file open for the run."""
    item = getattr(_HANDOVER, 'item', None)
    if item is not None and item[0] == osp.realpath(work_dir):
        _HANDOVER.item = None  # taken over (hand_over)
        return item[1]
    try:
        os.makedirs(work_dir, exist_ok=True)
        handle = open(osp.join(work_dir, LOCK_NAME), 'a+')
    except OSError as e:  # read-only, under a file, ...
        raise HPMError(
            f'cannot make the work dir {work_dir} ('
            f'{e.strerror or e}). Fix: a --work-dir you can write.') from None
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        handle.seek(0)
        owner = handle.read().strip() or 'another process'
        handle.close()
        raise WorkDirBusy(
            f'{work_dir} is in use by a running job ({owner}). Fix: wait for '
            'it to finish, or give this run its own --work-dir.') from None
    handle.truncate(0)  # (appended: written from its start)
    started = datetime.datetime.now().strftime('%Y-%m-%d %H:%M:%S')
    handle.write(f'pid {os.getpid()} on {socket.gethostname()} since '
                 f'{started}: {" ".join(sys.argv)}\n')
    handle.flush()
    _HELD.add(handle.fileno())
    return handle


def release_work_dir(handle: IO) -> None:
    """Give the work dir back. The lock is dropped explicitly before the
    file is closed (a child forked before the lock was held may still
    share the open file)."""
    _HELD.discard(handle.fileno())
    with handle:  # (closed however the unlock ends)
        fcntl.flock(handle, fcntl.LOCK_UN)


def check_writable(path: str,
                   what: str,
                   folder: bool = False,
                   fix: str = 'a path in a folder you can write') -> None:
    """Refuse, in one line and before any work, an output ``path`` that
    cannot be written: a file whose folder is missing, a file path that is a
    folder, or (``folder``: made later where missing) one under a file or a
    folder where no file can be made: tried by making one (``os.access`` says
    yes to root on /proc)."""
    path = osp.abspath(path)
    if not folder and osp.isdir(path):
        raise HPMError(f'{what} {path} is a folder, and it is one file. Fix: '
                       f'a file path, e.g. {osp.join(path, "out.pth")}.')
    parent = path if folder else osp.dirname(path)
    if not folder and not osp.isdir(parent):
        why, how = ('is a file', 'another path') if osp.exists(parent) \
            else ('does not exist', f'mkdir -p {parent}, or another path')
        raise HPMError(f'cannot write {what} {path}: the folder {parent} '
                       f'{why}. Fix: {how}.')
    while not osp.exists(parent):
        parent = osp.dirname(parent)
    try:
        fd, probe = tempfile.mkstemp(dir=parent, prefix='.hpm_mm_probe')
    except OSError as e:
        raise HPMError(f'cannot write {what} {path}: {parent} is ' +
                       ('not a folder' if not osp.isdir(parent) else
                        f'not writable ({e.strerror})') +
                       f'. Fix: {fix}.') from None
    os.close(fd)
    os.remove(probe)


def _marked(path: str) -> bool:
    """Whether hpm_mm wrote ``path``: :data:`MARK` in its first MiB (a
    config's header, a json's key, a checkpoint's meta: torch's zip holds
    the pickle first, and an output's is a state dict's, small)."""
    with open(path, 'rb') as f:
        return MARK.encode() in f.read(1 << 20)


def plan_outputs(outputs: Sequence[str],
                 what: str,
                 inputs: Sequence[str] = (),
                 index: Optional[str] = None,
                 folder: bool = False,
                 fix: str = 'another output path') -> None:
    """Refuse, in one line and before any work, a command's set of
    ``outputs`` (files; ``folder``: in a folder made later) that it may
    not write: one that cannot be written (:func:`check_writable`), one
    named twice, one of its ``inputs`` (the same file by any spelling or
    link), or an existing file hpm_mm did not write (no :data:`MARK`; the
    files of a folder it wrote: their set's ``index`` file carries it)."""
    seen = set()
    for path in outputs:
        check_writable(
            osp.dirname(osp.abspath(path)) if folder else path, what, folder,
            fix)
        real = osp.realpath(path)
        if real in seen:
            raise HPMError(f'{what}: two of its outputs would be one file, '
                           f'{path}. Fix: {fix}.')
        seen.add(real)
        if not osp.isfile(path):
            continue
        same = [i for i in inputs if osp.exists(i) and osp.samefile(i, path)]
        if same:
            raise HPMError(f'{what} {path} is the input {same[0]}: writing it '
                           f'would destroy the input. Fix: {fix}.')
        if not _marked(path) and not (index and osp.isfile(index)
                                      and _marked(index)):
            raise HPMError(f'{path} exists and hpm_mm did not write it. '
                           f'Fix: {fix}, or move it away.')


def text_writer(text: str) -> Callable[[str], None]:
    """A :func:`write_outputs` writer of ``text``."""

    def write(part: str) -> None:
        with open(part, 'w') as f:
            f.write(text)

    return write


def write_outputs(writers: Dict[str, Callable[[str], None]]) -> None:
    """Write a command's outputs as a set: ``writers[path](part)`` writes
    each to a part file beside it; when all are written, they are renamed
    over their paths. A stop (Ctrl-C; SIGTERM, whose default kills without
    cleanup, alike) while writing leaves the earlier outputs and no part
    file; one during the renames waits for them (all new), then acts."""
    parts = {path: f'{path}.{os.getpid()}.part' for path in writers}
    got, renaming, old = [], [], {}

    def stop(signum, frame):
        got.append(signum)
        if not renaming and len(got) == 1:
            raise KeyboardInterrupt

    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):  # default handlers only
            if signal.getsignal(sig) in (signal.SIG_DFL,
                                         signal.default_int_handler):
                old[sig] = signal.signal(sig, stop)
    try:
        for path, write in writers.items():
            os.makedirs(osp.dirname(osp.abspath(path)), exist_ok=True)
            write(parts[path])
        renaming.append(True)
        for path, part in parts.items():
            os.replace(part, path)
    except BaseException as e:
        for part in parts.values():
            with suppress(OSError):
                os.remove(part)
        if isinstance(e, OSError):
            raise HPMError(f'cannot write {path}: {e.strerror or e}; nothing '
                           'of it written. Fix: free space.') from None
        raise
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)
        if got and (renaming or got[0] != signal.SIGINT):
            signal.raise_signal(got[0])  # as it would have, the set whole
