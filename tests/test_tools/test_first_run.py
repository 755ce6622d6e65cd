"""From a fresh machine to results: the quiet console, TensorBoard, your own
images, the frozen-parameter constructor, the pretraining profile's checks
(mmcv without compiled ops) and kNN features under autocast."""
import json
import os
import os.path as osp
import sys

import numpy as np
import pytest
import torch
from conftest import FMNIST_CFG, NEEDS_FULL, REPO, run_tool, tiny_config

DET_CFG = osp.join(REPO, 'configs', 'benchmarks', 'det',
                   'mask-rcnn_hpm-vit-base-p16_sfp_8xb2-1x_coco-1024.py')
SEG_CFG = osp.join(REPO, 'configs', 'benchmarks', 'seg',
                   'upernet_hpm-vit-base-p16_8xb2-amp-80k_ade20k-512x512.py')


# ----------------------------------------------------------- the version check
def test_versions_are_judged_by_the_imported_module(monkeypatch):
    import mmcv

    from hpm_mm.compat import check_versions, distribution_of
    check_versions()  # the pretraining stack
    monkeypatch.setattr(mmcv, '__version__', '9.9.9')
    installer = distribution_of('mmcv')  # mmcv (full), mmcv-lite (pretrain)
    assert installer in ('mmcv', 'mmcv-lite')
    with pytest.raises(
            ImportError,
            match=r'mmcv>=2\.1\.0,<2\.2\.0.*reports 9\.9\.9 '
            rf'\(installed by {installer}\).*install\.sh pretrain'):
        check_versions(['mmcv'])
    assert distribution_of('no_such_module_xyz') == '?'


@pytest.mark.parametrize('backend', ['cv2', 'pillow'])
def test_color_jitter_hue_same_under_numpy_2(backend):
    """mmcv's adjust_hue raised OverflowError for every negative hue factor
    under NumPy 2 (the GPU image's), so the BEiT and iBOT recipes
    (ColorJitter hue 0.1 / 0.2) crashed at their first batch there. hpm_mm's
    fix gives NumPy 1's images: the hue shifted by int(f * 255) modulo 256,
    checked against that written out (and, under NumPy 1, mmcv's own)."""
    import cv2
    import mmcv
    from mmcv.image import photometric

    import hpm_mm  # noqa: F401
    assert mmcv.adjust_hue is photometric.adjust_hue
    assert mmcv.adjust_hue._hpm_cyclic
    original = photometric.adjust_hue.__wrapped__
    numpy_1 = int(np.__version__.split('.')[0]) < 2
    img = np.random.default_rng(0).integers(0, 256, (8, 8, 3), np.uint8)
    hsv = cv2.cvtColor(img, cv2.COLOR_BGR2HSV_FULL)
    for factor in (-0.5, -0.2, -0.06, -0.003, 0., 0.003, 0.1, 0.5):
        got = mmcv.adjust_hue(img, factor, backend=backend)
        shift = int(factor * 255) % 256
        if backend == 'cv2':
            want = hsv.copy()
            want[..., 0] = (hsv[..., 0].astype(int) + shift) % 256
            want = cv2.cvtColor(want, cv2.COLOR_HSV2BGR_FULL)
            assert np.array_equal(got, want), factor
        if numpy_1:  # exactly mmcv's own result
            assert np.array_equal(got, original(img, factor, backend)), factor
    if not numpy_1:  # the upstream fault the fix is for
        with pytest.raises(OverflowError, match='out of bounds for uint8'):
            original(img, -0.06, backend)
    with pytest.raises(ValueError, match='not in'):
        mmcv.adjust_hue(img, 0.7)


@NEEDS_FULL
@pytest.mark.parametrize('config,what', [(DET_CFG, 'Detection'),
                                         (SEG_CFG, 'Segmentation')])
def test_det_seg_refuse_without_compiled_ops(monkeypatch, config, what):
    """mmcv importable, its ops not (mmcv-lite): hpm_mm still imports, the
    det/seg modules and configs stop in one line naming the fix."""
    import hpm_mm  # noqa: F401
    from hpm_mm.compat import MissingCompiledOpsError, require_compiled_ops
    from hpm_mm.utils.cli import load_config
    monkeypatch.setitem(sys.modules, 'mmcv._ext', None)  # import fails
    for name in ('hpm_mm.det', 'hpm_mm.seg'):
        monkeypatch.delitem(sys.modules, name, raising=False)
    with pytest.raises(MissingCompiledOpsError) as e:
        require_compiled_ops('X')
    msg = str(e.value)
    assert '\n' not in msg and 'mmcv._ext' in msg
    assert msg.endswith('Fix: bash tools/install.sh full')
    with pytest.raises(SystemExit) as e:
        load_config(config, 'train.py')
    msg = str(e.value)
    assert '\n' not in msg, msg
    assert msg.startswith(f'train.py: {config}: {what}') and \
        'compiled ops' in msg and 'bash tools/install.sh full' in msg


# ------------------------------------------------------------ the constructor
def test_frozen_aware_constructor_same_groups_one_line(capsys):
    """Same parameter groups as mmengine's default constructor; the EMA
    teacher is named once instead of once per parameter."""
    from mmengine.config import Config
    from mmengine.logging import MMLogger
    from mmengine.optim import build_optim_wrapper

    from hpm_mm.utils import build_model
    cfg = Config.fromfile(FMNIST_CFG)
    assert cfg.optim_wrapper.constructor == \
        'FrozenAwareOptimWrapperConstructor'
    model = build_model(cfg)
    import uuid  # a new logger becomes mmengine's 'current' one
    logger = MMLogger.get_instance(
        f'frozen_{uuid.uuid4().hex}', log_level='INFO')
    groups = {}
    for constructor in ('FrozenAwareOptimWrapperConstructor',
                        'DefaultOptimWrapperConstructor'):
        capsys.readouterr()
        wrapper = build_optim_wrapper(
            model, dict(cfg.optim_wrapper, constructor=constructor))
        groups[constructor] = [([id(p) for p in g['params']], {
            k: v
            for k, v in g.items() if k != 'params'
        }) for g in wrapper.optimizer.param_groups]
        out = capsys.readouterr().out
        skipped = out.count('requires_grad=False')
        if constructor == 'DefaultOptimWrapperConstructor':
            assert skipped == len(list(model.teacher.parameters())) + 2
        else:  # the teacher and the fixed position embeddings, one line
            assert skipped == 1 and 'not optimised (requires_grad=False): ' \
                'teacher (114 tensors, ' in out and \
                'backbone.pos_embed, neck.decoder_pos_embed' in out, out
    assert groups['FrozenAwareOptimWrapperConstructor'] == \
        groups['DefaultOptimWrapperConstructor']
    del logger


# --------------------------------------------------------- quiet + tensorboard
def test_quiet_console_and_tensorboard(tmp_path):
    """--quiet: one line per epoch and the log path on the console, no
    environment dump, config or frozen-parameter warning (all in the log
    file); --tensorboard: the loss curves and hard-patch grids are in the
    event file."""
    pytest.importorskip('tensorboard')
    from tensorboard.backend.event_processing.event_accumulator import \
        EventAccumulator
    vis = (
        "dict(type='HardPatchVisHook', interval=0, num_images=2, num_masks=2,"
        " dataloader=dict(batch_size=2, num_workers=0, sampler=dict("
        "type='DefaultSampler', shuffle=False), dataset=dict(type="
        f"'CustomDataset', data_root={str(tmp_path / 'imgs')!r}, "
        "with_label=False, pipeline=[dict(type='LoadImageFromFile', "
        "color_type='grayscale'), dict(type='CenterCrop', crop_size=28), "
        "dict(type='PackInputs')])))")
    cfg = tiny_config(
        tmp_path,
        FMNIST_CFG,
        num_images=8,
        hooks=f"custom_hooks = [dict(type='HPMScheduleHook'), {vis}]",
        body='train_cfg = dict(max_epochs=2)')
    work = tmp_path / 'work'
    proc = run_tool('tools/train.py', cfg, '--work-dir', str(work), '--quiet',
                    '--tensorboard')
    out = proc.stdout
    lines = [line for line in out.splitlines() if line.strip()]
    epochs = [line for line in lines if line.startswith('epoch ')]
    assert len(epochs) == 2, out
    assert 'loss_rec' in epochs[0] and 'rank_acc' in epochs[0] and \
        'alpha' in epochs[0] and 'left' in epochs[0]
    assert lines[0].startswith('precision: fp32')  # the decision first
    assert lines[1].startswith('full log: ')
    for noise in ('requires_grad', 'System environment', 'Config:',
                  'pkg_resources', 'Epoch(train)', 'FileClient',
                  'HardDiskBackend'):
        assert noise not in out + proc.stderr, noise
    assert len(lines) <= 7, out
    log_file = lines[1][len('full log: '):]
    log = open(log_file).read()
    assert 'System environment' in log and 'Epoch(train)' in log
    assert 'not optimised (requires_grad=False): teacher' in log and \
        log.count('requires_grad=False') == 1
    events = [
        osp.join(d, f) for d, _, fs in os.walk(work) for f in fs
        if f.startswith('events.out.tfevents')
    ]
    assert events, 'no TensorBoard event file'
    acc = EventAccumulator(
        osp.dirname(events[0]), size_guidance={
            'images': 0,
            'scalars': 0
        })
    acc.Reload()
    tags = acc.Tags()
    assert {'loss_rec', 'rank_acc', 'hpm/spearman'} <= set(tags['scalars'])
    assert {'hard_patches_img0', 'hard_patches_img1'} <= set(tags['images'])


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


def test_own_images_labelled_rgb_with_a_corrupt_file(tmp_path):
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
    import subprocess
    bad = subprocess.run([
        sys.executable, 'tools/pretrain_folder.py',
        str(root), '--work-dir',
        str(work)
    ],
                         cwd=REPO,
                         capture_output=True,
                         text=True)
    assert bad.returncode != 0
    err = bad.stderr.strip().splitlines()[-1]
    assert 'cat/broken.jpg' in err and '--skip-unreadable' in err
    proc = run_tool('tools/pretrain_folder.py', str(root), '--work-dir',
                    str(work), '--epochs', '2', '--skip-unreadable')
    out = proc.stdout
    assert 'left out 1 unreadable file(s): cat/broken.jpg' in out
    assert '20 images, 2 classes' in out and '32x32 RGB' in out, out
    knn = json.load(open(work / 'knn.json'))
    assert knn['num_train'] == 16 and knn['num_val'] == 4
    assert 'kNN top-1' in out
    pngs = os.listdir(work / 'hard_patches')
    assert sum(p.endswith('.png') for p in pngs) == 4, pngs
    assert 'requires_grad' not in out


def test_own_images_unlabelled_grayscale_odd_sizes(tmp_path):
    root = tmp_path / 'scans'
    specs = [(f'{"a/b/" if i % 3 == 0 else ""}s{i}.png', (70 + 5 * i, 66), 'L')
             for i in range(12)]
    _write_images(str(root), specs, seed=1)
    work = tmp_path / 'work'
    proc = run_tool('tools/pretrain_folder.py', str(root), '--work-dir',
                    str(work), '--epochs', '1')
    out = proc.stdout
    assert '12 images, unlabelled (no kNN)' in out and '64x64 grayscale' in \
        out and 'patch 8' in out, out
    assert not (work / 'knn.json').exists()
    assert len(list((work / 'hard_patches').glob('*.png'))) == 4
    from mmengine.config import Config
    cfg = Config.fromfile(str(work / 'hpm_folder.py'))
    assert cfg.model.backbone.patch_cfg.in_channels == 1
    assert cfg.model.neck.num_patches == 64


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
    proc = run_tool('tools/pretrain_folder.py', str(root), '--work-dir',
                    str(work), '--epochs', '1')
    assert 'kNN skipped' in proc.stdout, proc.stdout[-2000:]
    assert not (work / 'knn.json').exists()
    assert list((work / 'hard_patches').glob('*.png'))


def test_own_images_deep_pixels_loops_and_own_outputs(tmp_path):
    """One image reader for the own-images scan and check_data: a 16-bit
    PNG stops pretrain_folder.py before training, naming the file and the
    fix (OpenCV would train it as mean 255 / std 1); a symlink loop counts
    each image once; a work dir inside the folder (hard-patch grids,
    checkpoints) is not data."""
    import subprocess

    from conftest import make_image_folder
    from PIL import Image

    from hpm_mm.utils.image_folder import scan_folder
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
    proc = subprocess.run([
        sys.executable, 'tools/pretrain_folder.py',
        str(root), '--work-dir',
        str(tmp_path / 'w')
    ],
                          cwd=REPO,
                          capture_output=True,
                          text=True,
                          timeout=600)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-2000:]
    assert 'deep.png' in out and '16-bit' in out, out[-2000:]
    assert not (tmp_path / 'w').exists() or not list(
        (tmp_path / 'w').glob('epoch_*.pth'))


def test_own_images_clear_errors(tmp_path):
    from hpm_mm.utils.image_folder import choose_settings, scan_folder
    empty = tmp_path / 'empty'
    (empty / 'sub').mkdir(parents=True)
    (empty / 'notes.txt').write_text('no images here')
    with pytest.raises(SystemExit, match='holds no image file.*Fix'):
        scan_folder(str(empty))
    with pytest.raises(SystemExit, match='is not a folder'):
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


# ---------------------------------------------------------- kNN under autocast
def test_knn_features_under_autocast_close_to_fp32(monkeypatch):
    """Where the rule picks bf16 (a native-bf16 CPU, mocked here), the kNN
    features under autocast stay close to fp32's."""
    from mmengine.config import Config

    from hpm_mm.utils import precision
    bf16 = precision.Precision('bf16', torch.bfloat16, 'cpu', 'AMX', 'mock')
    monkeypatch.setattr(precision, '_cpu_decision', lambda: bf16)

    from hpm_mm.evaluation import extract_features
    from hpm_mm.utils import build_model
    torch.manual_seed(0)
    model = build_model(Config.fromfile(FMNIST_CFG))
    from mmpretrain.structures import DataSample
    batch = dict(
        inputs=torch.randint(0, 255, (8, 1, 28, 28), dtype=torch.uint8),
        data_samples=[DataSample().set_gt_label(i % 2) for i in range(8)])
    fp32 = extract_features(model, [batch], False)
    bf16 = extract_features(model, [batch], False, amp=True)
    assert bf16['feats'].dtype == torch.float32
    cos = torch.nn.functional.cosine_similarity(fp32['feats'], bf16['feats'])
    assert cos.min() > 0.99 and not torch.equal(fp32['feats'], bf16['feats'])
