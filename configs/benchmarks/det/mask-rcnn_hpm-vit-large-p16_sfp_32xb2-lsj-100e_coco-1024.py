# The ViTDet LSJ 100-epoch recipe with an HPM ViT-L/16 (global blocks
# 5/11/17/23, drop path 0.4, layer decay 0.8 as ViTDet's ViT-L).
_base_ = './mask-rcnn_hpm-vit-base-p16_sfp_32xb2-lsj-100e_coco-1024.py'

model = dict(
    backbone=dict(
        arch=dict(
            embed_dims=1024,
            num_layers=24,
            num_heads=16,
            feedforward_channels=4096,
            global_attn_indexes=[5, 11, 17, 23]),
        drop_path_rate=0.4,
        init_cfg=dict(checkpoint='pretrain/hpm_vit-large-p16_mmdet.pth')),
    neck=dict(in_channels=1024))
optim_wrapper = dict(paramwise_cfg=dict(num_layers=24, layer_decay_rate=0.8))
