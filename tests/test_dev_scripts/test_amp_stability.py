"""The AMP stability run's CPU dry run: the model, data, optimizer wrapper
and records the GPU run uses (bf16 here; fp16 needs CUDA), on a tiny ViT."""
import gzip
import json
import os.path as osp
import sys

import numpy as np
import pytest
import torch
from conftest import REPO

sys.path.insert(0, osp.join(REPO, '.dev_scripts'))
import amp_stability  # noqa: E402


def write_idx(path, images):
    """Fashion-MNIST's idx3 format: magic, count, rows, cols, pixels."""
    n, h, w = images.shape
    head = b''.join(int(v).to_bytes(4, 'big') for v in (2051, n, h, w))
    with gzip.open(path, 'wb') as f:
        f.write(head + images.astype(np.uint8).tobytes())


def test_amp_run_records_and_dtypes(tmp_path, capsys):
    images = np.random.default_rng(0).integers(0, 255, (20, 28, 28))
    write_idx(tmp_path / 'train-images-idx3-ubyte.gz', images)
    loaded = amp_stability.load_images(str(tmp_path), 'cpu')
    assert loaded.shape == (20, 28, 28) and torch.equal(
        loaded, torch.from_numpy(images.astype(np.uint8)))
    out = tmp_path / 'amp.json'
    res = amp_stability.main([
        '--arch', 't', '--img-size', '32', '--batch', '2', '--steps', '3',
        '--amp', 'bf16', '--device', 'cpu', '--data',
        str(tmp_path), '--out',
        str(out)
    ])
    summary = res['bf16']['summary']
    assert summary['skipped'] == 0 and summary['nonfinite_logged'] == 0
    assert summary['dtypes'] == dict(
        student='torch.bfloat16',
        per_patch_losses='torch.float32',
        loss_rec='torch.float32',
        loss_pred='torch.float32')
    curve = res['bf16']['curve']
    assert [c['step'] for c in curve] == [0, 1, 2]
    assert all(
        np.isfinite(c['loss_rec']) and c['grad_norm'] > 0 for c in curve)
    assert curve[-1]['alpha'] > curve[0]['alpha'] == 0.
    assert summary['teacher_steps'] == 3
    assert json.loads(
        out.read_text())['results']['bf16']['summary']['steps'] == 3
    assert '| bf16 | 3 | 0 | 0 |' in capsys.readouterr().out


def test_fp16_needs_cuda_and_missing_data_is_named(tmp_path):
    if not torch.cuda.is_available():
        with pytest.raises(SystemExit):
            amp_stability.main(['--amp', 'fp16', '--device', 'cpu'])
    with pytest.raises(FileNotFoundError, match='prepare_fashion_mnist'):
        amp_stability.load_images(str(tmp_path), 'cpu')
