# End-to-end fine-tuning of an HPM ViT-B/16 (paper Tab. S2): AdamW
# (0.9, 0.999), lr 5e-4 x 1024/256, wd 0.05, layer decay 0.8, 100 epochs,
# warmup 5, RandAug(9, 0.5), mixup 0.8, cutmix 1.0, label smoothing 0.1,
# drop path 0.1, global average pooling + fc_norm. Everything but the layer
# decay (0.65 in MAE's recipe) comes from mmpretrain's MAE benchmark.
# Set the checkpoint with
#   --cfg-options model.backbone.init_cfg.checkpoint=work_dirs/.../epoch_200.pth
_base_ = 'mmpretrain::mae/benchmarks/vit-base-p16_8xb128-coslr-100e_in1k.py'

optim_wrapper = dict(
    type='GuardedAmpOptimWrapper',  # skips non-finite steps
    paramwise_cfg=dict(layer_decay_rate=0.8))

# runtime: checkpoints written atomically (a kill never loses the last one)
default_hooks = dict(checkpoint=dict(type='AtomicCheckpointHook'))

# hpm_mm's runner: its run policy (precision, run length, one run per work
# dir, resume checks) whoever builds it (hpm_mm.engine.runner)
runner_type = 'HPMRunner'
