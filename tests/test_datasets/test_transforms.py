"""LoadImageFromFileChecked: an unreadable image named, or skipped when asked,
and listed by the pre-flight check."""
import os.path as osp

from conftest import folder_config, python, run_train

import hpm_mm  # noqa: F401  (allow-lists the checkpoint types for torch.load)


def test_unreadable_image_named_or_skipped_and_checked_before(tmp_path):
    """A 0-byte PNG: training stops naming the file (mmcv's error named
    none), or, opted in, skips it and logs the count; the pre-flight check
    lists it before any training."""
    from conftest import make_image_folder
    data = make_image_folder(str(tmp_path / 'imgs'), 2, 4)
    bad = osp.join(data, 'class_1', 'broken.png')
    open(bad, 'wb').close()
    cut = osp.join(data, 'class_0', 'cut.png')  # a PNG cut short
    with open(osp.join(data, 'class_0', '000.png'), 'rb') as f:
        head = f.read()[:60]
    with open(cut, 'wb') as f:
        f.write(head)
    proc, out = run_train(
        folder_config(tmp_path, data), tmp_path / 'w1', check=False)
    assert proc.returncode != 0
    assert (f'cannot read image {bad}' in out
            or f'cannot read image {cut}' in out) and 'skip_unreadable' in out
    _, out = run_train(
        folder_config(tmp_path, data, skip=True), tmp_path / 'w2',
        '--cfg-options', 'train_cfg.max_epochs=3')
    assert f'skipped unreadable image {bad}' in out
    assert f'skipped unreadable image {cut}' in out
    assert (tmp_path / 'w2' / 'epoch_3.pth').exists()
    check = python(
        'tools/misc/check_data.py', folder_config(tmp_path, data), timeout=300)
    assert check.returncode == 1
    assert f'PROBLEM train_dataloader: unreadable image {bad}' in check.stdout
    assert f'PROBLEM train_dataloader: unreadable image {cut}' in check.stdout
    assert '10 image files checked, 2 unreadable (L: 8)' in check.stdout
    proc, out = run_train(
        folder_config(tmp_path, data),
        tmp_path / 'w3',
        '--check-data',
        check=False)
    assert proc.returncode != 0 and f'unreadable image {cut}' in out
    assert not (tmp_path / 'w3' / 'epoch_1.pth').exists()


def test_check_data_reads_every_hooks_loader():
    """check_data.py covers the held-out images of both evaluation hooks,
    the pictures' too (HardPatchVisHook's ``dataloader``)."""
    from conftest import FMNIST_CFG

    from hpm_mm.apis import load_config
    from hpm_mm.datasets.data_check import _loaders
    names = [n for n, _ in _loaders(load_config(FMNIST_CFG))]
    assert names == [
        'train_dataloader', 'KNNEvalHook.train_dataloader',
        'KNNEvalHook.val_dataloader', 'HardPatchVisHook.dataloader'
    ]
