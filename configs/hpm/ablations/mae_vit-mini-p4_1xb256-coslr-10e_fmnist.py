# Plain mmpretrain MAE with the same mini ViT, decoder, data, optimizer and
# schedule as the Fashion-MNIST HPM config: the baseline of the small study.
_base_ = ['../hpm_vit-mini-p4_1xb256-coslr-10e_fmnist.py']

# model: mmpretrain's MAE (random masking inside MAEViT, one decoder)
model = dict(
    _delete_=True,
    type='MAE',
    backbone=dict(
        type='MAEViT',
        arch=dict(
            embed_dims=192, num_layers=4, num_heads=3,
            feedforward_channels=768),
        img_size=32,
        patch_size=4,
        mask_ratio=0.75,
        patch_cfg=dict(in_channels=1)),
    neck=dict(
        type='MAEPretrainDecoder',
        num_patches=64,
        patch_size=4,
        in_chans=1,
        embed_dim=192,
        decoder_embed_dim=128,
        decoder_depth=2,
        decoder_num_heads=4,
        mlp_ratio=4.),
    head=dict(
        type='MAEPretrainHead',
        norm_pix=False,
        patch_size=4,
        in_channels=1,
        loss=dict(type='PixelReconstructionLoss', criterion='L2')),
    data_preprocessor={{_base_.data_preprocessor}},
    init_cfg=[
        dict(type='Xavier', layer='Linear', distribution='uniform'),
        dict(type='Constant', layer='LayerNorm', val=1.0, bias=0.0)
    ])

# runtime: no HPM schedule hook; keep the kNN evaluation
custom_hooks = [{{_base_.knn_hook}}]
