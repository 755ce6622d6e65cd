# ADE20k UperNet with an HPM ViT-L/16 (paper Tab. 7): lr 2e-5 (paper),
# features of blocks [7, 11, 15, 23], layer decay 0.95 (mmseg's BEiT-L
# recipe; the paper does not state it), drop path 0.1, 160k iterations.
#   python tools/model_converters/hpm2backbone.py work_dirs/.../epoch_200.pth \
#       pretrain/hpm_vit-large-p16_mmseg.pth --target mmseg --img-size 512
_base_ = './upernet_hpm-vit-base-p16_8xb2-amp-160k_ade20k-512x512.py'

model = dict(
    pretrained='pretrain/hpm_vit-large-p16_mmseg.pth',
    backbone=dict(
        embed_dims=1024,
        num_layers=24,
        num_heads=16,
        out_indices=[7, 11, 15, 23]),
    neck=dict(embed_dim=1024),
    decode_head=dict(in_channels=[1024, 1024, 1024, 1024], channels=1024),
    auxiliary_head=dict(in_channels=1024))
optim_wrapper = dict(
    optimizer=dict(lr=2e-5),
    paramwise_cfg=dict(num_layers=24, layer_decay_rate=0.95))
