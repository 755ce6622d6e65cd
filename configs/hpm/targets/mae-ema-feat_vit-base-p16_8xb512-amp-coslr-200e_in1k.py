# Tab. 1 "EMA features", plain (fine-tune 82.99): MAE with the EMA teacher's
# features as the target; no loss predictor, random masks.
_base_ = './hpm-ema-feat-lpred_vit-base-p16_8xb512-amp-coslr-200e_in1k.py'

model = dict(neck=dict(predictor_depth=0), head=dict(loss_pred=None))
