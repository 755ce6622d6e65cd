"""What the tests share: paths, the tiny models and configs, generated
image folders and datasets, and the two ways a test runs a command: through
:mod:`hpm_mm.apis` (:func:`train`) or, where a process is the point (DDP,
a kill, an install, a start-up environment), in a new interpreter
(:func:`process`). A tool's own argument handling is
tests/test_tools/test_tool_mains.py's."""
import importlib.util
import json
import os
import os.path as osp
import subprocess
import sys

import numpy as np
import pytest
import torch

REPO = osp.dirname(osp.dirname(osp.abspath(__file__)))

FMNIST_CFG = osp.join(REPO, 'configs', 'hpm',
                      'hpm_vit-mini-p4_1xb256-coslr-10e_fmnist.py')

CUDA = torch.cuda.is_available()

NEEDS_CUDA = pytest.mark.skipif(
    not CUDA, reason='needs CUDA (run on a GPU machine: docs/gpu.md)')

# ``device`` parameters: every model-level test runs on the CPU, and on CUDA
# where there is a GPU (``pytest -m cuda`` runs those alone)
DEVICES = ['cpu', pytest.param('cuda', marks=[pytest.mark.cuda, NEEDS_CUDA])]

# the full install profile (mmdet, mmseg; tools/install.sh full): the
# detection / segmentation tests skip without it (e.g. on a GPU machine
# given the pretraining overlay)
FULL_PROFILE = all(
    importlib.util.find_spec(m) is not None for m in ('mmdet', 'mmseg'))

NEEDS_FULL = pytest.mark.skipif(
    not FULL_PROFILE,
    reason='needs mmdet and mmseg: bash tools/install.sh '
    'full')


def is_det_seg(path: str) -> bool:
    """A detection or segmentation config (needs the full profile)."""
    return any(f'benchmarks{os.sep}{k}{os.sep}' in path
               for k in ('det', 'seg'))


def autocast_dtypes(device: torch.device) -> list:
    """The autocast dtypes a device trains with: bf16 on the CPU; fp16
    (with a dynamic loss scale) and bf16 on CUDA."""
    return [torch.bfloat16
            ] if device.type == 'cpu' else [torch.float16, torch.bfloat16]


def merge(base: dict, overrides: dict) -> dict:
    """``overrides`` merged into a copy of ``base`` key by key, as a config
    merges into its ``_base_``; a dict naming another ``type`` than the
    base's, or holding ``_delete_=True``, replaces it."""
    out = dict(base)
    for key, value in overrides.items():
        old = out.get(key)
        if (isinstance(value, dict) and isinstance(old, dict)
                and not value.get('_delete_')
                and value.get('type', old.get('type')) == old.get('type')):
            out[key] = merge(old, value)
        elif isinstance(value, dict):
            out[key] = {k: v for k, v in value.items() if k != '_delete_'}
        else:
            out[key] = value
    return out


def tiny_hpm_cfg(img_size: int = 16,
                 patch_size: int = 4,
                 in_channels: int = 1,
                 embed_dims: int = 32,
                 num_layers: int = 2,
                 **overrides) -> dict:
    """The model tests' tiny HPM: a ViT of ``embed_dims`` x ``num_layers``
    blocks (2 heads) on ``img_size`` px images of ``in_channels`` in
    ``patch_size`` patches, a 16-d 1-block decoder with a 1-block loss
    predictor, 75% masks at alpha 0.5, an EMA teacher, inputs as they are
    (mean 0, std 1). ``overrides`` merge in (:func:`merge`)."""
    cfg = dict(
        type='HPM',
        backbone=dict(
            type='HPMViT',
            arch=dict(
                embed_dims=embed_dims,
                num_layers=num_layers,
                num_heads=2,
                feedforward_channels=2 * embed_dims),
            img_size=img_size,
            patch_size=patch_size,
            patch_cfg=dict(in_channels=in_channels)),
        neck=dict(
            type='HPMPretrainDecoder',
            num_patches=(img_size // patch_size)**2,
            patch_size=patch_size,
            in_chans=in_channels,
            embed_dim=embed_dims,
            decoder_embed_dim=16,
            decoder_depth=1,
            decoder_num_heads=2,
            predictor_depth=1),
        head=dict(
            type='HPMPretrainHead',
            patch_size=patch_size,
            in_channels=in_channels),
        mask_generator=dict(
            type='HPMMaskGenerator', mask_ratio=0.75, alpha_0=0.5,
            alpha_T=0.5),
        teacher=dict(type='EMATeacher'),
        data_preprocessor=dict(
            type='SelfSupDataPreprocessor',
            mean=[0.] * in_channels,
            std=[1.] * in_channels))
    return merge(cfg, overrides)


def tiny_mae(device='cpu', seed: int = 0, num_layers: int = 2):
    """mmpretrain's own MAE at the tiny HPM's sizes (:func:`tiny_hpm_cfg`:
    16 px, patch 4, 1 channel, a 16-d 1-block decoder), built and
    initialised on ``device``: the baseline of the step tests."""
    from mmpretrain.registry import MODELS
    hpm = tiny_hpm_cfg(num_layers=num_layers)
    torch.manual_seed(seed)
    # the same encoder and decoder, as mmpretrain's classes (no predictor)
    neck = {k: v for k, v in hpm['neck'].items() if k != 'predictor_depth'}
    model = MODELS.build(
        dict(
            type='MAE',
            backbone=dict(hpm['backbone'], type='MAEViT', mask_ratio=0.75),
            neck=dict(neck, type='MAEPretrainDecoder'),
            head=dict(
                type='MAEPretrainHead',
                norm_pix=False,
                patch_size=4,
                in_channels=1,
                loss=dict(type='PixelReconstructionLoss', criterion='L2')),
            data_preprocessor=hpm['data_preprocessor']))
    model.init_weights()
    return model.to(device)


def tiny_step_setup(model,
                    device='cpu',
                    batch: int = 4,
                    clip_grad=None,
                    **adamw):
    """A tiny model ready for ``train_step``: in train mode with its
    teacher scoring (``set_progress(1)``), a guarded AdamW wrapper
    (``adamw``: its options, lr 1e-4 unless given; ``clip_grad``) and a
    batch of random 16 px images. Returns ``(optim_wrapper, data)``."""
    from mmengine.optim import build_optim_wrapper
    model.train()
    if hasattr(model, 'set_progress'):
        model.set_progress(1.0)
    optim = build_optim_wrapper(
        model,
        dict(
            type='GuardedOptimWrapper',
            clip_grad=clip_grad,
            optimizer=dict(dict(type='AdamW', lr=1e-4), **adamw)))
    data = dict(
        inputs=torch.randn(batch, 1, 16, 16, device=device), data_samples=None)
    return optim, data


def tiny_hpm(device='cpu', seed: int = None, **kwargs):
    """:func:`tiny_hpm_cfg` built and initialised on ``device`` (after
    ``torch.manual_seed(seed)`` when a seed is given)."""
    from mmpretrain.registry import MODELS

    import hpm_mm  # noqa: F401
    if seed is not None:
        torch.manual_seed(seed)
    model = MODELS.build(tiny_hpm_cfg(**kwargs))
    model.init_weights()
    return model.to(device)


def make_image_folder(root: str,
                      num_classes: int = 2,
                      per_class: int = 8,
                      size: int = 32,
                      gray: bool = True,
                      seed: int = 0) -> str:
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
            Image.fromarray(img).save(
                osp.join(root, f'class_{c}', f'{i:03d}.png'))
    return root


def folder_loader(root: str, batch_size: int = 4, size: int = 28) -> dict:
    """The config of an unshuffled loader over the labelled folder ``root``
    of grayscale images (resized to ``size``; None: as they are)."""
    resize = [dict(type='Resize', scale=size)] if size else []
    return dict(
        batch_size=batch_size,
        num_workers=0,
        sampler=dict(type='DefaultSampler', shuffle=False),
        collate_fn=dict(type='default_collate'),
        dataset=dict(
            type='CustomDataset',
            data_root=root,
            pipeline=[
                dict(type='LoadImageFromFile', color_type='grayscale'),
                *resize,
                dict(type='PackInputs')
            ]))


HPM_HOOKS = "custom_hooks = [dict(type='HPMScheduleHook')]"

RANDOM_CROP = ("dict(type='RandomResizedCrop', scale=28, "
               "crop_ratio_range=(0.5, 1.0), backend='pillow')")


def tiny_config(tmp_path,
                base: str = FMNIST_CFG,
                body: str = '',
                num_images: int = 16,
                hooks: str = HPM_HOOKS,
                transform: str = RANDOM_CROP,
                batch_size: int = 4,
                shuffle: bool = True) -> str:
    """A config inheriting ``base`` that trains on a generated folder of
    ``num_images`` grayscale 32x32 PNGs, batch 4, no workers, and only the
    ``hooks`` given (no kNN over Fashion-MNIST)."""
    data = make_image_folder(
        str(tmp_path / 'imgs'), num_classes=2, per_class=num_images // 2)
    cfg = tmp_path / 'tiny_cfg.py'
    cfg.write_text(f'''
_base_ = [{base!r}]
train_dataloader = dict(
    batch_size={batch_size}, num_workers=0, persistent_workers=False,
    sampler=dict(type='DefaultSampler', shuffle={shuffle}),
    dataset=dict(_delete_=True, type='CustomDataset', data_root={data!r},
                 with_label=False, pipeline=[
                     dict(type='LoadImageFromFile', color_type='grayscale'),
                     {transform},
                     dict(type='PackInputs')]))
default_hooks = dict(logger=dict(interval=1),
                     checkpoint=dict(interval=1))
{hooks}
{body}
''')
    return str(cfg)


# a smaller model for the tool-level runs of the small config; {keep} and
# {epochs} set the checkpoints kept and the run's length
TINY_RUN = '''
model = dict(
    backbone=dict(arch=dict(embed_dims=16, num_layers=1, num_heads=2,
                            feedforward_channels=32)),
    neck=dict(embed_dim=16, decoder_embed_dim=8, decoder_depth=1,
              decoder_num_heads=2))
default_hooks = dict(checkpoint=dict(interval=1, max_keep_ckpts={keep}))
train_cfg = dict(max_epochs={epochs})
'''


def folder_config(tmp_path, data, color='grayscale', skip=False):
    """The small config trained 1 epoch on the image folder ``data``,
    read by LoadImageFromFileChecked as ``color`` (``skip``: skip
    unreadable files)."""
    cfg = tmp_path / f'folder_{color}_{skip}.py'
    cfg.write_text(f'''
_base_ = [{FMNIST_CFG!r}]
train_dataloader = dict(
    batch_size=4, num_workers=0, persistent_workers=False,
    dataset=dict(_delete_=True, type='CustomDataset', data_root={data!r},
                 with_label=False, pipeline=[
                     dict(type='LoadImageFromFileChecked',
                          color_type={color!r}, skip_unreadable={skip}),
                     dict(type='Resize', scale=28),
                     dict(type='PackInputs')]))
custom_hooks = [dict(type='HPMScheduleHook')]
train_cfg = dict(max_epochs=1)
''')
    return str(cfg)


# the encoder of rgb_hpm_checkpoint (the detection / segmentation tests)
ARCH = dict(embed_dims=64, num_layers=4, num_heads=2, feedforward_channels=128)


def make_coco(root: str, num_images: int = 4, size: int = 128) -> str:
    """COCO instance json with polygon and RLE masks + images; return the
    annotation file."""
    from PIL import Image
    from pycocotools import mask as mask_utils
    rng = np.random.default_rng(0)
    os.makedirs(osp.join(root, 'images'), exist_ok=True)
    images, anns = [], []
    for i in range(num_images):
        img = rng.integers(0, 80, (size, size, 3), dtype=np.uint8)
        name = f'{i:012d}.jpg'
        for j in range(2):
            x, y = rng.integers(8, size - 56, 2)
            w, h = rng.integers(24, 48, 2)
            img[y:y + h, x:x + w] = (200, 60 + 100 * j, 50)
            if j == 0:  # polygon
                seg = [[
                    float(x),
                    float(y),
                    float(x + w),
                    float(y),
                    float(x + w),
                    float(y + h),
                    float(x),
                    float(y + h)
                ]]
            else:  # RLE
                m = np.zeros((size, size), np.uint8, order='F')
                m[y:y + h, x:x + w] = 1
                rle = mask_utils.encode(m)
                seg = dict(
                    size=rle['size'], counts=rle['counts'].decode('ascii'))
            anns.append(
                dict(
                    id=len(anns) + 1,
                    image_id=i + 1,
                    category_id=j + 1,
                    iscrowd=0,
                    bbox=[float(x), float(y),
                          float(w), float(h)],
                    area=float(w * h),
                    segmentation=seg))
        Image.fromarray(img).save(osp.join(root, 'images', name))
        images.append(dict(id=i + 1, file_name=name, width=size, height=size))
    ann_file = osp.join(root, 'instances.json')
    with open(ann_file, 'w') as f:
        json.dump(
            dict(
                images=images,
                annotations=anns,
                categories=[
                    dict(id=1, name='person'),
                    dict(id=2, name='bicycle')
                ]), f)
    return ann_file


def make_ade20k(root: str, num_images: int = 4, size: int = 64) -> str:
    """ADE20k layout: images/{training,validation}/*.jpg and
    annotations/{training,validation}/*.png (0 = other, 1..150 classes)."""
    from PIL import Image
    rng = np.random.default_rng(1)
    for split in ('training', 'validation'):
        os.makedirs(osp.join(root, 'images', split), exist_ok=True)
        os.makedirs(osp.join(root, 'annotations', split), exist_ok=True)
        for i in range(num_images):
            img = rng.integers(0, 255, (size, size, 3), dtype=np.uint8)
            seg = np.zeros((size, size), np.uint8)
            seg[:size // 2] = 1 + i % 3
            seg[size // 2:, :size // 2] = 5
            name = f'ADE_{split}_{i:08d}'
            Image.fromarray(img).save(
                osp.join(root, 'images', split, name + '.jpg'))
            Image.fromarray(seg).save(
                osp.join(root, 'annotations', split, name + '.png'))
    return root


def run_log(runner) -> str:
    """The text of the log file of ``runner``'s run (its console lines)."""
    with open(osp.join(runner.log_dir, f'{runner.timestamp}.log')) as f:
        return f.read()


def train(cfg, work, **kwargs) -> str:
    """:func:`hpm_mm.apis.train` of the config file ``cfg`` in the work dir
    ``work`` (``kwargs``: its arguments: ``resume``, ``cfg_options``, ...);
    returns what the run logged. A refusal raises its ``HPMError``."""
    from hpm_mm.apis import train as api_train
    return run_log(api_train(str(cfg), str(work), **kwargs))


def process(*args,
            cwd=REPO,
            env: dict = None,
            timeout: int = 600,
            python: str = sys.executable) -> subprocess.CompletedProcess:
    """``python *args`` in a new interpreter (or ``python``: the ``warm``
    fixture's) in ``cwd`` with ``env``: extra environment variables; output
    captured as text. For what needs a process of its own: DDP, a kill, an
    install, what a start-up reads."""
    return subprocess.run(
        [python] + [str(a) for a in args],
        cwd=cwd,
        env=dict(os.environ, **{
            k: str(v)
            for k, v in (env or {}).items()
        }),
        capture_output=True,
        text=True,
        timeout=timeout)


def tool_main(script: str, *argv) -> subprocess.CompletedProcess:
    """``main(argv)`` of ``tools/<script>`` (imported from its file), its
    output captured: the status ``sys.exit`` would end the process with
    (from what ``main`` returns or raises: a string is written to stderr,
    status 1), stdout and stderr. Anything but ``SystemExit`` propagates (a
    traceback is a failure)."""
    import contextlib
    import io
    name = osp.splitext(osp.basename(script))[0]
    spec = importlib.util.spec_from_file_location(
        f'tools_{name}', osp.join(REPO, 'tools', script))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    from unittest import mock
    out, err = io.StringIO(), io.StringIO()
    # (the environment it sets, e.g. LOCAL_RANK, is the tool's process's)
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), \
            mock.patch.dict(os.environ):
        try:
            status = module.main([str(a) for a in argv])
        except SystemExit as e:
            status = e.code
        if isinstance(status, str):
            print(status, file=sys.stderr)
            status = 1
    return subprocess.CompletedProcess([script, *argv], status or 0,
                                       out.getvalue(), err.getvalue())


def rewrite_is_whole(path, write, signal_=None) -> None:
    """``write()`` over the file ``path`` (or each of a list: one set of
    outputs), stopped half-way through its ``torch.save`` as a Ctrl-C
    would (``signal_``: by that signal sent to this process): each is as
    it was, no part of a new file is left beside it."""
    from unittest import mock
    paths = [str(p) for p in (path if isinstance(path, list) else [path])]
    real = torch.save

    def stopped(obj, f, *args, **kwargs):
        real({'half': torch.zeros(3)}, f)  # some bytes written, then
        if signal_ is None:
            raise KeyboardInterrupt
        os.kill(os.getpid(), signal_)

    before = {}
    for p in paths:
        with open(p, 'rb') as f:
            before[p] = f.read()
    with mock.patch.object(torch, 'save', stopped), \
            pytest.raises(KeyboardInterrupt):
        write()
    for p in paths:
        with open(p, 'rb') as f:
            assert f.read() == before[p], f'{p} changed'
        folder = osp.dirname(p)
        assert [n for n in os.listdir(folder) if n.endswith('.part')] == []


DET_DIR = osp.join(REPO, 'configs', 'benchmarks', 'det')
# the model part each tiny run changes: ViTDet's simple feature pyramid (on
# the last map) or the multi-level variant, mmseg's Feature2Pyramid + FPN (on
# the 4 subsets' maps)
DET_VARIANTS = {
    'sfp': ('mask-rcnn_hpm-vit-base-p16_sfp_8xb2-1x_coco-1024.py',
            'neck=dict(in_channels=64)'),
    'mlfpn': ('mask-rcnn_hpm-vit-base-p16_mlfpn_8xb2-1x_coco-1024.py',
              "neck=[dict(type='mmseg.Feature2Pyramid', embed_dim=64, "
              "norm_cfg=dict(type='BN')), dict(type='FPN', in_channels=[64] "
              "* 4, out_channels=256, num_outs=5)]"),
}
SEG_CFG = osp.join(REPO, 'configs', 'benchmarks', 'seg',
                   'upernet_hpm-vit-base-p16_8xb2-amp-80k_ade20k-512x512.py')


def det_config(tmp_path, weights, variant='sfp'):
    """A 2-iteration Mask R-CNN config (the benchmark's, sizes shrunk) on a
    generated COCO folder, from converted ``weights``: (config, ann file)."""
    config, neck = DET_VARIANTS[variant]
    ann = make_coco(str(tmp_path / 'coco'))
    data = dict(
        data_root=str(tmp_path / 'coco'),
        ann_file=ann,
        data_prefix=dict(img='images/'),
        metainfo=dict(classes=('person', 'bicycle')))
    loader = dict(batch_size=2, num_workers=0, persistent_workers=False)
    cfg = tmp_path / 'det_tiny.py'
    cfg.write_text(f'''
_base_ = [{osp.join(DET_DIR, config)!r}]
image_size = (128, 128)
model = dict(
    data_preprocessor=dict(batch_augments=[
        dict(type='BatchFixedSizePad', size=image_size, pad_mask=True)]),
    backbone=dict(arch=dict({', '.join(f'{k}={v}' for k, v in ARCH.items())},
                            global_attn_indexes=[1, 3]),
                  img_size=128, window_size=4,
                  out_indices={[0, 1, 2, 3] if variant == 'mlfpn' else -1},
                  init_cfg=dict(checkpoint={weights!r})),
    {neck},
    roi_head=dict(mask_head=dict(num_classes=2),
                  bbox_head=dict(num_classes=2)),
    # the heads as configured, on fewer proposals and RoIs: the 4-conv
    # 256-channel box and mask heads on 512 sampled RoIs made a step take
    # ~18 s on 2 cores
    train_cfg=dict(rpn_proposal=dict(nms_pre=200, max_per_img=100),
                   rcnn=dict(sampler=dict(num=64))),
    # after 2 iterations the LN box head still scores every box near the
    # background: keep them all so the COCO evaluation has detections
    test_cfg=dict(rpn=dict(nms_pre=200, max_per_img=50),
                  rcnn=dict(score_thr=0.0, max_per_img=20)))
optim_wrapper = dict(type='OptimWrapper',
                     paramwise_cfg=dict(num_layers=4))
train_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='LoadAnnotations', with_bbox=True, with_mask=True),
    dict(type='Resize', scale=image_size, keep_ratio=True),
    dict(type='PackDetInputs')]
test_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='Resize', scale=image_size, keep_ratio=True),
    dict(type='LoadAnnotations', with_bbox=True, with_mask=True),
    dict(type='PackDetInputs', meta_keys=('img_id', 'img_path', 'ori_shape',
                                          'img_shape', 'scale_factor'))]
train_dataloader = dict({loader!r},
                        dataset=dict({data!r}, pipeline=train_pipeline))
val_dataloader = dict({loader!r},
                      dataset=dict({data!r}, pipeline=test_pipeline))
test_dataloader = val_dataloader
val_evaluator = dict(ann_file={ann!r})
test_evaluator = val_evaluator
train_cfg = dict(max_iters=2, val_interval=2)
param_scheduler = []
default_hooks = dict(logger=dict(interval=1))
env_cfg = dict(dist_cfg=dict(backend='gloo'))
''')
    return cfg, ann


def seg_config(tmp_path, weights):
    """A 2-iteration UperNet config (the benchmark's, sizes shrunk) on a
    generated ADE20k folder, from converted ``weights``."""
    root = make_ade20k(str(tmp_path / 'ade'))
    cfg = tmp_path / 'seg_tiny.py'
    cfg.write_text(f'''
_base_ = [{SEG_CFG!r}]
crop_size = (64, 64)
norm_cfg = dict(type='BN', requires_grad=True)
model = dict(
    pretrained={weights!r},
    data_preprocessor=dict(size=crop_size),
    backbone=dict(img_size=crop_size, embed_dims=64, num_layers=4,
                  num_heads=2, mlp_ratio=2, out_indices=[0, 1, 2, 3]),
    neck=dict(embed_dim=64),
    decode_head=dict(in_channels=[64, 64, 64, 64], channels=32,
                     norm_cfg=norm_cfg),
    auxiliary_head=dict(in_channels=64, channels=16, norm_cfg=norm_cfg),
    test_cfg=dict(mode='whole'))
optim_wrapper = dict(paramwise_cfg=dict(num_layers=4))
train_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='LoadAnnotations', reduce_zero_label=True),
    dict(type='Resize', scale=crop_size, keep_ratio=False),
    dict(type='PackSegInputs')]
test_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='Resize', scale=crop_size, keep_ratio=False),
    dict(type='LoadAnnotations', reduce_zero_label=True),
    dict(type='PackSegInputs')]
train_dataloader = dict(batch_size=2, num_workers=0, persistent_workers=False,
                        dataset=dict(data_root={root!r},
                                     pipeline=train_pipeline))
val_dataloader = dict(batch_size=1, num_workers=0, persistent_workers=False,
                      dataset=dict(data_root={root!r},
                                   pipeline=test_pipeline))
test_dataloader = val_dataloader
train_cfg = dict(max_iters=2, val_interval=2)
param_scheduler = []
default_hooks = dict(logger=dict(interval=1),
                     checkpoint=dict(interval=2))
env_cfg = dict(dist_cfg=dict(backend='gloo'))
''')
    return cfg
