"""LoadAndRandomResizedCrop (issue #56): mmpretrain's load + random
resized crop with the JPEG decoded only at the size the crop needs. Same
boxes as mmpretrain's for the same random state, the same pixels to a small
tolerance, the same files read and refused as LoadImageFromFileChecked."""
import numpy as np
import pytest
from PIL import Image

import hpm_mm  # noqa: F401
from hpm_mm.datasets import LoadAndRandomResizedCrop, LoadImageFromFileChecked

CROP = dict(scale=224, crop_ratio_range=(0.2, 1.0), interpolation='bicubic')


def photo(w, h, seed=0):
    """A photo-like image: smooth colour fields, edges, grain."""
    rng = np.random.default_rng(seed)
    low = rng.random((max(2, h // 60), max(2, w // 60), 3)) * 255
    img = Image.fromarray(low.astype(np.uint8)).resize((w, h), Image.BICUBIC)
    arr = np.asarray(img).astype(np.int16)
    for _ in range(8):
        y0, x0 = rng.integers(0, h), rng.integers(0, w)
        arr[y0:y0 + h // 5, x0:x0 + w // 6] += rng.integers(-50, 50, 3)
    arr += rng.normal(0, 2, arr.shape).astype(np.int16)
    return Image.fromarray(arr.clip(0, 255).astype(np.uint8))


def reference(path, seed):
    """mmpretrain's two transforms on hpm_mm's reader (mmcv's pillow
    decoder), from the same random state."""
    from mmpretrain.datasets.transforms import RandomResizedCrop
    np.random.seed(seed)
    results = LoadImageFromFileChecked()(dict(img_path=path))
    return RandomResizedCrop(backend='pillow', **CROP)(results)['img']


def reduced(path, seed, **kwargs):
    np.random.seed(seed)
    return LoadAndRandomResizedCrop(**CROP,
                                    **kwargs)(dict(img_path=path))['img']


def test_boxes_are_mmpretrains_for_the_same_random_state(tmp_path):
    """The box is drawn by RandomResizedCrop's own rand_crop_params from the
    header's size: the random numbers and the boxes are those of the two
    transforms, draw by draw."""
    from mmpretrain.datasets.transforms import RandomResizedCrop
    path = str(tmp_path / 'a.jpg')
    photo(900, 600).save(path, quality=90)
    ours = LoadAndRandomResizedCrop(**CROP)
    theirs = RandomResizedCrop(**CROP)
    boxes = []
    real = ours.rand_crop_params

    def record(img):
        box = real(img)
        boxes.append(box)
        return box

    ours.rand_crop_params = record
    np.random.seed(0)
    for _ in range(200):
        ours(dict(img_path=path))
    np.random.seed(0)
    array = np.zeros((600, 900, 3), np.uint8)
    expected = [theirs.rand_crop_params(array) for _ in range(200)]
    assert boxes == expected
    # the share of draws that decode reduced (area 20-100% of 900x600 to
    # 224 px: 1/2 where the box is >= 448 px on both sides)
    assert 0 < sum(ours.reduction(h, w) > 1 for _, _, h, w in boxes) < 200


@pytest.mark.parametrize('size', [(2000, 1500), (1000, 750), (500, 375)])
def test_pixels_equal_the_full_decode_crop(tmp_path, size):
    path = str(tmp_path / 'a.jpg')
    photo(*size).save(path, quality=92)
    diffs = []
    for seed in range(12):
        a, b = reduced(path, seed), reference(path, seed)
        assert a.shape == b.shape == (224, 224, 3) and a.dtype == np.uint8
        diffs.append(np.abs(a.astype(int) - b.astype(int)).mean())
    # a 1/2-1/8 DCT decode resampled vs the full decode resampled: the
    # same picture; measured mean |difference| 0.3-1 of 255
    assert np.mean(diffs) < 2.0, diffs
    if size == (500, 375):  # no box spans 448 px: the full decode, exactly
        assert max(diffs) == 0


def test_reduce_false_is_the_two_transforms_exactly(tmp_path):
    path = str(tmp_path / 'a.jpg')
    photo(1600, 1200).save(path, quality=90)
    for seed in range(4):
        assert np.array_equal(
            reduced(path, seed, reduce=False), reference(path, seed))


@pytest.mark.parametrize('kind', ['exif', 'gray', 'cmyk', 'png'])
def test_files_read_as_the_checked_loader_reads_them(tmp_path, kind):
    """EXIF orientation, grayscale, CMYK and PNG: what the checked loader
    makes of them, cropped (BGR, three channels)."""
    img = photo(1400, 1000)
    path = str(tmp_path / ('a.png' if kind == 'png' else 'a.jpg'))
    if kind == 'exif':  # stored landscape, shown portrait (rotate 90)
        exif = Image.Exif()
        exif[0x0112] = 6
        img.save(path, quality=92, exif=exif.tobytes())
    elif kind == 'gray':
        img.convert('L').save(path, quality=92)
    elif kind == 'cmyk':
        img.convert('CMYK').save(path, quality=92)
    else:
        img.save(path)
    full = LoadImageFromFileChecked()(dict(img_path=path))['img']
    if kind == 'exif':
        assert full.shape[:2] == (1400, 1000)  # turned by the reader
    out = LoadAndRandomResizedCrop(**CROP)(dict(img_path=path))
    assert out['ori_shape'] == full.shape[:2]
    diffs = [
        np.abs(reduced(path, s).astype(int) -
               reference(path, s).astype(int)).mean() for s in range(6)
    ]
    assert np.mean(diffs) < 2.0, diffs
    if kind == 'gray':  # still gray, in three equal channels
        a = reduced(path, 0)
        assert np.array_equal(a[..., 0], a[..., 1])


def test_a_corrupt_file_is_the_checked_loaders_one_line(tmp_path):
    path = tmp_path / 'bad.jpg'
    data = (tmp_path / 'good.jpg')
    photo(1200, 900).save(data, quality=90)
    path.write_bytes(data.read_bytes()[:3000])  # truncated
    from hpm_mm.errors import HPMError
    with pytest.raises(HPMError) as theirs:
        LoadImageFromFileChecked()(dict(img_path=str(path)))
    with pytest.raises(HPMError) as ours:
        LoadAndRandomResizedCrop(**CROP)(dict(img_path=str(path)))
    for e in (theirs.value, ours.value):
        assert len(str(e).splitlines()) == 1
        assert str(e).startswith(f'cannot read image {path}')
    assert "dict(type='LoadAndRandomResizedCrop', skip_unreadable=True)" \
        in str(ours.value)
    skip = LoadAndRandomResizedCrop(skip_unreadable=True, **CROP)
    assert skip(dict(img_path=str(path))) is None and skip.num_skipped == 1


def test_the_imagenet_configs_use_it_and_run_a_few_steps(tmp_path):
    """The ImageNet config's own train pipeline, through its dataloader,
    on generated JPEGs; three training steps of a small model on them."""
    from hpm_mm.apis.config import load_config
    cfg = load_config(
        'configs/hpm/hpm_vit-base-p16_8xb512-amp-coslr-200e_in1k.py')
    pipeline = cfg.train_dataloader.dataset.pipeline
    assert pipeline[0]['type'] == 'LoadAndRandomResizedCrop'
    root = tmp_path / 'imgs'
    root.mkdir()
    for i, size in enumerate([(500, 375), (1800, 1200), (375, 500),
                              (900, 900)] * 2):
        photo(*size, seed=i).save(root / f'{i}.JPEG', quality=85)
    from hpm_mm.apis import train
    runner = train(
        cfg,
        str(tmp_path / 'work'),
        quiet=True,
        model=dict(
            backbone=dict(
                arch=dict(
                    _delete_=True,
                    embed_dims=32,
                    num_layers=1,
                    num_heads=2,
                    feedforward_channels=64)),
            neck=dict(
                embed_dim=32,
                decoder_embed_dim=16,
                decoder_depth=1,
                decoder_num_heads=2,
                predictor_depth=1),
            teacher=dict(momentum_epochs=None)),
        train_dataloader=dict(
            batch_size=4,
            num_workers=0,
            persistent_workers=False,
            dataset=dict(
                _delete_=True,
                type='CustomDataset',
                data_root=str(root),
                with_label=False,
                pipeline=pipeline)),
        train_cfg=dict(max_epochs=1),
        param_scheduler=[dict(type='ConstantLR', factor=1.0)])
    assert runner.iter == 2
    losses = runner.message_hub.log_scalars['train/loss_rec'].data[0]
    assert len(losses) == 2 and all(np.isfinite(losses))


def test_grayscale_reads_as_the_checked_loader(tmp_path):
    """color_type='grayscale' (the own-images configs of 1-channel data):
    H x W, as LoadImageFromFileChecked(color_type='grayscale') + the crop."""
    from mmpretrain.datasets.transforms import RandomResizedCrop
    path = str(tmp_path / 'a.jpg')
    photo(1600, 1200).save(path, quality=92)
    diffs = []
    for seed in range(6):
        np.random.seed(seed)
        ref = RandomResizedCrop(
            backend='pillow',
            **CROP)(LoadImageFromFileChecked(color_type='grayscale')(
                dict(img_path=path)))['img']
        got = reduced(path, seed, color_type='grayscale')
        assert got.shape == ref.shape == (224, 224)
        diffs.append(np.abs(got.astype(int) - ref.astype(int)).mean())
    assert np.mean(diffs) < 2.0, diffs


def test_an_interpolation_pillow_lacks_is_refused_at_build():
    """Pillow resizes every crop: an interpolation it lacks ('area', an
    OpenCV mode) is one line at build, not an 'unreadable image' per
    sample."""
    with pytest.raises(ValueError, match="interpolation='area'"):
        LoadAndRandomResizedCrop(scale=8, interpolation='area')
    LoadAndRandomResizedCrop(scale=8, interpolation='bicubic')
