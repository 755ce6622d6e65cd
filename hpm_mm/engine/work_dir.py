"""One run per work dir: a lock that a killed run does not leave stuck."""
import datetime
import fcntl
import os
import os.path as osp
import socket
import sys
import threading
from contextlib import contextmanager, suppress
from typing import IO

from hpm_mm.errors import HPMError

LOCK_NAME = '.run.lock'


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


if hasattr(os, 'register_at_fork'):
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
            f'cannot make the work dir {work_dir} ({e.strerror or e}). Fix: '
            '--work-dir a folder you can write (without it, work_dirs/ of '
            'the current folder).') from None
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        handle.seek(0)
        owner = handle.read().strip() or 'another process'
        handle.close()
        raise WorkDirBusy(
            f'{work_dir} is in use by a running job ({owner}). Fix: wait for '
            'it to finish, or give this run its own --work-dir.') from None
    handle.seek(0)
    handle.truncate()
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
    try:
        fcntl.flock(handle, fcntl.LOCK_UN)
    finally:
        handle.close()


def check_writable(path: str,
                   what: str,
                   folder: bool = False,
                   fix: str = 'a path in a folder you can write') -> None:
    """Refuse, in one line and before any work, an output ``path`` that
    cannot be written: a file whose folder is missing, a file path that is a
    folder, or (``folder``: made later where missing) one under a file or a
    read-only folder."""
    path = osp.abspath(path)
    if not folder and osp.isdir(path):
        raise HPMError(f'{what} {path} is a folder, and it is one file. Fix: '
                       f'a file path, e.g. {osp.join(path, "out.pth")}.')
    parent = path if folder else osp.dirname(path)
    if not folder and not osp.isdir(parent):
        raise HPMError(
            f'cannot write {what} {path}: the folder {parent} does not '
            f'exist. Fix: mkdir -p {parent}, or another path.')
    while not osp.exists(parent):
        parent = osp.dirname(parent)
    if not osp.isdir(parent) or not os.access(parent, os.W_OK):
        raise HPMError(
            f'cannot write {what} {path}: {parent} is '
            f'{"not a folder" if not osp.isdir(parent) else "read-only"}. '
            f'Fix: {fix}.')
