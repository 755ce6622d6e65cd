# HPM ViT-B/16, 200 epochs on ImageNet-1k (paper Tab. S1; Tab. 1/3/4/5 rows
# "HPM", fine-tune 83.0 reported after 100 epochs of fine-tuning).
_base_ = [
    '../_base_/models/hpm_vit-base-p16.py',
    '../_base_/schedules/hpm_pretrain_amp.py',
    '../_base_/datasets/imagenet_bs512_mae_reduced_decode.py',
    'mmpretrain::_base_/default_runtime.py',
]

# runtime
default_hooks = dict(
    # the logged scalars read back from the GPU once per log interval
    runtime_info=dict(type='DeferredRuntimeInfoHook'),
    logger=dict(type='LoggerHook', interval=50),
    checkpoint=dict(
        type='AtomicCheckpointHook', interval=10, max_keep_ckpts=3))
randomness = dict(seed=0, diff_rank_seed=True)
resume = True  # auto-resume from the latest checkpoint in work_dir
