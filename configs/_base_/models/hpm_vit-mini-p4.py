# HPM with the mini ViT (vit-mini-p4.py) and HPM's ViT-B recipe otherwise.
_base_ = ['./hpm_vit-base-p16.py', './vit-mini-p4.py']

model = dict(
    backbone=dict(
        _delete_=True,
        type='HPMViT',
        arch={{_base_.vit_mini.arch}},
        img_size={{_base_.vit_mini.img_size}},
        patch_size={{_base_.vit_mini.patch_size}},
        patch_cfg=dict(in_channels={{_base_.vit_mini.in_channels}})),
    neck={{_base_.vit_mini.decoder}},
    head=dict(
        patch_size={{_base_.vit_mini.patch_size}},
        in_channels={{_base_.vit_mini.in_channels}}))
