# mmpretrain's MAE with the mini ViT (vit-mini-p4.py): the baseline twin of
# hpm_vit-mini-p4.py (random masking inside MAEViT, one decoder), with HPM's
# pixel targets (norm_pix off, as in the authors' scripts).
_base_ = ['mmpretrain::_base_/models/mae_vit-base-p16.py', './vit-mini-p4.py']

model = dict(
    backbone=dict(
        _delete_=True,
        type='MAEViT',
        arch={{_base_.vit_mini.arch}},
        img_size={{_base_.vit_mini.img_size}},
        patch_size={{_base_.vit_mini.patch_size}},
        mask_ratio=0.75,
        patch_cfg=dict(in_channels={{_base_.vit_mini.in_channels}})),
    neck={{_base_.vit_mini.decoder}},
    head=dict(
        norm_pix=False,
        patch_size={{_base_.vit_mini.patch_size}},
        in_channels={{_base_.vit_mini.in_channels}}))
