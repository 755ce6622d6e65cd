"""Nothing lost, nothing silent: what a failure at the end of training
keeps, on tiny generated data through tools/train.py."""
import os.path as osp
import subprocess
import sys

import torch
from conftest import FMNIST_CFG, REPO, tiny_config

BROKEN_KNN = '''
custom_hooks = [
    dict(type='HPMScheduleHook'),
    dict(type='KNNEvalHook',
         train_dataloader=dict(
             batch_size=4, num_workers=0,
             sampler=dict(type='DefaultSampler', shuffle=False),
             collate_fn=dict(type='default_collate'),
             dataset=dict(type='CustomDataset', data_root={root!r},
                          pipeline=[dict(type='PackInputs')])),
         val_dataloader=dict(
             batch_size=4, num_workers=0,
             sampler=dict(type='DefaultSampler', shuffle=False),
             collate_fn=dict(type='default_collate'),
             dataset=dict(type='CustomDataset', data_root={root!r},
                          pipeline=[dict(type='PackInputs')])))]
train_cfg = dict(max_epochs=1)
'''


def test_evaluation_failure_after_training_keeps_the_checkpoint(tmp_path):
    """A kNN data path that is only found wrong after training: the final
    checkpoint is already on disk, and the error says how to rerun only the
    evaluation."""
    missing = str(tmp_path / 'no_such_knn_data')
    cfg = tiny_config(tmp_path, FMNIST_CFG, BROKEN_KNN.format(root=missing),
                      num_images=8, hooks='')
    work = tmp_path / 'work'
    proc = subprocess.run(
        [sys.executable, 'tools/train.py', cfg, '--work-dir', str(work)],
        cwd=REPO, capture_output=True, text=True, timeout=600)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    ckpt = work / 'epoch_1.pth'
    assert ckpt.exists() and (work / 'last_checkpoint').exists()
    assert (f'training is saved in {ckpt}. Rerun only this evaluation: '
            f'python tools/analysis_tools/knn_eval.py {cfg} {ckpt}') in out
    assert osp.getsize(ckpt) > 0


def test_runaway_learning_rate_stops_with_one_clear_error(tmp_path):
    """lr 1e6: the first step is applied, every later one is non-finite and
    skipped; after max_consecutive_skips training stops (exit != 0) instead
    of saving NaN checkpoints and exiting 0."""
    cfg = tiny_config(tmp_path, FMNIST_CFG, num_images=8)
    work = tmp_path / 'work'
    proc = subprocess.run(
        [sys.executable, 'tools/train.py', cfg, '--work-dir', str(work),
         '--cfg-options', 'optim_wrapper.optimizer.lr=1e6',
         'optim_wrapper.max_consecutive_skips=3', 'train_cfg.max_epochs=4'],
        cwd=REPO, capture_output=True, text=True, timeout=600)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-3000:]
    assert '3 optimizer steps in a row had a non-finite loss' in out
    assert 'optimizer step skipped on every rank' in out
    for path in work.glob('epoch_*.pth'):  # whatever was saved is finite
        sd = torch.load(path, map_location='cpu')['state_dict']
        assert all(torch.isfinite(v).all() for v in sd.values()
                   if v.is_floating_point()), path
