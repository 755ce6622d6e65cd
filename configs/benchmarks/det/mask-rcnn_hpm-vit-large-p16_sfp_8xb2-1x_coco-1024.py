# As the ViT-B config, with an HPM ViT-L/16 (24 blocks, global attention in
# blocks [5, 11, 17, 23]), drop path 0.4 and layer decay 0.8 (ViTDet's ViT-L).
#   python tools/model_converters/hpm2backbone.py work_dirs/.../epoch_200.pth \
#       pretrain/hpm_vit-large-p16_mmdet.pth --target mmdet --img-size 1024
_base_ = './mask-rcnn_hpm-vit-base-p16_sfp_8xb2-1x_coco-1024.py'

pretrained = 'pretrain/hpm_vit-large-p16_mmdet.pth'
model = dict(
    backbone=dict(
        arch=dict(
            embed_dims=1024,
            num_layers=24,
            num_heads=16,
            feedforward_channels=4096,
            global_attn_indexes=[5, 11, 17, 23]),
        drop_path_rate=0.4,
        init_cfg=dict(checkpoint=pretrained)),
    neck=dict(in_channels=1024))
optim_wrapper = dict(paramwise_cfg=dict(num_layers=24, layer_decay_rate=0.8))
