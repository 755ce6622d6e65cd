# The main job with the EMA feature target (the check on the embedded data):
# the reconstructor predicts the EMA teacher's 192-d encoder features.
_base_ = '../hpm_vit-mini-p4_1xb256-coslr-10e_fmnist.py'

model = dict(
    target_generator=dict(type='EMATeacherTarget'),
    neck=dict(predict_feature_dim={{_base_.vit_mini.arch.embed_dims}}),
    head=dict(_delete_=True, type='HPMFeaturePretrainHead'))
