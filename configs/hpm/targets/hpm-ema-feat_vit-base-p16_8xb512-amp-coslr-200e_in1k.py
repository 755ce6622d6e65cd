# Tab. 1 "EMA features", L_pred + learn to mask (fine-tune 83.47): the
# reconstructor predicts the EMA teacher's encoder features of the full image
# (BootMAE's target, 768-d, from the teacher's scoring pass), l2-normalised
# MSE per patch, which the loss predictor learns to rank.
_base_ = '../hpm_vit-base-p16_8xb512-amp-coslr-200e_in1k.py'

model = dict(
    target_generator=dict(type='EMATeacherTarget'),
    neck=dict(predict_feature_dim=768),
    head=dict(_delete_=True, type='HPMFeaturePretrainHead'))
