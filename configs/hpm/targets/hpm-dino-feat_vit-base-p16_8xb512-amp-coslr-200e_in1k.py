# Tab. 1 "DINO features", L_pred + learn to mask (fine-tune 84.13): the
# target is a frozen DINO ViT-B/16's last-layer patch tokens (768-d, after
# its final norm), l2-normalised MSE. The weights are read from the local
# path below (see docs/targets.md for where they come from and the
# conversion); nothing is downloaded.
_base_ = '../hpm_vit-base-p16_8xb512-amp-coslr-200e_in1k.py'

model = dict(
    target_generator=dict(
        type='ViTFeatureTarget',
        arch='b',
        patch_size=16,
        checkpoint='data/pretrained/dino_vit-base-p16_mmpretrain.pth'),
    neck=dict(predict_feature_dim=768),
    head=dict(_delete_=True, type='HPMFeaturePretrainHead'))
