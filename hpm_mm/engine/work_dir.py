"""One run per work dir: a lock that a killed run does not leave stuck."""
import datetime
import fcntl
import os
import os.path as osp
import socket
import sys
from typing import IO

from hpm_mm.errors import HPMError

LOCK_NAME = '.run.lock'


class WorkDirBusy(HPMError):
    """Another live run owns the work dir."""


def own_work_dir(work_dir: str) -> IO:
    """Take the work dir for this process, or refuse in one line.

    An advisory ``flock`` on ``work_dir/.run.lock``: the operating system
    drops it when the owner exits, however it exits (``kill -9`` too), so a
    dead run never blocks the next one. The file names the owner (pid, host,
    start time, command) for the refusal. Keep the returned file open for
    the whole run.

    Raises:
        WorkDirBusy: A live run holds the lock.
    """
    os.makedirs(work_dir, exist_ok=True)
    handle = open(osp.join(work_dir, LOCK_NAME), 'a+')
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        handle.seek(0)
        owner = handle.read().strip() or 'another process'
        handle.close()
        raise WorkDirBusy(
            f'{work_dir} is in use by a running job ({owner}); two '
            'runs in one work dir would overwrite each other\'s checkpoints '
            'and interleave their logs. Fix: wait for it to finish, or give '
            'this run its own --work-dir.') from None
    handle.seek(0)
    handle.truncate()
    started = datetime.datetime.now().strftime('%Y-%m-%d %H:%M:%S')
    handle.write(f'pid {os.getpid()} on {socket.gethostname()} since '
                 f'{started}: {" ".join(sys.argv)}\n')
    handle.flush()
    return handle


def release_work_dir(handle: IO) -> None:
    """Give the work dir back. The lock is dropped explicitly before the
    file is closed: dataloader workers forked during the run share its
    open file, and would otherwise hold the lock for as long as they live
    (persistent workers outlive ``train()``)."""
    try:
        fcntl.flock(handle, fcntl.LOCK_UN)
    finally:
        handle.close()
