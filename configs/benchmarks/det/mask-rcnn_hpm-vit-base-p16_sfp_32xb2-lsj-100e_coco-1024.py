# The ViTDet recipe with an HPM ViT-B/16 (detectron2's mask_rcnn_vitdet_b_
# 100ep): large-scale jitter (0.1-2.0) with a 1024x1024 crop, tested at
# 1024; 100 epochs (mmdet's lsj-100e: 25 epochs of a 4x repeated COCO, the
# lr x0.1 at effective epochs 88 and 96 as ViTDet's 88.9% / 96.3%), batch 64
# (32 GPUs x 2), AdamW lr 1e-4 (ViTDet's, at batch 64), wd 0.1, layer decay
# 0.7, warmup 250 iterations from 0.001; model and heads as the 1x config.
_base_ = [
    '../../_base_/models/mask-rcnn_hpm-vit-base-p16_sfp.py',
    'mmdet::common/lsj-100e_coco-instance.py',
]

# data: tested at 1024 (mmdet's lsj file tests at 1333x800)
test_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='Resize', scale=(1024, 1024), keep_ratio=True),
    dict(type='LoadAnnotations', with_bbox=True, with_mask=True),
    dict(
        type='PackDetInputs',
        meta_keys=('img_id', 'img_path', 'ori_shape', 'img_shape',
                   'scale_factor'))
]
val_dataloader = dict(dataset=dict(pipeline=test_pipeline))
test_dataloader = val_dataloader

# optimizer
optim_wrapper = dict(
    _delete_=True,
    type='GuardedAmpOptimWrapper',
    constructor='LayerDecayOptimWrapperConstructor',
    paramwise_cfg=dict(num_layers=12, layer_decay_rate=0.7),
    optimizer=dict(
        type='AdamW', lr=1e-4, betas=(0.9, 0.999), weight_decay=0.1))
param_scheduler = [
    dict(
        type='LinearLR', start_factor=0.001, by_epoch=False, begin=0, end=250),
    dict(
        type='MultiStepLR',
        begin=0,
        end=25,
        by_epoch=True,
        milestones=[22, 24],
        gamma=0.1)
]

# runtime: checkpoints written atomically (a kill never loses the last one)
default_hooks = dict(checkpoint=dict(type='AtomicCheckpointHook'))

# hpm_mm's runner: its run policy (precision, run length, one run per work
# dir, resume checks) whoever builds it (hpm_mm.engine.runner)
runner_type = 'HPMRunner'
