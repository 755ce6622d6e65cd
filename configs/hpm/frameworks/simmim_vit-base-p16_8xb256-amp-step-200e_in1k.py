# Plain SimMIM, ViT-B/16, 200 epochs (the baseline of hpm-simmim_*): SimMIM's
# ViT-B recipe (simmim_pretrain__vit_base__img224__800ep) on the 200-epoch
# budget of the paper's ablations: batch 2048, AdamW (0.9, 0.999), wd 0.05,
# lr 1e-4 x 2048 / 512, 10 warmup epochs, x0.1 at 7/8 of training, gradient
# clipping 5.0, crops of scale (0.67, 1).
_base_ = [
    '../../_base_/models/simmim_vit-base-p16.py',
    '../../_base_/schedules/hpm_pretrain_amp.py',
    'mmpretrain::_base_/datasets/imagenet_bs512_mae.py',
    'mmpretrain::_base_/default_runtime.py',
]

train_dataloader = dict(
    batch_size=256,
    dataset=dict(pipeline=[
        dict(type='LoadImageFromFile'),
        dict(
            type='RandomResizedCrop',
            scale=224,
            crop_ratio_range=(0.67, 1.0),
            aspect_ratio_range=(3. / 4., 4. / 3.),
            backend='pillow',
            interpolation='bicubic'),
        dict(type='RandomFlip', prob=0.5),
        dict(type='PackInputs')
    ]))

# HPM's wrapper, clipping at 5.0 and no-decay keys; SimMIM's optimizer
optim_wrapper = dict(
    optimizer=dict(lr=1e-4 * 2048 / 512, betas=(0.9, 0.999), eps=1e-8))
max_epochs = 200
param_scheduler = [
    dict(
        type='LinearLR',
        start_factor=5e-7 / 4e-4,
        by_epoch=True,
        begin=0,
        end=10,
        convert_to_iter_based=True),
    dict(
        type='MultiStepLR',
        milestones=[max_epochs * 7 // 8],
        gamma=0.1,
        by_epoch=True,
        begin=10,
        end=max_epochs)
]
train_cfg = dict(max_epochs=max_epochs)
auto_scale_lr = dict(base_batch_size=2048)

default_hooks = dict(
    # the logged scalars read back from the GPU once per log interval
    runtime_info=dict(type='DeferredRuntimeInfoHook'),
    logger=dict(type='LoggerHook', interval=50),
    checkpoint=dict(
        type='AtomicCheckpointHook', interval=10, max_keep_ckpts=3))
randomness = dict(seed=0, diff_rank_seed=True)
resume = True
