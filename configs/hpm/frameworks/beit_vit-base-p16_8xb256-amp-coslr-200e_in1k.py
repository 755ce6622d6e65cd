# Plain BEiT (v1), ViT-B/16, 200 epochs (supplementary table, BEiT: 80.9):
# mmpretrain's BEiT recipe (batch 2048, AdamW (0.9, 0.999), lr 1.5e-3,
# wd 0.05, 10 warmup epochs, cosine to 1e-5, gradient clipping 3.0, the
# two-view crop for the tokenizer) at 200 epochs, with the mask drawn on the
# device (BlockwiseMaskGenerator) instead of in the pipeline.
_base_ = 'mmpretrain::beit/beit_beit-base-p16_8xb256-amp-coslr-300e_in1k.py'
custom_imports = dict(imports=['hpm_mm'], allow_failed_imports=False)

# BEiT (v1) with the project's ViT-B/16 (MaskTokenViT): block-wise masking of
# 75 of 196 patches (mask_ratio 0.382), the frozen DALL-E tokenizer on a
# 112-px view gives one of 8192 visual tokens per patch, a linear classifier
# on the masked patches (cross-entropy). BEiT's encoder also used a shared
# relative position bias and layer scale 0.1; here it is HPM's (absolute
# sin-cos positions, no layer scale), so only the pretext task differs and
# every checkpoint goes through the same converters.
# The DALL-E weights: mmpretrain's converted encoder (dalle_encoder.pth from
# download.openmmlab.com/mmselfsup/1.x/target_generator_ckpt/), read from the
# local path below (docs/targets.md); nothing is downloaded.
model = dict(
    _delete_=True,
    type='HPMBEiT',
    backbone=dict(
        type='MaskTokenViT',
        arch='b',
        img_size=224,
        patch_size=16,
        drop_path_rate=0.1),
    head=dict(
        type='HPMBEiTHead', embed_dims=768, num_embed=8192, loss_pred=None),
    target_generator=dict(
        type='DALL-E',
        init_cfg=dict(
            type='Pretrained',
            checkpoint='data/pretrained/dalle_encoder.pth')),
    mask_generator=dict(
        type='BlockwiseMaskGenerator', mask_ratio=0.382, min_num_patches=16),
    init_cfg=[
        dict(type='Xavier', layer='Linear', distribution='uniform'),
        dict(type='Constant', layer='LayerNorm', val=1.0, bias=0.0)
    ])

train_dataloader = dict(
    dataset=dict(pipeline=[
        dict(type='LoadImageFromFile'),
        dict(
            type='ColorJitter',
            brightness=0.4,
            contrast=0.4,
            saturation=0.4,
            hue=0.),
        dict(type='RandomFlip', prob=0.5, direction='horizontal'),
        dict(
            type='RandomResizedCropAndInterpolationWithTwoPic',
            size=224,
            second_size=112,
            interpolation='bicubic',
            second_interpolation='lanczos',
            scale=(0.08, 1.0)),
        dict(type='PackInputs')
    ]))

optim_wrapper = dict(
    type='GuardedAmpOptimWrapper',
    constructor='FrozenAwareOptimWrapperConstructor',
    paramwise_cfg=dict(custom_keys={'.mask_token': dict(decay_mult=0.0)}))
param_scheduler = [
    dict(
        type='LinearLR',
        start_factor=1e-4,
        by_epoch=True,
        begin=0,
        end=10,
        convert_to_iter_based=True),
    dict(  # ends with the run (train_cfg.max_epochs)
        type='CosineAnnealingLR',
        eta_min=1e-5,
        by_epoch=True,
        begin=10,
        convert_to_iter_based=True)
]
train_cfg = dict(max_epochs=200)
find_unused_parameters = False
default_hooks = dict(
    # the logged scalars read back from the GPU once per log interval
    runtime_info=dict(type='DeferredRuntimeInfoHook'),
    checkpoint=dict(
        type='AtomicCheckpointHook', interval=10, max_keep_ckpts=3))
resume = True

# hpm_mm's runner: its run policy (precision, run length, one run per work
# dir, resume checks) whoever builds it (hpm_mm.engine.runner)
runner_type = 'HPMRunner'
