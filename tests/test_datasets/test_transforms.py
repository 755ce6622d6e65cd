"""LoadImageFromFileChecked: an unreadable image named, or skipped when asked,
and listed by the pre-flight check."""
import os.path as osp

import pytest
from helpers import folder_config, tool_main, train

import hpm_mm  # noqa: F401  (allow-lists the checkpoint types for torch.load)
from hpm_mm.errors import HPMError


def test_unreadable_image_named_or_skipped_and_checked_before(tmp_path):
    """A 0-byte PNG: training stops naming the file (mmcv's error named
    none), or, opted in, skips it and logs the count; the pre-flight check
    lists it before any training."""
    from helpers import make_image_folder
    data = make_image_folder(str(tmp_path / 'imgs'), 2, 4)
    bad = osp.join(data, 'class_1', 'broken.png')
    open(bad, 'wb').close()
    cut = osp.join(data, 'class_0', 'cut.png')  # a PNG cut short
    with open(osp.join(data, 'class_0', '000.png'), 'rb') as f:
        head = f.read()[:60]
    with open(cut, 'wb') as f:
        f.write(head)
    with pytest.raises(HPMError) as refused:
        train(folder_config(tmp_path, data), tmp_path / 'w1')
    out = str(refused.value)
    assert (f'cannot read image {bad}' in out
            or f'cannot read image {cut}' in out) and 'skip_unreadable' in out
    out = train(
        folder_config(tmp_path, data, skip=True),
        tmp_path / 'w2',
        cfg_options={'train_cfg.max_epochs': 3})
    assert f'skipped unreadable image {bad}' in out
    assert f'skipped unreadable image {cut}' in out
    assert (tmp_path / 'w2' / 'epoch_3.pth').exists()
    from hpm_mm.apis import load_config
    from hpm_mm.datasets.data_check import check_data
    check = check_data(load_config(folder_config(tmp_path, data)))
    assert f'train_dataloader: unreadable image {bad}' in '\n'.join(
        check['problems'])
    assert f'train_dataloader: unreadable image {cut}' in '\n'.join(
        check['problems'])
    assert '10 image files checked, 2 unreadable (L: 8)' in '\n'.join(
        check['report'])
    proc = tool_main('train.py', folder_config(tmp_path, data), '--work-dir',
                     tmp_path / 'w3', '--check-data')
    assert proc.returncode == 1 and f'unreadable image {cut}' in proc.stderr
    assert not (tmp_path / 'w3' / 'epoch_1.pth').exists()


def test_check_data_reads_every_hooks_loader():
    """check_data.py covers the held-out images of both evaluation hooks,
    the pictures' too (HardPatchVisHook's ``dataloader``)."""
    from helpers import FMNIST_CFG

    from hpm_mm.apis import load_config
    from hpm_mm.datasets.data_check import _loaders
    names = [n for n, _ in _loaders(load_config(FMNIST_CFG))]
    assert names == [
        'train_dataloader', 'KNNEvalHook.train_dataloader',
        'KNNEvalHook.val_dataloader', 'HardPatchVisHook.dataloader'
    ]


@pytest.mark.parametrize(
    'change,match',
    [
        (dict(chanels=3), "image.chanels: the image spec takes no argument "
         r"'chanels' \(did you mean channels.*Fix: image.channels"),
        (dict(size=0), r'image.size=0: give a positive'),
        (dict(size=32.0), r'image.size=32.0: give a positive'),
        (dict(patch_size=True), r'image.patch_size=True: give a positive'),
        (dict(std=[0., 1., 1.]), r'every std must be > 0'),
        (dict(std=[-5., 1., 1.]), r'every std must be > 0'),
        (dict(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225
                                               ]), 'look like 0..1 units'),
        # mixed units: each refused (a 0..1 std trained at loss_rec 1.4e5)
        (dict(std=[0.229, 0.224, 0.225]), r'channel\(s\) \[0, 1, 2\] look '
         'like 0..1 units'),
        (dict(mean=[0.485, 0.456, 0.406]), r'\[0, 1, 2\] look like 0..1'),
        # one channel in 0..1 (the check read max(mean): it trained)
        (dict(mean=[0.485, 116.28, 103.53]), r'channel\(s\) \[0\] look'),
        (dict(size=16, patch_size=16), 'patch_size=16: 1 patch'),
        (dict(size=None), r"image: \['size'\] not set"),
        (dict(mean=[float('nan'), 1., 1.]), 'image.mean.*finite'),
        (dict(channels=2), 'image.channels=2: 1 .* or 3'),
        (dict(size=30), 'image.size=30 is not a multiple of .*patch_size=4'),
        (dict(mean=[100., 100.]), r'image.mean.*need 3 value'),
    ])
def test_the_image_spec_refuses_what_cannot_train(change, match):
    """An image spec that would train on nothing sensible is one line
    (0..1 mean/std trained at loss_rec 3.8e5; std 0 skipped every step; a
    misspelt key was ignored)."""
    from mmengine.config import Config

    from hpm_mm.datasets.image_spec import apply_image_spec
    from hpm_mm.errors import HPMError
    spec = dict(
        size=32,
        channels=3,
        patch_size=4,
        mean=[123.675, 116.28, 103.53],
        std=[58.395, 57.12, 57.375])
    apply_image_spec(Config(dict(image=spec)))  # the good one passes
    with pytest.raises(HPMError, match=match):
        apply_image_spec(Config(dict(image=dict(spec, **change))))


def test_the_image_spec_takes_one_number_and_a_0_to_1_scaling():
    """A scalar mean / std is every channel's (it was a traceback); mean 0,
    std 255 (pixels scaled to 0..1) is valid (it was refused as 0..1
    units)."""
    from mmengine.config import Config

    from hpm_mm.datasets.image_spec import apply_image_spec
    for mean, std in ((120., 50.), (0, 255)):
        cfg = apply_image_spec(
            Config(
                dict(
                    image=dict(
                        size=32, channels=3, patch_size=4, mean=mean, std=std),
                    data_preprocessor=dict(type='SelfSupDataPreprocessor'))))
        assert cfg.data_preprocessor.mean == [mean] * 3
        assert cfg.data_preprocessor.std == [std] * 3


@pytest.mark.parametrize(
    'arg,match',
    [
        (dict(epochs=0), 'epochs=0 is not a positive whole number'),
        (dict(batch_size=0), 'batch_size=0'),
        (dict(img_size=0), 'img_size=0'),
        (dict(img_size=2), 'img_size=2 is not a multiple of 8'),
        (dict(img_size=100000), 'img_size=100000 is not .* 1024'),  # was OOM
        (dict(channels=2), 'channels=2 is not 1 or 3'),
    ])
def test_pretrain_folder_refuses_counts_before_reading(tmp_path, arg, match):
    from hpm_mm.apis import pretrain_folder
    from hpm_mm.errors import HPMError
    with pytest.raises(HPMError, match=match):
        pretrain_folder(str(tmp_path / 'none'), str(tmp_path / 'w'), **arg)
    assert not (tmp_path / 'w').exists()  # nothing written before


def test_the_image_spec_sets_the_channels_of_a_backbone_without_patch_cfg():
    """A backbone config without ``patch_cfg`` (mmpretrain's MAE bases)
    gets the spec's channels (the key was set on a copy and lost: the
    model took 3 channels)."""
    from mmengine.config import Config

    from hpm_mm.datasets.image_spec import apply_image_spec
    spec = dict(size=32, channels=1, patch_size=4, mean=[100.], std=[50.])
    for backbone in (dict(type='MAEViT'),
                     dict(type='MAEViT', patch_cfg=dict(in_channels=3))):
        cfg = apply_image_spec(
            Config(dict(image=spec, model=dict(backbone=backbone))))
        assert cfg.model.backbone.patch_cfg.in_channels == 1


def test_the_image_spec_sizes_the_gpu_decode_crop():
    """An image spec on the GPU-decode ImageNet base sets the size of its
    LoadBytesAndCropBox crop (it was left at 224)."""
    from helpers import REPO
    from mmengine.config import Config

    from hpm_mm.datasets.image_spec import apply_image_spec
    cfg = Config.fromfile(
        f'{REPO}/configs/_base_/datasets/imagenet_bs512_mae_gpu_decode.py')
    cfg.image = dict(
        size=32, channels=3, patch_size=4, mean=[100.] * 3, std=[50.] * 3)
    crop = apply_image_spec(cfg).train_dataloader.dataset.pipeline[0]
    assert crop.type == 'LoadBytesAndCropBox' and crop.scale == 32


def test_the_image_spec_root_keeps_another_folder_and_fills_a_missing_one():
    """``image.root`` replaces the training images' folder in every loader
    that reads it and fills a loader without one; a loader of another
    folder (the kNN's held-out images) keeps it (it was replaced: the kNN
    scored the training images against themselves)."""
    from mmengine.config import Config

    from hpm_mm.datasets.image_spec import apply_image_spec

    def loader(**dataset):
        return dict(dataset=dict(type='CustomDataset', **dataset))

    cfg = apply_image_spec(
        Config(
            dict(
                image=dict(
                    root='mine/',
                    size=32,
                    channels=1,
                    patch_size=4,
                    mean=[100.],
                    std=[50.]),
                train_dataloader=loader(data_root='data/my_images/'),
                custom_hooks=[
                    dict(
                        type='KNNEvalHook',
                        train_dataloader=loader(data_root='data/my_images/'),
                        val_dataloader=loader(data_root='held_out/')),
                    dict(type='HardPatchVisHook', dataloader=loader())
                ])))
    knn, vis = cfg.custom_hooks
    assert cfg.train_dataloader.dataset.data_root == 'mine/'
    assert knn.train_dataloader.dataset.data_root == 'mine/'
    assert knn.val_dataloader.dataset.data_root == 'held_out/'
    assert vis.dataloader.dataset.data_root == 'mine/'


def test_an_unreadable_image_in_a_worker_is_its_own_line(tmp_path):
    """An unreadable file met in a dataloader worker: the HPMError torch
    re-raises in the main process is the worker's one line (it was the
    worker's 57-line traceback as the message)."""
    from helpers import folder_loader, make_image_folder
    from mmengine.runner import Runner

    from hpm_mm.errors import HPMError
    data = make_image_folder(str(tmp_path / 'imgs'), 1, 2)
    first = sorted((tmp_path / 'imgs').rglob('*.png'))[0]
    first.write_bytes(b'not an image')
    loader = dict(folder_loader(data), num_workers=1)
    loader['dataset']['pipeline'][0]['type'] = 'LoadImageFromFileChecked'
    with pytest.raises(HPMError) as refused:
        for _ in Runner.build_dataloader(loader, seed=0):
            pass
    assert '\n' not in str(refused.value) and first.name in str(refused.value)
