"""The AMP stability run's CPU dry run: the config, Runner, optimizer
wrapper and records the GPU run uses (bf16 here; fp16 needs CUDA), on a tiny
ViT and generated Fashion-MNIST files."""
import json
import os.path as osp
import sys

import numpy as np
import pytest
import torch
from helpers import REPO

sys.path.insert(0, osp.join(REPO, '.dev_scripts'))
import amp_stability  # noqa: E402

TINY = osp.join(REPO, '.dev_scripts', 'configs',
                'amp-stability_hpm-vit-tiny_fmnist-64px.py')


def write_fashion_mnist(root, num_train=40, num_test=10, seed=0):
    """Fashion-MNIST's idx files (images idx3, labels idx1), random."""
    rng = np.random.default_rng(seed)
    for split, n in (('train', num_train), ('t10k', num_test)):
        images = rng.integers(0, 255, (n, 28, 28)).astype(np.uint8)
        labels = rng.integers(0, 10, n).astype(np.uint8)
        with open(osp.join(root, f'{split}-images-idx3-ubyte'), 'wb') as f:
            f.write(b''.join(
                int(v).to_bytes(4, 'big')
                for v in (2051, n, 28, 28)) + images.tobytes())
        with open(osp.join(root, f'{split}-labels-idx1-ubyte'), 'wb') as f:
            f.write(b''.join(int(v).to_bytes(4, 'big')
                             for v in (2049, n)) + labels.tobytes())


def test_amp_run_records_and_dtypes(tmp_path, capsys):
    write_fashion_mnist(str(tmp_path))
    out = tmp_path / 'amp.json'
    res = amp_stability.main([
        TINY, '--steps', '10', '--batch', '2', '--amp', 'bf16', '--work-dir',
        str(tmp_path / 'work'), '--out',
        str(out), '--cfg-options', f'train_dataloader.dataset.data_root='
        f'{tmp_path}'
    ])
    summary = res['bf16']['summary']
    assert summary['skipped'] == 0 and summary['nonfinite_logged'] == 0
    assert summary['dtypes'] == dict(
        student='torch.bfloat16',
        per_patch_losses='torch.float32',
        loss_rec='torch.float32',
        loss_pred='torch.float32')
    curve = res['bf16']['curve']
    assert [c['step'] for c in curve] == list(range(10))
    assert all(
        np.isfinite(c['loss_rec']) and c['grad_norm'] > 0 for c in curve)
    # alpha 0 -> 0.5 over the run; the teacher follows every step
    assert curve[-1]['alpha'] > curve[0]['alpha'] == 0.
    assert summary['teacher_steps'] == 10
    assert json.loads(
        out.read_text())['results']['bf16']['summary']['steps'] == 10
    assert '| bf16 | 10 | 0 | 0 |' in capsys.readouterr().out


def test_the_run_is_the_recipe_scaled_and_forced_to_its_precision(tmp_path):
    """300 steps of batch 64: 10 epochs of 30 batches of the first 1,920
    images, lr 1.5e-4 x 64 / 256 with 1 epoch of warm-up and a cosine, the
    teacher's ramp over the run, bf16 autocast even where fp32 is faster."""
    import hpm_mm  # noqa: F401
    cfg = amp_stability.run_config(amp_stability.CONFIG, 'bf16', 300, 64,
                                   str(tmp_path))
    assert cfg.train_dataloader.dataset.indices == 1920
    assert cfg.train_dataloader.batch_size == 64
    assert cfg.optim_wrapper.optimizer.lr == pytest.approx(1.5e-4 * 64 / 256)
    assert cfg.optim_wrapper.type == 'AutocastOptimWrapper'
    assert cfg.optim_wrapper.dtype == 'bfloat16'
    assert cfg.optim_wrapper.clip_grad.max_norm == 5.0
    assert [(s.type, s.begin, s.end)
            for s in cfg.param_scheduler] == [('LinearLR', 0, 1),
                                              ('CosineAnnealingLR', 0, 10)]
    assert cfg.train_cfg.max_epochs == 10
    assert cfg.model.teacher.momentum_epochs == 10
    assert cfg.model.mask_generator.alpha_T == 0.5
    assert cfg.work_dir == osp.join(str(tmp_path), 'bf16')
    with pytest.raises(SystemExit, match='multiple of 10'):
        amp_stability.run_config(amp_stability.CONFIG, 'bf16', 25, 64,
                                 str(tmp_path))


def test_fp16_needs_cuda(tmp_path):
    if torch.cuda.is_available():
        pytest.skip('fp16 runs here')
    with pytest.raises(SystemExit):
        amp_stability.main(['--amp', 'fp16'])
