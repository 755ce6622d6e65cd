# HPM on iBOT with the main job's mini ViT and data (the check on the
# embedded Fashion-MNIST): HPM on SimMIM's encoder and loss predictor, with
# iBOT's head and views: 2 global 28-px crops (49 patches) and 4 local 16-px
# crops (16 patches) per image, iBOT's augmentations that suit grayscale
# (crop, flip, blur with its radius scaled to 28 px, solarize; mmcv's colour
# jitter needs RGB), a 1024-prototype head, iBOT's per-image masks (none, or
# 10-50% block-wise) of which alpha 0 -> 0.5 are the hardest, and the
# teacher (decay 0.99 -> 1, cosine) and temperatures (0.04 -> 0.07 over 3
# epochs) scaled to a 400-step run.
_base_ = './hpm-simmim_vit-mini-p4_1xb256-coslr-10e_fmnist.py'

model = dict(
    type='HPMiBOT',
    neck=dict(
        _delete_=True,
        type='iBOTNeck',
        in_channels={{_base_.vit_mini.arch.embed_dims}},
        hidden_channels=512,
        bottleneck_channels=128,
        out_channels=1024),
    head=dict(
        _delete_=True,
        type='HPMiBOTHead',
        out_channels=1024,
        warmup_teacher_temp_epochs=3),
    mask_generator=dict(
        mask_ratio=[(0., 0.), (0.1, 0.5)],
        rest=dict(type='BlockwiseMaskGenerator', min_num_patches=4)),
    teacher=dict(momentum=0.01, end_momentum=0., momentum_schedule='cosine'),
    init_cfg=[
        dict(type='TruncNormal', layer='Linear', std=0.02, bias=0.),
        dict(type='Constant', layer='LayerNorm', val=1.0, bias=0.0)
    ])

crop = dict(
    type='RandomResizedCrop',
    scale=28,
    crop_ratio_range=(0.4, 1.0),
    backend='pillow',
    interpolation='bicubic')
flip = dict(type='RandomFlip', prob=0.5)
blur = dict(
    type='GaussianBlur', magnitude_range=(0.1, 0.3), magnitude_std='inf')
train_dataloader = dict(
    dataset=dict(pipeline=[
        dict(
            type='MultiView',
            num_views=[1, 1, 4],
            transforms=[
                [crop, flip, dict(blur, prob=1.0)],
                [
                    crop, flip,
                    dict(blur, prob=0.1),
                    dict(type='Solarize', thr=128, prob=0.2)
                ],
                [
                    dict(crop, scale=16, crop_ratio_range=(0.1, 0.4)), flip,
                    dict(blur, prob=0.5)
                ],
            ]),
        dict(type='PackInputs')
    ]))
optim_wrapper = dict(
    clip_grad=dict(_delete_=True, type='param_norm', max_norm=3.0))
