import os
import os.path as osp
import subprocess
import sys

import numpy as np
import pytest

REPO = osp.dirname(osp.dirname(osp.abspath(__file__)))
FMNIST_CFG = osp.join(REPO, 'configs', 'hpm',
                      'hpm_vit-mini-p4_1xb256-coslr-10e_fmnist.py')


def make_image_folder(root: str, num_classes: int = 2, per_class: int = 8,
                      size: int = 32, gray: bool = True, seed: int = 0) -> str:
    """Write an ImageNet-style folder (root/<class>/<img>.png) of random
    images with a bright blob so they are not pure noise; return root."""
    from PIL import Image
    rng = np.random.default_rng(seed)
    for c in range(num_classes):
        os.makedirs(osp.join(root, f'class_{c}'), exist_ok=True)
        for i in range(per_class):
            img = rng.integers(0, 60, (size, size), dtype=np.uint8)
            y, x = rng.integers(4, size - 12, 2)
            img[y:y + 8 + 4 * c, x:x + 8] = 200
            if not gray:
                img = np.stack([img] * 3, -1)
            Image.fromarray(img).save(osp.join(root, f'class_{c}',
                                               f'{i:03d}.png'))
    return root


HPM_HOOKS = "custom_hooks = [dict(type='HPMScheduleHook')]"


def tiny_config(tmp_path, base: str = FMNIST_CFG, body: str = '',
                num_images: int = 16, hooks: str = HPM_HOOKS) -> str:
    """A config inheriting ``base`` that trains on a generated folder of
    ``num_images`` grayscale 32x32 PNGs, batch 4, no workers, and only the
    ``hooks`` given (no kNN over Fashion-MNIST)."""
    data = make_image_folder(
        str(tmp_path / 'imgs'), num_classes=2, per_class=num_images // 2)
    cfg = tmp_path / 'tiny_cfg.py'
    cfg.write_text(f'''
_base_ = [{base!r}]
train_dataloader = dict(
    batch_size=4, num_workers=0, persistent_workers=False,
    dataset=dict(_delete_=True, type='CustomDataset', data_root={data!r},
                 with_label=False, pipeline=[
                     dict(type='LoadImageFromFile', color_type='grayscale'),
                     dict(type='RandomResizedCrop', scale=32,
                          crop_ratio_range=(0.5, 1.0), backend='pillow'),
                     dict(type='PackInputs')]))
default_hooks = dict(logger=dict(interval=1),
                     checkpoint=dict(interval=1))
{hooks}
{body}
''')
    return str(cfg)


def run_tool(*args, timeout: int = 600) -> subprocess.CompletedProcess:
    """Run ``python tools/<args>`` from the repo root; fail with its output."""
    proc = subprocess.run([sys.executable, *args], cwd=REPO,
                          capture_output=True, text=True, timeout=timeout,
                          env=dict(os.environ, PYTHONUNBUFFERED='1'))
    if proc.returncode != 0:
        pytest.fail(f'{args} failed ({proc.returncode}):\n'
                    f'{proc.stdout[-4000:]}\n{proc.stderr[-6000:]}')
    return proc


@pytest.fixture(scope='session')
def hpm_checkpoint(tmp_path_factory):
    """Checkpoint of a 2-iteration HPM run of the small config (teacher
    active: alpha 0.5 -> 1)."""
    tmp = tmp_path_factory.mktemp('hpm')
    cfg = tiny_config(
        tmp, FMNIST_CFG, num_images=8,
        body='train_cfg = dict(max_epochs=1)\n'
        'model = dict(mask_generator=dict(alpha_0=0.5, alpha_T=1.0))')
    run_tool('tools/train.py', cfg, '--work-dir', str(tmp / 'work'))
    ckpt = tmp / 'work' / 'epoch_1.pth'
    assert ckpt.exists()
    return str(ckpt)
