"""One training iteration and the evaluation loop of the COCO Mask R-CNN and
ADE20k UperNet configs on generated data in the real formats, starting from
converted HPM weights."""
import json
import os.path as osp

import pytest
from helpers import ARCH, NEEDS_FULL, REPO, make_ade20k, make_coco, tool_main
from helpers import train as train_run

pytestmark = NEEDS_FULL  # mmdet, mmseg and mmcv's compiled ops

DET_DIR = osp.join(REPO, 'configs', 'benchmarks', 'det')
# the model part each tiny run changes: ViTDet's simple feature pyramid (on
# the last map) or the multi-level adapter + FPN (on the 4 subsets' maps)
DET_VARIANTS = {
    'sfp': ('mask-rcnn_hpm-vit-base-p16_sfp_8xb2-1x_coco-1024.py',
            'neck=dict(in_channels=64)'),
    'mlfpn': ('mask-rcnn_hpm-vit-base-p16_mlfpn_8xb2-1x_coco-1024.py',
              "neck=[dict(type='MultiLevelViTAdapter', in_channels=64, "
              "norm_cfg=dict(type='BN')), dict(type='FPN', in_channels=[64] "
              "* 4, out_channels=256, num_outs=5)]"),
}
SEG_CFG = osp.join(REPO, 'configs', 'benchmarks', 'seg',
                   'upernet_hpm-vit-base-p16_8xb2-amp-80k_ade20k-512x512.py')


def _convert(ckpt, out, target, img):
    proc = tool_main('model_converters/hpm2backbone.py', ckpt, out, '--target',
                     target, '--img-size', img)
    assert proc.returncode == 0, proc.stderr
    return str(out)


def _scalars(work_dir):
    rows = []
    for log in sorted(work_dir.glob('*/vis_data/scalars.json')):
        rows += [json.loads(x) for x in log.read_text().splitlines()]
    return rows


@pytest.mark.parametrize('variant', list(DET_VARIANTS))
def test_mask_rcnn_vitdet_trains_and_evaluates(tmp_path, rgb_hpm_checkpoint,
                                               variant):
    config, neck = DET_VARIANTS[variant]
    ann = make_coco(str(tmp_path / 'coco'))
    weights = _convert(rgb_hpm_checkpoint, tmp_path / 'det.pth', 'mmdet', 128)
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
    work = tmp_path / 'work'
    log = train_run(cfg, work)
    assert 'layer decay 0.7' in log
    rows = _scalars(work)
    train = [r for r in rows if 'loss_mask' in r]
    assert len(train) == 2
    for r in train:
        for k in ('loss_rpn_cls', 'loss_cls', 'loss_bbox', 'loss_mask'):
            assert r[k] == r[k] and abs(r[k]) < 1e4, (k, r[k])  # finite
    val = [r for r in rows if 'coco/bbox_mAP' in r]
    assert val and 'coco/segm_mAP' in val[-1]
    # and tools/test.py evaluates the trained checkpoint
    out = tmp_path / 'metrics.json'
    from hpm_mm.apis import test
    test(
        str(cfg),
        str(work / 'iter_2.pth'),
        str(tmp_path / 'test'),
        out=str(out))
    metrics = json.loads(out.read_text())
    assert 0 <= metrics['coco/bbox_mAP'] <= 1
    assert 0 <= metrics['coco/segm_mAP'] <= 1


def test_upernet_trains_and_evaluates(tmp_path, rgb_hpm_checkpoint):
    root = make_ade20k(str(tmp_path / 'ade'))
    weights = _convert(rgb_hpm_checkpoint, tmp_path / 'seg.pth', 'mmseg', 64)
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
    work = tmp_path / 'work'
    log = train_run(cfg, work)
    # mmseg loads the converted backbone non-strictly and silently: the
    # converter's strict report is the check; here, nothing is reported as
    # missing from the pretrained file except the relative-position tables
    assert 'unexpected key' not in log
    rows = _scalars(work)
    train = [r for r in rows if 'decode.loss_ce' in r]
    assert len(train) == 2
    assert all(r['decode.loss_ce'] == r['decode.loss_ce'] for r in train)
    val = [r for r in rows if 'mIoU' in r]
    assert val and 0 <= val[-1]['mIoU'] <= 100


def test_pyramids_give_every_stride():
    """ViTDet's simple pyramid (from the last map) and the multi-level
    adapter + FPN (from each subset's map): strides 4, 8, 16, 32, 64 of a
    128 px image whose ViT maps are at stride 16."""
    import torch
    from mmdet.registry import MODELS
    from mmengine.registry import init_default_scope

    import hpm_mm.det  # noqa: F401
    init_default_scope('mmdet')
    maps = tuple(torch.randn(2, 64, 8, 8) for _ in range(4))
    want = [(2, 256, 128 // s, 128 // s) for s in (4, 8, 16, 32, 64)]
    sfp = MODELS.build(
        dict(
            type='SimpleFeaturePyramid',
            in_channels=64,
            out_channels=256,
            num_outs=5))
    assert [tuple(o.shape) for o in sfp(maps[-1:])] == want
    adapter = MODELS.build(
        dict(
            type='MultiLevelViTAdapter',
            in_channels=64,
            norm_cfg=dict(type='BN')))
    levels = adapter(maps)
    assert [tuple(o.shape) for o in levels] == \
        [(2, 64, 128 // s, 128 // s) for s in (4, 8, 16, 32)]
    # each level comes from its own subset's map
    assert torch.equal(levels[2], maps[2])
    assert torch.equal(levels[3], torch.nn.functional.max_pool2d(maps[3], 2))
    fpn = MODELS.build(
        dict(type='FPN', in_channels=[64] * 4, out_channels=256, num_outs=5))
    assert [tuple(o.shape) for o in fpn(levels)] == want
    import pytest
    with pytest.raises(ValueError, match='out_indices'):
        adapter(maps[:1])
