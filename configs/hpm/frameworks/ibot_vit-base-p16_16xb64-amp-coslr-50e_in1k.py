# Plain iBOT, ViT-B/16, 50 epochs of 2 x 224 px + 10 x 96 px crops, i.e.
# ~200 effective epochs (supplementary table, iBOT: 82.9 fine-tune). iBOT's
# recipe (main_ibot.py and its README; the ViT-B args file is not public
# text): batch 1024, AdamW (0.9, 0.999), lr 5e-4 * 1024 / 256 with 10 warmup
# epochs then cosine to 1e-6, weight decay 0.04 -> 0.4 (cosine), each
# parameter's gradient clipped at 3.0, fp16, drop path 0.1, teacher decay
# 0.996 -> 1 (cosine), teacher temperature 0.04 -> 0.07 over 30 epochs,
# 8192 shared prototypes with a normalised last layer (ViT-B) frozen in epoch
# 1, global crops (0.25, 1), local crops (0.05, 0.25), block-wise masks of
# 0 or 10-50% of the patches. The encoder is HPM's ViT (absolute sin-cos
# positions) with a mask token, so its checkpoint goes through the same
# converters and fine-tune configs.
_base_ = ['mmpretrain::_base_/default_runtime.py']
custom_imports = dict(imports=['hpm_mm'], allow_failed_imports=False)

# model
model = dict(
    type='HPMiBOT',
    data_preprocessor=dict(
        type='SelfSupDataPreprocessor',
        mean=[123.675, 116.28, 103.53],
        std=[58.395, 57.12, 57.375],
        to_rgb=True),
    backbone=dict(
        type='MaskTokenViT',
        arch='b',
        img_size=224,
        patch_size=16,
        drop_path_rate=0.1),
    neck=dict(
        type='iBOTNeck',
        in_channels=768,
        hidden_channels=2048,
        bottleneck_channels=256,
        out_channels=8192,
        norm_last_layer=True,
        freeze_last_layer=1),
    head=dict(
        type='HPMiBOTHead',
        out_channels=8192,
        teacher_temp=0.07,
        teacher_patch_temp=0.07,
        warmup_teacher_temp_epochs=30,
        loss_pred=None),
    mask_generator=dict(
        type='BlockwiseMaskGenerator',
        mask_ratio=[(0., 0.), (0.1, 0.5)],  # pred_ratio 0 0.3 +- 0 0.2
        min_num_patches=16),
    teacher=dict(
        type='EMATeacher',
        momentum=4e-3,  # decay 0.996
        end_momentum=0.,
        momentum_epochs=50,
        momentum_schedule='cosine'),
    init_cfg=[  # iBOT's: truncated normal 0.02 for every linear layer
        dict(type='TruncNormal', layer='Linear', std=0.02, bias=0.),
        dict(type='Constant', layer='LayerNorm', val=1.0, bias=0.0)
    ])

# data: iBOT's multi-crop (DINO's augmentations), as mmpretrain's MultiView
flip_and_color = [
    dict(type='RandomFlip', prob=0.5),
    dict(
        type='RandomApply',
        transforms=[
            dict(
                type='ColorJitter',
                brightness=0.4,
                contrast=0.4,
                saturation=0.2,
                hue=0.1)
        ],
        prob=0.8),
    dict(
        type='RandomGrayscale',
        prob=0.2,
        keep_channels=True,
        channel_weights=(0.114, 0.587, 0.2989)),
]
blur = dict(
    type='GaussianBlur', magnitude_range=(0.1, 2.0), magnitude_std='inf')
global_crop = dict(
    type='RandomResizedCrop',
    scale=224,
    crop_ratio_range=(0.25, 1.),
    interpolation='bicubic',
    backend='pillow')
train_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(
        type='MultiView',
        num_views=[1, 1, 10],
        transforms=[
            [global_crop, *flip_and_color,
             dict(blur, prob=1.0)],
            [
                global_crop, *flip_and_color,
                dict(blur, prob=0.1),
                dict(type='Solarize', thr=128, prob=0.2)
            ],
            [
                dict(global_crop, scale=96, crop_ratio_range=(0.05, 0.25)),
                *flip_and_color,
                dict(blur, prob=0.5)
            ],
        ]),
    dict(type='PackInputs')
]
train_dataloader = dict(
    batch_size=64,
    num_workers=10,
    persistent_workers=True,
    pin_memory=True,
    drop_last=True,
    sampler=dict(type='DefaultSampler', shuffle=True),
    collate_fn=dict(type='default_collate'),
    dataset=dict(
        type='ImageNet',
        data_root='data/imagenet/',
        split='train',
        pipeline=train_pipeline))

# optimizer: no weight decay on biases and norms (iBOT's 1-d parameters)
optim_wrapper = dict(
    type='GuardedAmpOptimWrapper',
    loss_scale='dynamic',
    constructor='FrozenAwareOptimWrapperConstructor',
    clip_grad=dict(type='param_norm', max_norm=3.0),
    optimizer=dict(
        type='AdamW',
        lr=5e-4 * 1024 / 256,
        betas=(0.9, 0.999),
        weight_decay=0.04),
    paramwise_cfg=dict(norm_decay_mult=0., bias_decay_mult=0.))

# schedule: 10 warmup epochs, then the lr's and the weight decay's cosines
# end with the run (no `end` or `T_max`: mmengine's train_cfg.max_epochs)
param_scheduler = [
    dict(
        type='LinearLR',
        start_factor=1e-9,
        by_epoch=True,
        begin=0,
        end=10,
        convert_to_iter_based=True),
    dict(
        type='CosineAnnealingLR',
        eta_min=1e-6,
        by_epoch=True,
        begin=10,
        convert_to_iter_based=True),
    dict(
        type='CosineAnnealingWeightDecay',
        eta_min=0.4,
        by_epoch=True,
        begin=0,
        convert_to_iter_based=True),
]
train_cfg = dict(type='EpochBasedTrainLoop', max_epochs=50)
auto_scale_lr = dict(base_batch_size=1024)

# runtime: the epoch for the teacher momentum, temperatures and the frozen
# last layer (and the mask schedule of HPM on iBOT)
custom_hooks = [dict(type='HPMScheduleHook', by_epoch=True)]
default_hooks = dict(
    # the logged scalars read back from the GPU once per log interval
    runtime_info=dict(type='DeferredRuntimeInfoHook'),
    checkpoint=dict(type='AtomicCheckpointHook', interval=5, max_keep_ckpts=3))
find_unused_parameters = False
resume = True

# hpm_mm's runner: its run policy (precision, run length, one run per work
# dir, resume checks) whoever builds it (hpm_mm.engine.runner)
runner_type = 'HPMRunner'
