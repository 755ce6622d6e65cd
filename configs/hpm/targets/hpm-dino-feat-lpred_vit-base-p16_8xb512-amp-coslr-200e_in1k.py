# Tab. 1 "DINO features", L_pred without learn to mask (fine-tune 83.58).
_base_ = './hpm-dino-feat_vit-base-p16_8xb512-amp-coslr-200e_in1k.py'

model = dict(mask_generator=dict(alpha_0=0., alpha_T=0.))
