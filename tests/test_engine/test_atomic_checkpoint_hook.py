"""AtomicCheckpointHook: a kill during a save keeps the previous checkpoint."""
from conftest import FMNIST_CFG, TINY_RUN, run_train, tiny_config

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


def test_kill_during_a_save_keeps_the_previous_checkpoint(tmp_path):
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
    proc, out = run_train(
        cfg, work, env=dict(PYTHONPATH=str(tmp_path)), check=False)
    assert proc.returncode == 137, out[-3000:]
    assert not (work / 'epoch_2.pth').exists()
    assert (work / 'epoch_2.pth.tmp').exists()  # the half-written file
    assert (work / 'last_checkpoint').read_text() == str(work / 'epoch_1.pth')
    from hpm_mm.engine.checkpoint import checkpoint_problem
    assert checkpoint_problem(str(work / 'epoch_1.pth')) is None
    (tmp_path / 'kill_in_save.py').write_text('')  # no more kills
    _, out = run_train(
        cfg, work, '--resume', env=dict(PYTHONPATH=str(tmp_path)))
    assert 'resumed epoch: 1, iter: 2' in out
    assert checkpoint_problem(str(work / 'epoch_2.pth')) is None
    assert not (work / 'epoch_1.pth').exists()  # rotated out after epoch 2
