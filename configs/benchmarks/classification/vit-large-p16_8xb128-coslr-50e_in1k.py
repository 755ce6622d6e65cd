# End-to-end fine-tuning of an HPM ViT-L/16 (paper Tab. S2): as ViT-B but
# 50 epochs; layer decay 0.8 as in Tab. S2 (MAE's recipe uses 0.75).
_base_ = 'mmpretrain::mae/benchmarks/vit-large-p16_8xb128-coslr-50e_in1k.py'

optim_wrapper = dict(
    type='GuardedAmpOptimWrapper',  # skips non-finite steps
    paramwise_cfg=dict(layer_decay_rate=0.8))

# runtime: checkpoints written atomically (a kill never loses the last one)
default_hooks = dict(checkpoint=dict(type='AtomicCheckpointHook'))
