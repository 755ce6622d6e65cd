"""GPU JPEG decoding (issue #65), its CPU path: LoadBytesAndCropBox reads
the bytes and draws the box and flip in the worker, the data preprocessor
decodes, crops, resizes and flips the batch on its device. Here that device
is the CPU (torchvision's libjpeg decoder); the CUDA case decodes with
nvJPEG. Same boxes and flips as mmpretrain's transforms for the same random
state, the same pixels to a small tolerance."""
import numpy as np
import pytest
import torch
from helpers import NEEDS_CUDA, REPO
from mmcv.transforms import RandomFlip
from test_reduced_decode import CROP, photo

import hpm_mm  # noqa: F401
from hpm_mm.datasets import LoadAndRandomResizedCrop, LoadBytesAndCropBox
from hpm_mm.models.data_preprocessor import (ChannelCheckedDataPreprocessor,
                                             DeviceDecodeDataPreprocessor,
                                             decode_crops)

MEAN, STD = [123.675, 116.28, 103.53], [58.395, 57.12, 57.375]


def images(tmp_path):
    """Plain RGB and grayscale JPEGs (decoded on the device), a CMYK JPEG
    and a PNG (cropped in the worker)."""
    paths = []
    for i, (w, h, mode, fmt) in enumerate([(640, 480, 'RGB', 'JPEG'),
                                           (500, 375, 'RGB', 'JPEG'),
                                           (1200, 1600, 'RGB', 'JPEG'),
                                           (480, 360, 'L', 'JPEG'),
                                           (400, 400, 'CMYK', 'JPEG'),
                                           (360, 300, 'RGB', 'PNG')]):
        path = str(tmp_path / f'{i}.{fmt.lower()}')
        photo(w, h, seed=i).convert(mode).save(path, fmt, quality=90)
        paths.append(path)
    return paths


def reference(path, seed):
    """The config's CPU pipeline (unreduced decode, then RandomFlip), RGB
    (3, H, W) float."""
    np.random.seed(seed)
    results = LoadAndRandomResizedCrop(
        reduce=False, **CROP)(
            dict(img_path=path))
    img = RandomFlip(prob=0.5)(results)['img']
    return torch.from_numpy(img[..., ::-1].copy()).permute(2, 0, 1).float()


def device_batch(paths, seeds, device):
    """LoadBytesAndCropBox, PackInputs (with ``device_decode``),
    pseudo_collate and the preprocessor on ``device`` (no normalisation)."""
    from mmengine.dataset import pseudo_collate
    from mmpretrain.datasets.transforms import PackInputs
    load = LoadBytesAndCropBox(**CROP)
    pack = PackInputs(meta_keys=('img_shape', 'device_decode'))
    items = []
    for path, seed in zip(paths, seeds):
        np.random.seed(seed)
        items.append(pack(load(dict(img_path=path))))
    pre = DeviceDecodeDataPreprocessor().to(device)
    return pre(pseudo_collate(items)), items


@pytest.mark.parametrize('device', [
    'cpu',
    pytest.param('cuda', marks=[pytest.mark.cuda, NEEDS_CUDA]),
])
def test_device_decode_gives_the_cpu_pipelines_crops(tmp_path, device):
    paths = images(tmp_path)
    seeds = list(range(len(paths))) * 2
    out, items = device_batch(paths * 2, seeds, device)
    x = out['inputs']
    assert x.shape == (len(seeds), 3, 224, 224) and x.device.type == device
    encoded = [item['inputs'].dim() == 1 for item in items]
    assert encoded == [True] * 4 + [False] * 2 + [True] * 4 + [False] * 2
    flips = [s.device_decode['flip'] for s in out['data_samples']]
    assert any(flips) and not all(flips)
    for i, (path, seed) in enumerate(zip(paths * 2, seeds)):
        want = reference(path, seed)
        diff = (x[i].cpu() - want).abs()
        if not encoded[i]:  # cropped in the worker: the pipeline's own
            assert diff.max() == 0, path
        else:  # torchvision's resampler, to uint8 (CPU: ~0.005 mean, 2 max)
            mean, top = (0.05, 3) if device == 'cpu' else (3, 64)  # nvJPEG
            assert diff.mean() < mean and diff.max() < top, (path, diff.mean())


def test_normalised_as_the_config_pipeline(tmp_path):
    """With mean/std (to_rgb as mmpretrain's MAE config): the batch the
    model would get from the CPU pipeline, to the resampler's tolerance."""
    paths = images(tmp_path)[:2]
    from mmengine.dataset import pseudo_collate
    from mmpretrain.datasets.transforms import PackInputs
    load = LoadBytesAndCropBox(**CROP)
    pack = PackInputs(meta_keys=('img_shape', 'device_decode'))
    pre = DeviceDecodeDataPreprocessor(mean=MEAN, std=STD, to_rgb=True)
    items = []
    for seed, path in enumerate(paths):
        np.random.seed(seed)
        items.append(pack(load(dict(img_path=path))))
    got = pre(pseudo_collate(items))['inputs']
    want = torch.stack([reference(p, s) for s, p in enumerate(paths)])
    want = (want - torch.tensor(MEAN).view(3, 1, 1)) / torch.tensor(STD).view(
        3, 1, 1)
    assert (got - want).abs().mean() < 0.5 / 57


def test_decode_crops_takes_the_box_and_flip():
    """A 1-D JPEG: the box's region resized; a flip is a mirror."""
    from torchvision.io import encode_jpeg
    img = torch.zeros(3, 64, 96, dtype=torch.uint8)
    img[:, :, 48:] = 255  # left black, right white
    data = encode_jpeg(img, quality=100)
    spec = dict(box=(0, 40, 64, 56), flip=False, interpolation='bilinear')
    a, b = decode_crops([data, data], [spec, dict(spec, flip=True)], (32, 32),
                        'cpu')
    assert a[:, :, :4].mean() < 10 and a[:, :, -16:].mean() > 245
    torch.testing.assert_close(b, a.flip(-1))


def test_an_unreadable_file_or_a_missing_key_is_one_line(tmp_path):
    from mmengine.dataset import pseudo_collate
    from mmpretrain.datasets.transforms import PackInputs

    from hpm_mm.errors import HPMError
    np.random.seed(0)
    item = PackInputs()(
        LoadBytesAndCropBox(**CROP)(dict(img_path=images(tmp_path)[0])))
    for pre in (ChannelCheckedDataPreprocessor(),
                DeviceDecodeDataPreprocessor()):  # no box, or no decoder
        with pytest.raises(
                HPMError,
                match="'DeviceDecodeDataPreprocessor' "
                "and 'device_decode' in PackInputs"):
            pre(pseudo_collate([item]))
    path = tmp_path / 'broken.jpg'
    path.write_bytes(b'not a jpeg')
    with pytest.raises(HPMError, match='cannot read image .*broken.jpg'):
        LoadBytesAndCropBox(**CROP)(dict(img_path=str(path)))
    assert LoadBytesAndCropBox(
        skip_unreadable=True, **CROP)(dict(img_path=str(path))) is None


def test_the_gpu_decode_config_builds_its_pipeline():
    from mmengine.config import Config
    cfg = Config.fromfile(
        f'{REPO}/configs/_base_/datasets/imagenet_bs512_mae_gpu_decode.py')
    pipeline = cfg.train_dataloader.dataset.pipeline
    assert [t['type']
            for t in pipeline] == ['LoadBytesAndCropBox', 'PackInputs']
    assert 'device_decode' in pipeline[1]['meta_keys']
    assert cfg.train_dataloader.collate_fn.type == 'pseudo_collate'
    assert cfg.data_preprocessor.type == 'DeviceDecodeDataPreprocessor'


@pytest.mark.cuda
@NEEDS_CUDA
def test_the_decode_leaves_the_steps_queued_reads_alone(tmp_path):
    """torchvision's nvJPEG decode writes its outputs from its own stream
    without waiting for the current one (pytorch/vision#9606): called on
    the step's stream, it overwrote blocks that queued kernels still read
    (NaN losses and device asserts in the fed step on the H200). Tensors
    freed with their reductions queued behind a long kernel keep their
    values through a decode."""
    paths = [p for p in images(tmp_path) if p.endswith('.jpeg')] * 8
    load = LoadBytesAndCropBox(**CROP)
    encoded = [load(dict(img_path=p))['img'] for p in paths]  # CMYK: (3, H, W)
    for _ in range(20):
        blocks = [
            torch.full((3, 480, 640), float(i), device='cuda')
            for i in range(len(paths))
        ]  # the sizes the decode asks
        torch.cuda.synchronize()
        torch.cuda._sleep(50_000_000)  # the step's queue, still running
        sums = [b.sum() for b in blocks]
        del blocks  # freed on the step's stream, their reads queued
        decode_crops(encoded,
                     [dict(box=(0, 0, 224, 224), flip=False)] * len(paths),
                     (224, 224), torch.device('cuda'))
        got = torch.stack(sums).cpu()
        want = torch.arange(len(paths)) * 3. * 480 * 640
        assert torch.allclose(got, want, rtol=1e-5), (got - want).abs().max()
