# Linear probing of an HPM ViT-B/16 (paper Tab. S3, MoCo v3 protocol):
# SGD momentum 0.9, wd 0, lr 1e-3 x 4096/256, batch 4096, 100 epochs,
# warmup 10, cosine; BatchNorm without affine before the linear layer;
# global-average-pooled features of the frozen encoder. (The authors report
# that LARS, mmpretrain's MAE default, gave ~10% at their batch size.)
_base_ = 'mmpretrain::mae/benchmarks/vit-base-p16_8xb2048-linear-coslr-90e_in1k.py'

# data: 8 GPUs x 512
train_dataloader = dict(batch_size=512)

# model: frozen encoder, GAP features (the paper's choice for all protocols)
model = dict(
    backbone=dict(out_type='avg_featmap', frozen_stages=12),
    neck=dict(type='ClsBatchNormNeck', input_features=768, affine=False))

# optimizer
optim_wrapper = dict(
    _delete_=True,
    type='GuardedAmpOptimWrapper',
    optimizer=dict(
        type='SGD', lr=1e-3 * 4096 / 256, momentum=0.9, weight_decay=0.0))

# schedule
param_scheduler = [
    dict(
        type='LinearLR',
        start_factor=1e-4,
        by_epoch=True,
        begin=0,
        end=10,
        convert_to_iter_based=True),
    dict(
        type='CosineAnnealingLR',
        T_max=90,
        by_epoch=True,
        begin=10,
        end=100,
        eta_min=0.0,
        convert_to_iter_based=True)
]
train_cfg = dict(by_epoch=True, max_epochs=100)
auto_scale_lr = dict(base_batch_size=4096)

# runtime: checkpoints written atomically (a kill never loses the last one)
default_hooks = dict(checkpoint=dict(type='AtomicCheckpointHook'))

# hpm_mm's runner: its run policy (precision, run length, one run per work
# dir, resume checks) whoever builds it (hpm_mm.engine.runner)
runner_type = 'HPMRunner'
