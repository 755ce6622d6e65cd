# Tab. 5: absolute MSE predicting loss on standardised targets (82.77)
# instead of the relative BCE (82.95).
_base_ = '../hpm_vit-base-p16_8xb512-amp-coslr-200e_in1k.py'

model = dict(head=dict(loss_pred=dict(type='HPMAbsoluteLoss')))
