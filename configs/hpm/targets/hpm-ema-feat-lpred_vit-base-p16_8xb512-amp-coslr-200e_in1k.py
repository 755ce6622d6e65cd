# Tab. 1 "EMA features", L_pred without learn to mask (fine-tune 83.13): the
# predictor is trained, the masks stay random (alpha 0 -> 0).
_base_ = './hpm-ema-feat_vit-base-p16_8xb512-amp-coslr-200e_in1k.py'

model = dict(mask_generator=dict(alpha_0=0., alpha_T=0.))
