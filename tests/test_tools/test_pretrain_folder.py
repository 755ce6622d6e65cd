"""hpm_mm.apis.pretrain_folder (tools/pretrain_folder.py): HPM on your own
folder of images, labelled or not, with the clear errors of a first run."""
import json
import os
import os.path as osp

import numpy as np
import pytest

from hpm_mm.errors import HPMError


def _pretrain(root, work, **kwargs):
    """pretrain_folder(root, work, **kwargs): (its result, the lines it
    showed)."""
    from hpm_mm.apis import pretrain_folder
    lines = []
    result = pretrain_folder(str(root), str(work), log=lines.append, **kwargs)
    return result, '\n'.join(lines)


# ------------------------------------------------------------ your own images
def _write_images(root, specs, seed=0):
    """specs: [(relative path, (w, h), mode)]."""
    from PIL import Image
    rng = np.random.default_rng(seed)
    for rel, (w, h), mode in specs:
        path = osp.join(root, rel)
        os.makedirs(osp.dirname(path), exist_ok=True)
        shape = (h, w) if mode == 'L' else (h, w, 3)
        arr = rng.integers(0, 120, shape, dtype=np.uint8)
        arr[h // 4:h // 2, w // 4:w // 2] = 230
        Image.fromarray(arr, mode).save(path)


def test_own_images_labelled_rgb_with_a_corrupt_file(tmp_path, capsys):
    root = tmp_path / 'photos'
    specs = []
    for c in ('cat', 'dog'):
        for i in range(10):
            ext = 'jpg' if i % 2 else 'png'
            sub = 'more/' if i % 4 == 0 else ''
            specs.append((f'{c}/{sub}{i}.{ext}', (45 + 7 * i, 70 - 2 * i),
                          'L' if i == 3 else 'RGB'))
    _write_images(str(root), specs)
    (root / 'cat' / 'broken.jpg').write_bytes(b'\xff\xd8 truncated')
    work = tmp_path / 'work'
    # without --skip-unreadable: one line naming the file and the fix
    with pytest.raises(HPMError) as bad:
        _pretrain(root, work)
    assert 'cat/broken.jpg' in str(bad.value) and '--skip-unreadable' in \
        str(bad.value) and '\n' not in str(bad.value)
    result, out = _pretrain(root, work, epochs=2, skip_unreadable=True)
    assert 'left out 1 unreadable file(s): cat/broken.jpg' in out
    assert '20 images, 2 classes' in out and '32x32 RGB' in out, out
    knn = json.load(open(work / 'knn.json'))
    assert knn['num_train'] == 16 and knn['num_val'] == 4
    assert knn['epoch'] == 2  # the epochs trained when it ran
    assert result['knn']['num_val'] == 4
    pngs = os.listdir(work / 'hard_patches')
    assert sum(p.endswith('.png') for p in pngs) == 4, pngs
    # the console (the run's logger, made in this test, writes to capsys):
    # quiet, no frozen-parameter warning; the log file keeps it
    console = capsys.readouterr()
    assert 'epoch 2/2  loss_rec' in console.out, console.out
    assert 'requires_grad' not in console.out + console.err


def test_own_images_unlabelled_grayscale_odd_sizes(tmp_path):
    root = tmp_path / 'scans'
    specs = [(f'{"a/b/" if i % 3 == 0 else ""}s{i}.png', (70 + 5 * i, 66), 'L')
             for i in range(12)]
    _write_images(str(root), specs, seed=1)
    work = tmp_path / 'work'
    _, out = _pretrain(root, work, epochs=1)
    assert '12 images, unlabelled (no kNN)' in out and '64x64 grayscale' in \
        out and 'patch 8' in out, out
    # one lr rule with --from (MAE's linear scaling): the recipe's 1.5e-3
    # per 256 images at batch 8 (it had trained at 1.5e-3 at any batch)
    assert "patch 8; lr 4.69e-05 (0.0015 per 256 images, the recipe's), " \
        'batch 8' in out, out
    assert not (work / 'knn.json').exists()
    assert len(list((work / 'hard_patches').glob('*.png'))) == 4
    # the written config holds the folder's values over the image-folder
    # base; hpm_mm's loader applies its image spec to every part
    from hpm_mm.apis import load_config
    written = (work / 'hpm_folder.py').read_text()
    assert "_base_ = '" in written and 'image-folder.py' in written
    assert "'size': 64" in written and "'channels': 1" in written
    assert 'backbone' not in written and 'num_patches' not in written
    cfg = load_config(str(work / 'hpm_folder.py'))
    assert cfg.model.backbone.patch_cfg.in_channels == 1
    assert cfg.model.neck.num_patches == 64
    assert cfg.optim_wrapper.optimizer.lr == 4.69e-05
    # the runner keeps it as written; its resolved copy is beside it
    assert (work / 'hpm_folder.py').read_text() == written
    assert 'num_patches=64' in (work / 'hpm_folder_resolved.py').read_text()


def test_own_images_one_per_class_trains_without_knn(tmp_path):
    """A labelled folder of one image per class has nothing to hold out:
    the run says so before training and ends well (kNN had failed after
    training)."""
    root = tmp_path / 'two'
    _write_images(
        str(root), [('cat/a.png', (40, 40), 'L'),
                    ('dog/b.png', (40, 40), 'L')],
        seed=2)
    work = tmp_path / 'work'
    _, out = _pretrain(root, work, epochs=1)
    assert 'kNN skipped' in out, out[-2000:]
    assert not (work / 'knn.json').exists()
    assert list((work / 'hard_patches').glob('*.png'))
    # the same command again on the same images: the finished run is
    # continued (nothing left to train), and it says so
    _, out = _pretrain(root, work, epochs=1)
    assert 'holds a run on these same images: continuing' in out
    written = (work / 'hpm_folder.py').read_text()
    # on other images (one added): refused in one line before it writes
    # anything (the earlier run's config, lists and checkpoints stay)
    (root / 'cat' / 'c.png').write_bytes((root / 'cat' / 'a.png').read_bytes())
    images = (work / 'images.txt').read_text()
    for resume in (None, True):
        with pytest.raises(HPMError) as refused:
            _pretrain(root, work, epochs=1, resume=resume)
        last = str(refused.value)
        assert 'holds a run on other images (2 then, 3 now: 1 added, 0 ' \
            'removed)' in last and '--work-dir NEW' in last, last
        assert (work / 'hpm_folder.py').read_text() == written
        assert (work / 'images.txt').read_text() == images
    # --new-run refuses any earlier run
    with pytest.raises(HPMError, match='checkpoints of an earlier run'):
        _pretrain(root, work, resume=False)
    # the same images, another length: the resume refuses the change, and
    # the config and lists it had rewritten are put back (nothing changed)
    (root / 'cat' / 'c.png').unlink()
    with pytest.raises(HPMError, match=r'train_cfg.max_epochs 1 -> 2'):
        _pretrain(root, work, epochs=2)
    assert (work / 'hpm_folder.py').read_text() == written
    assert (work / 'images.txt').read_text() == images
    # a refused option, checked on the config once it is written: that
    # config is put back too
    with pytest.raises(HPMError, match='trian_cfg'):
        _pretrain(root, work, epochs=2, cfg_options={'trian_cfg.x': 2})
    assert (work / 'hpm_folder.py').read_text() == written
    # asked: its trained epoch continues on the folder as it is now
    (root / 'cat' / 'c.png').write_bytes((root / 'cat' / 'a.png').read_bytes())
    _, out = _pretrain(
        root,
        work,
        epochs=2,
        resume=True,
        cfg_options=dict(resume_changed_run=True))
    assert 'holds a run on other images (2 then, 3 now: 1 added, 0 ' \
        'removed): continuing it' in out, out
    assert (work / 'epoch_2.pth').exists()
    assert len((work / 'images.txt').read_text().splitlines()) == 3
    # a copy of the work dir: its export line names the copy's checkpoint
    # (last_checkpoint's absolute path named the original's)
    import shutil
    copy = shutil.copytree(work, tmp_path / 'copy')
    result, _ = _pretrain(
        root,
        copy,
        epochs=2,
        resume=True,
        cfg_options=dict(resume_changed_run=True))
    assert f"hpm2backbone.py {copy / 'epoch_2.pth'} " in result['export']


def test_a_second_own_images_run_on_a_busy_work_dir_writes_nothing(tmp_path):
    """While a run holds the work dir, a second pretrain_folder on it is
    refused before it writes its image lists or config (it rewrote the
    running one's)."""
    from hpm_mm.engine.work_dir import own_work_dir, release_work_dir
    root = tmp_path / 'imgs'
    _write_images(
        str(root), [('a.png', (40, 40), 'L'), ('b.png', (40, 40), 'L')],
        seed=3)
    work = tmp_path / 'work'
    lock = own_work_dir(str(work))  # the running one
    try:
        with pytest.raises(HPMError, match='is in use by a running job'):
            _pretrain(root, work, epochs=1)
    finally:
        release_work_dir(lock)
    assert sorted(p.name for p in work.iterdir()) == ['.run.lock']


def test_own_images_deep_pixels_loops_and_own_outputs(tmp_path):
    """One image reader for the own-images scan and check_data: a 16-bit
    PNG stops pretrain_folder.py before training, naming the file and the
    fix (OpenCV would train it as mean 255 / std 1); a symlink loop counts
    each image once; a work dir inside the folder (hard-patch grids,
    checkpoints) is not data."""

    from helpers import make_image_folder
    from PIL import Image

    from hpm_mm.datasets.image_folder import scan_folder
    root = tmp_path / 'imgs'
    make_image_folder(str(root), num_classes=1, per_class=4)
    os.symlink(str(root), str(root / 'class_0' / 'loop'))
    work = root / 'work_dirs' / 'run'
    work.mkdir(parents=True)
    (work / 'last_checkpoint').write_text('epoch_1.pth')
    Image.new('L', (28, 28)).save(work / 'grid.png')
    other = root / 'elsewhere'
    other.mkdir()
    (other / '.run.lock').write_text('')
    Image.new('L', (28, 28)).save(other / 'grid.png')
    scan = scan_folder(str(root))
    assert len(scan['files']) == 4 and not scan['unreadable'], scan
    deep = np.full((28, 28), 40000, dtype=np.uint16)
    Image.fromarray(deep).save(root / 'class_0' / 'deep.png')
    with pytest.raises(HPMError) as refused:
        _pretrain(root, tmp_path / 'w')
    assert 'deep.png' in str(refused.value) and '16-bit' in str(
        refused.value), refused.value
    assert not (tmp_path / 'w').exists() or not list(
        (tmp_path / 'w').glob('epoch_*.pth'))


def test_own_images_clear_errors(tmp_path):
    from hpm_mm.apis.folder import choose_settings
    from hpm_mm.datasets.image_folder import scan_folder
    from hpm_mm.errors import HPMError
    empty = tmp_path / 'empty'
    (empty / 'sub').mkdir(parents=True)
    (empty / 'notes.txt').write_text('no images here')
    with pytest.raises(HPMError, match='holds no image file.*Fix'):
        scan_folder(str(empty))
    with pytest.raises(HPMError, match='is not a folder'):
        scan_folder(str(tmp_path / 'missing'))
    # the choices follow the images
    big = dict(files=['x'] * 5000, sizes=[(500, 375)] * 5000, gray=False)
    s = choose_settings(big)
    assert (s['img_size'], s['patch_size'], s['channels'],
            s['batch_size']) == (224, 16, 3, 256)
    assert s['epochs'] == 20  # ~400 steps of 20 (the last batch kept)
    tiny = dict(files=['x'] * 10, sizes=[(20, 20)] * 10, gray=True)
    s = choose_settings(tiny)
    assert (s['img_size'], s['channels'], s['batch_size']) == (32, 1, 8)


def test_own_images_that_cannot_train_are_one_line(tmp_path):
    """A folder of one constant value trains nothing (it trained with std 1
    and no word); a file whose name holds a line break cannot be listed
    (the scan counted it, training skipped it): one line each, before
    anything is written."""
    from PIL import Image
    flat = tmp_path / 'flat'
    flat.mkdir()
    for i in range(3):
        Image.new('L', (32, 32), 7).save(flat / f'{i}.png')
    with pytest.raises(HPMError) as refused:
        _pretrain(flat, tmp_path / 'w1')
    last = str(refused.value)
    assert 'are one constant value' in last and 'Fix:' in last
    odd = tmp_path / 'odd'
    _write_images(
        str(odd), [('a.png', (40, 40), 'L'), ('b\nc.png', (40, 40), 'L')])
    with pytest.raises(HPMError) as refused:
        _pretrain(odd, tmp_path / 'w2')
    last = str(refused.value)
    assert 'b\\nc.png (its name holds a line break' in last and \
        'rename it' in last


def test_deep_pixel_fix_follows_the_files_range(tmp_path):
    """The 16-bit refusal's fix divides by 256; a float image's does not
    (0..1 floats divided by 256 would train black)."""
    from PIL import Image

    from hpm_mm.datasets.image_folder import load_image
    Image.fromarray(np.full((8, 8), 40000, np.uint16)).save(tmp_path / 'a.png')
    Image.fromarray(np.full((8, 8), 0.5, np.float32)).save(tmp_path / 'b.tif')
    with pytest.raises(ValueError, match='v / 256'):
        load_image(str(tmp_path / 'a.png'))
    with pytest.raises(ValueError) as e:
        load_image(str(tmp_path / 'b.tif'))
    assert 'v / 256' not in str(e.value) and '* 255' in str(e.value)


@pytest.mark.parametrize('size', [2, 30, 232])
def test_an_img_size_off_the_patch_grid_is_one_line(tmp_path, size):
    """An input size the 8 x 8 patch grid cannot cut (a multiple of 8; of
    16 from 224 px) is refused in one line before the config is written."""
    root = tmp_path / 'imgs'
    _write_images(str(root), [(f'{i}.png', (40, 40), 'L') for i in range(4)])
    with pytest.raises(HPMError) as refused:
        _pretrain(root, tmp_path / 'w', img_size=size, dry_run=True)
    assert f'{size}' in str(refused.value) and 'multiple of' in str(
        refused.value) and '\n' not in str(refused.value), refused.value
    assert not (tmp_path / 'w' / 'hpm_folder.py').exists()


def test_a_folder_runs_lr_reads_back_as_the_same_rate_per_256(tmp_path):
    """A folder run's config states its lr for its own batch, so a run
    ``--from`` its checkpoint reads the same rate per 256 images (it read
    the batch-8 lr as a batch-256 one: 32x smaller at each --from)."""
    from mmengine.config import Config

    from hpm_mm.apis.folder import choose_recipe
    root = tmp_path / 'imgs'
    _write_images(str(root), [(f'{i}.png', (32, 32), 'L') for i in range(8)])
    result, _ = _pretrain(root, tmp_path / 'w', epochs=1, dry_run=True)
    cfg = Config.fromfile(result['config'])
    settings = dict(result['settings'])
    start = dict(cfg=cfg, alpha=None, untrained=[], epochs=(1, 1))
    choose_recipe(settings, cfg, start, None, None)
    assert settings['batch_size'] == 8 < 256
    assert settings['lr'] == pytest.approx(cfg.optim_wrapper.optimizer.lr)
