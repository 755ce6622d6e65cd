"""AtomicCheckpointHook: a kill during a save keeps the previous checkpoint."""
import os
import sys

import pytest
from helpers import FMNIST_CFG, TINY_RUN, process, tiny_config, train

import hpm_mm  # noqa: F401  (allow-lists the checkpoint types for torch.load)

# Kill the process (as kill -9 would: no cleanup, no exception) halfway
# through writing the checkpoint of epoch 2.
KILL_IN_SAVE = '''
import io
import os

import torch
import mmengine.runner.runner as runner_module

_save = runner_module.save_checkpoint


def save_then_die(checkpoint, filename, *args, **kwargs):
    if 'epoch_2' in filename:
        buf = io.BytesIO()
        torch.save(checkpoint, buf)
        with open(filename, 'wb') as f:
            f.write(buf.getvalue()[:len(buf.getvalue()) // 2])
        os._exit(137)
    return _save(checkpoint, filename, *args, **kwargs)


runner_module.save_checkpoint = save_then_die
'''


def test_kill_during_a_save_keeps_the_previous_checkpoint(
        tmp_path, monkeypatch):
    """max_keep_ckpts=1 and a kill halfway through writing epoch 2: epoch 1
    is still on disk and named by last_checkpoint (mmengine deleted it
    before writing the new file, in place); --resume continues from it."""
    (tmp_path / 'kill_in_save.py').write_text(KILL_IN_SAVE)
    body = TINY_RUN.format(
        keep=1, epochs=2) + (
            "custom_imports = dict(imports=['hpm_mm', 'kill_in_save'], "
            'allow_failed_imports=False)\n')
    cfg = tiny_config(tmp_path, FMNIST_CFG, body, num_images=8)
    work = tmp_path / 'work'
    # a process: the kill during the save is the point
    proc = process(
        'tools/train.py',
        cfg,
        '--work-dir',
        work,
        env=dict(PYTHONPATH=str(tmp_path)))
    assert proc.returncode == 137, (proc.stdout + proc.stderr)[-3000:]
    assert not (work / 'epoch_2.pth').exists()
    assert (work / 'epoch_2.pth.tmp').exists()  # the half-written file
    assert (work / 'last_checkpoint').read_text() == str(work / 'epoch_1.pth')
    from hpm_mm.engine.safe_load import checkpoint_problem
    assert checkpoint_problem(str(work / 'epoch_1.pth')) is None
    (tmp_path / 'kill_in_save.py').write_text('')  # no more kills
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, 'kill_in_save', raising=False)
    assert 'resumed epoch: 1, iter: 2' in train(cfg, work, resume=True)
    assert checkpoint_problem(str(work / 'epoch_2.pth')) is None
    assert not (work / 'epoch_1.pth').exists()  # rotated out after epoch 2


@pytest.mark.parametrize('what', ['checkpoint', 'last_checkpoint'])
def test_a_failed_write_is_one_line_and_resume_does_not_redo(
        tmp_path, monkeypatch, what):
    """A full disk while the checkpoint or the ``last_checkpoint`` pointer
    is written: one line naming the file (it was a 44-line OSError); a
    checkpoint whose pointer could not be written is still the one --resume
    takes (it had gone back to the one before and trained the epoch
    again)."""
    import errno

    import mmengine.runner.runner as runner_module

    import hpm_mm.engine.hooks.atomic_checkpoint_hook as hook
    from hpm_mm.engine.resume import find_resume_checkpoint
    from hpm_mm.errors import HPMError
    cfg = tiny_config(
        tmp_path, FMNIST_CFG, TINY_RUN.format(keep=2, epochs=2), num_images=8)
    work = tmp_path / 'work'
    replace, save = os.replace, runner_module.save_checkpoint
    pointers = []

    def pointer_fails(src, dst):  # the second pointer write
        if str(dst).endswith('last_checkpoint'):
            pointers.append(dst)
            if len(pointers) == 2:
                raise OSError(errno.ENOSPC, 'No space left on device')
        replace(src, dst)

    def checkpoint_fails(checkpoint, filename, *args, **kwargs):
        if 'epoch_2' in str(filename):
            with open(filename, 'wb') as f:
                f.write(b'half')  # what a full disk leaves
            raise OSError(errno.ENOSPC, 'No space left on device')
        return save(checkpoint, filename, *args, **kwargs)

    if what == 'checkpoint':
        monkeypatch.setattr(runner_module, 'save_checkpoint', checkpoint_fails)
    else:
        monkeypatch.setattr(hook.os, 'replace', pointer_fails)
    with pytest.raises(HPMError) as failed:
        train(cfg, work)
    message = str(failed.value)
    assert '\n' not in message and 'No space left on device' in message
    assert str(work / ('epoch_2.pth' if what == 'checkpoint' else
                       'last_checkpoint')) in message, message
    monkeypatch.undo()
    assert not (work / 'epoch_2.pth.tmp').exists()
    # the pointer names epoch 1; the newest complete checkpoint is resumed
    assert (work / 'last_checkpoint').read_text() == str(work / 'epoch_1.pth')
    newest = 'epoch_2.pth' if what == 'last_checkpoint' else 'epoch_1.pth'
    assert find_resume_checkpoint(str(work))[0] == str(work / newest)
