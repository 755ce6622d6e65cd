# Tab. 1 row 1 / Tab. 5 'none': plain MAE (mmpretrain's MAE) with the same
# 200-epoch schedule, augmentation and targets as the HPM configs (82.23).
_base_ = [
    'mmpretrain::_base_/models/mae_vit-base-p16.py',
    '../../_base_/schedules/hpm_pretrain_amp.py',
    '../../_base_/datasets/imagenet_bs512_mae_reduced_decode.py',
    'mmpretrain::_base_/default_runtime.py',
]

# model: same pixel targets as HPM (norm_pix off in the authors' scripts)
model = dict(head=dict(norm_pix=False))

# runtime
default_hooks = dict(
    # the logged scalars read back from the GPU once per log interval
    runtime_info=dict(type='DeferredRuntimeInfoHook'),
    logger=dict(type='LoggerHook', interval=50),
    checkpoint=dict(
        type='AtomicCheckpointHook', interval=10, max_keep_ckpts=3))
randomness = dict(seed=0, diff_rank_seed=True)
resume = True
