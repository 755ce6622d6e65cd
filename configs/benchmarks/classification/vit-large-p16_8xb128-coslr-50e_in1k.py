# End-to-end fine-tuning of an HPM ViT-L/16 (paper Tab. S2, the authors'
# finetune_large.sh): as ViT-B but 50 epochs. mmpretrain's MAE ViT-L recipe
# differs in three numbers, set here: base lr 5e-4 (MAE: 1e-3) x 1024/256,
# drop path 0.1 (MAE: 0.2), layer decay 0.8 (MAE: 0.75).
# Set the checkpoint with
#   --cfg-options model.backbone.init_cfg.checkpoint=work_dirs/.../epoch_800.pth
_base_ = 'mmpretrain::mae/benchmarks/vit-large-p16_8xb128-coslr-50e_in1k.py'

# model
model = dict(backbone=dict(drop_path_rate=0.1))

# optimizer
optim_wrapper = dict(
    type='GuardedAmpOptimWrapper',  # skips non-finite steps
    optimizer=dict(lr=5e-4 * 1024 / 256),
    paramwise_cfg=dict(layer_decay_rate=0.8))

# runtime: checkpoints written atomically (a kill never loses the last one)
default_hooks = dict(checkpoint=dict(type='AtomicCheckpointHook'))

# hpm_mm's runner: its run policy (precision, run length, one run per work
# dir, resume checks) whoever builds it (hpm_mm.engine.runner)
runner_type = 'HPMRunner'
