# HPM on SimMIM with the main job's mini ViT and data (the check on the
# embedded Fashion-MNIST): MaskTokenViT, linear decoder to 1 channel, L1,
# 2-block 128-d loss predictor, mask ratio 0.6, alpha 0 -> 0.5, the main
# job's 400-step teacher momentum.
_base_ = '../hpm_vit-mini-p4_1xb256-coslr-10e_fmnist.py'

model = dict(
    _delete_=True,
    type='HPMSimMIM',
    backbone=dict(
        type='MaskTokenViT',
        arch={{_base_.vit_mini.arch}},
        img_size={{_base_.vit_mini.img_size}},
        patch_size={{_base_.vit_mini.patch_size}},
        patch_cfg=dict(in_channels={{_base_.vit_mini.in_channels}})),
    neck=dict(
        type='HPMSimMIMDecoder',
        in_channels={{_base_.vit_mini.arch.embed_dims}},
        encoder_stride={{_base_.vit_mini.patch_size}},
        out_channels={{_base_.vit_mini.in_channels}}),
    head=dict(
        type='HPMSimMIMHead',
        patch_size={{_base_.vit_mini.patch_size}},
        in_channels={{_base_.vit_mini.in_channels}}),
    predictor=dict(
        type='HPMLossPredictor',
        embed_dim={{_base_.vit_mini.arch.embed_dims}},
        predictor_embed_dim=128,
        predictor_depth=2,
        predictor_num_heads=4),
    mask_generator=dict(
        type='HPMMaskGenerator', mask_ratio=0.6, alpha_0=0., alpha_T=0.5),
    teacher=dict(
        type='EMATeacher',
        momentum=0.1,
        end_momentum=0.025,
        momentum_epochs=None),
    init_cfg=[
        dict(type='Xavier', layer='Linear', distribution='uniform'),
        dict(type='Constant', layer='LayerNorm', val=1.0, bias=0.0)
    ])

# kNN after training; the hard-patch pictures are drawn for HPM's decoder only
custom_hooks = [
    dict(type='HPMScheduleHook', by_epoch=True),
    {{_base_.knn_hook}},
]
