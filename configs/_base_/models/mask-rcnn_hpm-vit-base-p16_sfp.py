# Mask R-CNN with a ViTDet-style HPM ViT-B/16 backbone and ViTDet's heads
# (detectron2's mask_rcnn_vitdet_b: a 2-conv RPN head, a 4conv1fc box head
# and a 4-conv mask head, their convs with LayerNorm). Only the model: the
# leaf configs in configs/benchmarks/det/ add data, schedule and optimizer.
_base_ = 'mmdet::_base_/models/mask-rcnn_r50_fpn.py'
custom_imports = dict(
    imports=['hpm_mm.det', 'mmpretrain.models'], allow_failed_imports=False)

# LayerNorm over the channels of NCHW maps (detectron2's LayerNorm, eps 1e-6)
head_norm_cfg = dict(type='mmpretrain.LN2d', eps=1e-6)
model = dict(
    data_preprocessor=dict(
        pad_size_divisor=32,
        batch_augments=[
            dict(type='BatchFixedSizePad', size=(1024, 1024), pad_mask=True)
        ]),
    backbone=dict(
        _delete_=True,
        type='mmpretrain.ViTSAM',
        arch=dict(
            embed_dims=768,
            num_layers=12,
            num_heads=12,
            feedforward_channels=3072,
            global_attn_indexes=[2, 5, 8, 11]),
        img_size=(1024, 1024)[0],
        patch_size=16,
        window_size=14,
        use_rel_pos=True,
        out_channels=0,  # no SAM neck: plain stride-16 features
        out_type='featmap',
        drop_path_rate=0.1,
        init_cfg=dict(
            type='Pretrained',
            checkpoint='pretrain/hpm_vit-base-p16_mmdet.pth')),
    neck=dict(
        _delete_=True,
        type='SimpleFeaturePyramid',
        in_channels=768,
        out_channels=256,
        num_outs=5,
        norm_cfg=head_norm_cfg),
    rpn_head=dict(num_convs=2),
    roi_head=dict(
        bbox_head=dict(
            type='Shared4Conv1FCBBoxHead',
            conv_out_channels=256,
            norm_cfg=head_norm_cfg),
        mask_head=dict(norm_cfg=head_norm_cfg)))
