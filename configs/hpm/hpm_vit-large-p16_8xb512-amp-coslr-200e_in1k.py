# HPM ViT-L/16, 200 epochs (paper Tab. S1: warmup 40 epochs for ViT-L).
_base_ = [
    '../_base_/models/hpm_vit-large-p16.py',
    '../_base_/schedules/hpm_pretrain_amp.py',
    '../_base_/datasets/imagenet_bs512_mae_reduced_decode.py',
    'mmpretrain::_base_/default_runtime.py',
]

# schedule: the base's, warmup 40 epochs (the cosine ends with the run)
param_scheduler = [
    dict(
        type='LinearLR',
        start_factor=1e-4,
        by_epoch=True,
        begin=0,
        end=40,
        convert_to_iter_based=True),
    dict(
        type='CosineAnnealingLR',
        eta_min=0.,
        by_epoch=True,
        begin=40,
        convert_to_iter_based=True)
]

# runtime
default_hooks = dict(
    # the logged scalars read back from the GPU once per log interval
    runtime_info=dict(type='DeferredRuntimeInfoHook'),
    logger=dict(type='LoggerHook', interval=50),
    checkpoint=dict(
        type='AtomicCheckpointHook', interval=10, max_keep_ckpts=3))
randomness = dict(seed=0, diff_rank_seed=True)
resume = True
