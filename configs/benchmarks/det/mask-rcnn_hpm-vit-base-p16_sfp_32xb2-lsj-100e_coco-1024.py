# The ViTDet recipe with an HPM ViT-B/16: large-scale jitter (0.1-2.0) at
# 1024x1024, 100 epochs (mmdet's lsj-100e: 25 epochs of a 4x repeated COCO,
# lr steps at effective epochs 88 and 96), batch 64 (32 GPUs x 2); model as
# the 1x config, AdamW lr 1e-4 x 64/16, wd 0.1, layer decay 0.7.
_base_ = [
    '../../_base_/models/mask-rcnn_hpm-vit-base-p16_sfp.py',
    'mmdet::common/lsj-100e_coco-instance.py',
]

# optimizer
optim_wrapper = dict(
    _delete_=True,
    type='GuardedAmpOptimWrapper',
    constructor='LayerDecayOptimWrapperConstructor',
    paramwise_cfg=dict(num_layers=12, layer_decay_rate=0.7),
    optimizer=dict(
        type='AdamW', lr=4e-4, betas=(0.9, 0.999), weight_decay=0.1))

# runtime: checkpoints written atomically (a kill never loses the last one)
default_hooks = dict(checkpoint=dict(type='AtomicCheckpointHook'))
