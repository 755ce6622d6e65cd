# COCO Mask R-CNN with an HPM ViT-B/16, paper Tab. 6 protocol: ViTDet-style
# backbone (mmpretrain's ViTSAM: 14x14 windowed attention, the 12 blocks in
# 4 subsets each ending in a global block [2, 5, 8, 11], decomposed relative
# position, absolute position embedding interpolated to 64x64), ViTDet's
# simple feature pyramid (strides 4-64), 1x schedule (12 epochs), 1024x1024,
# batch 16 (8 GPUs x 2), AdamW lr 1e-4, wd 0.1, layer decay 0.7 (ViTDet),
# drop path 0.1. Heads: mmdet's Mask R-CNN heads unchanged.
#
# Pretrained weights: convert an HPM checkpoint first,
#   python tools/model_converters/hpm2backbone.py work_dirs/.../epoch_200.pth \
#       pretrain/hpm_vit-base-p16_mmdet.pth --target mmdet --img-size 1024
_base_ = [
    '../../_base_/models/mask-rcnn_hpm-vit-base-p16_sfp.py',
    'mmdet::_base_/datasets/coco_instance.py',
    'mmdet::_base_/schedules/schedule_1x.py',
    'mmdet::_base_/default_runtime.py',
]

image_size = (1024, 1024)

# data: resize the long side to 1024 (padded to 1024x1024 in the batch)
train_pipeline = [
    dict(type='LoadImageFromFile', backend_args={{_base_.backend_args}}),
    dict(type='LoadAnnotations', with_bbox=True, with_mask=True),
    dict(type='Resize', scale=image_size, keep_ratio=True),
    dict(type='RandomFlip', prob=0.5),
    dict(type='PackDetInputs')
]
test_pipeline = [
    dict(type='LoadImageFromFile', backend_args={{_base_.backend_args}}),
    dict(type='Resize', scale=image_size, keep_ratio=True),
    dict(type='LoadAnnotations', with_bbox=True, with_mask=True),
    dict(
        type='PackDetInputs',
        meta_keys=('img_id', 'img_path', 'ori_shape', 'img_shape',
                   'scale_factor'))
]
train_dataloader = dict(batch_size=2, dataset=dict(pipeline=train_pipeline))
val_dataloader = dict(dataset=dict(pipeline=test_pipeline))
test_dataloader = val_dataloader

# optimizer
optim_wrapper = dict(
    _delete_=True,
    type='GuardedAmpOptimWrapper',
    constructor='LayerDecayOptimWrapperConstructor',
    paramwise_cfg=dict(num_layers=12, layer_decay_rate=0.7),
    optimizer=dict(
        type='AdamW', lr=1e-4, betas=(0.9, 0.999), weight_decay=0.1),
    clip_grad=None)

auto_scale_lr = dict(base_batch_size=16)

# runtime: checkpoints written atomically (a kill never loses the last one)
default_hooks = dict(checkpoint=dict(type='AtomicCheckpointHook'))
