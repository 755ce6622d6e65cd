# End-to-end fine-tuning of the small Fashion-MNIST encoder, the Tab. S2
# protocol scaled down: AdamW, layer decay 0.8, drop path 0.1, label
# smoothing 0.1, mixup 0.8 / cutmix 1.0, global average pooling + fc_norm.
# (RandAugment is left out: its colour policies need 3-channel images.)
_base_ = './vit-mini-p4_1xb256-linear-coslr-10e_fmnist.py'

# data: the augmented training images (the linear probe uses none)
train_dataloader = dict(
    batch_size=128, dataset=dict(pipeline={{_base_.train_pipeline}}))

# model
model = dict(
    backbone=dict(frozen_stages=-1, final_norm=False, drop_path_rate=0.1),
    neck=None,
    head=dict(
        loss=dict(
            _delete_=True,
            type='LabelSmoothLoss',
            label_smooth_val=0.1,
            mode='original'),
        init_cfg=[dict(type='TruncNormal', layer='Linear', std=2e-5)]),
    train_cfg=dict(augments=[
        dict(type='Mixup', alpha=0.8),
        dict(type='CutMix', alpha=1.0)
    ]))

# optimizer: lr 5e-4 x 128/256 x 4 (short schedule), layer decay 0.8
optim_wrapper = dict(
    _delete_=True,
    type='GuardedOptimWrapper',
    optimizer=dict(
        type='AdamW', lr=1e-3, weight_decay=0.05, betas=(0.9, 0.999)),
    constructor='LearningRateDecayOptimWrapperConstructor',
    paramwise_cfg=dict(
        layer_decay_rate=0.8,
        custom_keys={
            '.ln': dict(decay_mult=0.0),
            '.bias': dict(decay_mult=0.0),
            '.cls_token': dict(decay_mult=0.0),
            '.pos_embed': dict(decay_mult=0.0)
        }))
