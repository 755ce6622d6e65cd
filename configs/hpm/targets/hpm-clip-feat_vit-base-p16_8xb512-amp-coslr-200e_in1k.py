# Tab. 1 "CLIP features", L_pred + learn to mask (fine-tune 83.58; Tab. 6
# COCO 46.57 AP box / 41.96 AP mask, ADE20k 47.35 mIoU): the target is a
# frozen CLIP ViT-B/16 image encoder's patch tokens after ln_post and the
# projection (512-d, MILAN's target), l2-normalised MSE. Images are
# normalised with CLIP's mean/std, as MILAN. Weights from the local path
# below (docs/targets.md); nothing is downloaded.
_base_ = '../hpm_vit-base-p16_8xb512-amp-coslr-200e_in1k.py'

data_preprocessor = dict(
    mean=[122.7709383, 116.7460125, 104.09373615],
    std=[68.5005327, 66.6321579, 70.32316305])
model = dict(
    target_generator=dict(
        type='CLIPFeatureTarget',
        checkpoint='data/pretrained/clip_vit-base-p16.pth'),
    neck=dict(predict_feature_dim=512),
    head=dict(_delete_=True, type='HPMFeaturePretrainHead'))
