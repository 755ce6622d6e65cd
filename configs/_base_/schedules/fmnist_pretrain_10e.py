# Optimizer, schedule and runtime of the Fashion-MNIST pretraining configs
# (HPM and its MAE twin): the ImageNet recipe (hpm_pretrain_amp.py: AdamW
# (0.9, 0.95), wd 0.05 without decay on norms/biases/tokens, clip 5.0) in
# fp32, with a 10x larger base lr for the tiny ViT and short schedule
# (1.5e-4 * 256 / 256 * 10), 1 warmup epoch then cosine.
_base_ = ['mmpretrain::_base_/default_runtime.py', './hpm_pretrain_amp.py']

optim_wrapper = dict(
    _delete_=True,
    type='GuardedOptimWrapper',
    # the EMA teacher's frozen parameters: one log line, not one warning each
    constructor='FrozenAwareOptimWrapperConstructor',
    clip_grad=dict(max_norm=5.0),
    optimizer=dict(
        type='AdamW', lr=1.5e-3, betas=(0.9, 0.95), weight_decay=0.05),
    paramwise_cfg={{_base_.optim_wrapper.paramwise_cfg}})  # ImageNet's

# a linear warm-up over the first epoch, chained with a cosine over the
# whole run (as mmdet's schedules chain theirs); the cosine has no `end` or
# `T_max`: mmengine ends it with the run (train_cfg.max_epochs), so a run of
# any length, one epoch included, decays fully
param_scheduler = [
    dict(
        type='LinearLR',
        start_factor=1e-3,
        by_epoch=True,
        begin=0,
        end=1,
        convert_to_iter_based=True),
    dict(
        type='CosineAnnealingLR',
        eta_min=1e-5,
        by_epoch=True,
        begin=0,
        convert_to_iter_based=True)
]
train_cfg = dict(type='EpochBasedTrainLoop', max_epochs=10)
auto_scale_lr = dict(base_batch_size=256)

default_hooks = dict(
    # the logged scalars read back from the GPU once per log interval
    runtime_info=dict(type='DeferredRuntimeInfoHook'),
    logger=dict(type='LoggerHook', interval=20),
    checkpoint=dict(type='AtomicCheckpointHook', interval=1, max_keep_ckpts=2))
env_cfg = dict(dist_cfg=dict(backend='gloo'))
randomness = dict(seed=0, diff_rank_seed=True)
