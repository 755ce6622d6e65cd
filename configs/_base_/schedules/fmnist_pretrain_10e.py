# Optimizer, schedule and runtime of the Fashion-MNIST pretraining configs
# (HPM and its MAE twin): AdamW as in the paper with a 10x larger base lr
# for the tiny ViT and short schedule (1.5e-4 * 256 / 256 * 10), gradient
# clipping at 5.0, 1 warmup epoch then cosine; non-finite steps skipped.
_base_ = 'mmpretrain::_base_/default_runtime.py'

optim_wrapper = dict(
    type='GuardedOptimWrapper',
    clip_grad=dict(max_norm=5.0),
    optimizer=dict(
        type='AdamW', lr=1.5e-3, betas=(0.9, 0.95), weight_decay=0.05),
    paramwise_cfg=dict(
        custom_keys={
            'ln': dict(decay_mult=0.0),
            'norm': dict(decay_mult=0.0),
            'bias': dict(decay_mult=0.0),
            'pos_embed': dict(decay_mult=0.),
            'mask_token': dict(decay_mult=0.),
            'cls_token': dict(decay_mult=0.)
        }))

max_epochs = 10
param_scheduler = [
    dict(type='LinearLR', start_factor=1e-3, by_epoch=True, begin=0, end=1,
         convert_to_iter_based=True),
    dict(type='CosineAnnealingLR', T_max=max_epochs - 1, eta_min=1e-5,
         by_epoch=True, begin=1, end=max_epochs, convert_to_iter_based=True)
]
train_cfg = dict(type='EpochBasedTrainLoop', max_epochs=max_epochs)
auto_scale_lr = dict(base_batch_size=256)

default_hooks = dict(
    logger=dict(type='LoggerHook', interval=20),
    checkpoint=dict(type='AtomicCheckpointHook', interval=1, max_keep_ckpts=2))
env_cfg = dict(dist_cfg=dict(backend='gloo'))
randomness = dict(seed=0, diff_rank_seed=True)
