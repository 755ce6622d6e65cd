# Linear probe of the small Fashion-MNIST encoder, the Tab. S3 protocol
# scaled down: frozen encoder, global average pooling, BatchNorm without
# affine, linear layer; SGD momentum 0.9, wd 0, cosine with 1 warmup epoch.
# The training images are not augmented (ImageNet's probe crops and flips):
# at 28 px with 4-px patches the 2-px padded crop shifts the patch grid by
# half a patch, which cost the probe 3.4 points on the 100-epoch MAE
# encoder (configs/hpm/README.md), and without it this probe is the one
# that hpm_mm.evaluation.linear_probe runs on cached features.
# Set the checkpoint with
#   --cfg-options model.backbone.init_cfg.checkpoint=work_dirs/.../epoch_10.pth
custom_imports = dict(imports=['hpm_mm'], allow_failed_imports=False)
_base_ = [
    '../../../_base_/datasets/fashion_mnist_cls.py',
    '../../../_base_/models/vit-mini-p4.py',
    'mmpretrain::_base_/default_runtime.py',
]

# data: the 28x28 images as they are, in training too
train_dataloader = dict(dataset=dict(pipeline={{_base_.test_pipeline}}))

# model: the pretrained mini ViT, frozen
model = dict(
    type='ImageClassifier',
    backbone=dict(
        type='VisionTransformer',
        arch={{_base_.vit_mini.arch}},
        img_size={{_base_.vit_mini.img_size}},
        patch_size={{_base_.vit_mini.patch_size}},
        in_channels={{_base_.vit_mini.in_channels}},
        frozen_stages=4,
        out_type='avg_featmap',
        final_norm=True,
        init_cfg=dict(type='Pretrained', checkpoint='', prefix='backbone.')),
    neck=dict(
        type='ClsBatchNormNeck',
        input_features={{_base_.vit_mini.arch.embed_dims}},
        affine=False),
    head=dict(
        type='LinearClsHead',
        num_classes=10,
        in_channels={{_base_.vit_mini.arch.embed_dims}},
        loss=dict(type='CrossEntropyLoss'),
        init_cfg=[dict(type='TruncNormal', layer='Linear', std=0.01)]))

# optimizer: lr 1e-3 x 256/256 is the paper's base; a 10-epoch probe of a
# tiny model needs a larger one
optim_wrapper = dict(
    type='GuardedOptimWrapper',
    optimizer=dict(type='SGD', lr=0.1, momentum=0.9, weight_decay=0.0))

# schedule
max_epochs = 10
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
        T_max=max_epochs - 1,
        by_epoch=True,
        begin=1,
        end=max_epochs,
        eta_min=0.,
        convert_to_iter_based=True)
]
train_cfg = dict(by_epoch=True, max_epochs=max_epochs, val_interval=5)
val_cfg = dict()
test_cfg = dict()

# runtime
default_hooks = dict(
    logger=dict(type='LoggerHook', interval=50),
    checkpoint=dict(type='AtomicCheckpointHook', interval=5, max_keep_ckpts=1))
env_cfg = dict(dist_cfg=dict(backend='gloo'))
randomness = dict(seed=0)

# hpm_mm's runner: its run policy (precision, run length, one run per work
# dir, resume checks) whoever builds it (hpm_mm.engine.runner)
runner_type = 'HPMRunner'
