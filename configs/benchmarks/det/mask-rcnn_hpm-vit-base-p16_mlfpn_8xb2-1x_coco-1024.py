# The multi-level variant the paper's text describes (after the MAE paper's
# detection transfer): the 12 blocks in 4 subsets, the feature maps at the
# end of each subset (blocks 2, 5, 8, 11; all stride 16) brought to strides
# 4 / 8 / 16 / 32 by transposed convs / identity / max pooling (mmseg's
# Feature2Pyramid, as mmseg's MAE UperNet does), then mmdet's FPN (5 levels).
# Everything else — backbone, ViTDet heads, data, schedule, optimizer — as the
# Tab. 6 config it inherits, so the two differ only in how the pyramid is
# built.
_base_ = './mask-rcnn_hpm-vit-base-p16_sfp_8xb2-1x_coco-1024.py'

model = dict(
    backbone=dict(out_indices=[2, 5, 8, 11]),
    neck=[
        dict(
            type='mmseg.Feature2Pyramid',
            embed_dim=768,
            rescales=[4, 2, 1, 0.5],
            norm_cfg=dict(type='SyncBN', requires_grad=True)),
        dict(
            type='FPN',
            in_channels=[768, 768, 768, 768],
            out_channels=256,
            num_outs=5)
    ])
