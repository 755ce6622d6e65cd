# The multi-level variant with an HPM ViT-L/16: subsets end at blocks 5, 11,
# 17, 23 (the global-attention blocks); otherwise the ViT-L 1x config.
_base_ = './mask-rcnn_hpm-vit-large-p16_sfp_8xb2-1x_coco-1024.py'

model = dict(
    backbone=dict(out_indices=[5, 11, 17, 23]),
    neck=[
        dict(
            type='mmseg.Feature2Pyramid',
            embed_dim=1024,
            rescales=[4, 2, 1, 0.5],
            norm_cfg=dict(type='SyncBN', requires_grad=True)),
        dict(
            type='FPN',
            in_channels=[1024, 1024, 1024, 1024],
            out_channels=256,
            num_outs=5)
    ])
