# Tab. 1 "CLIP features", L_pred without learn to mask (fine-tune 83.31;
# Tab. 6 COCO 46.43 / 41.80, ADE20k 46.97).
_base_ = './hpm-clip-feat_vit-base-p16_8xb512-amp-coslr-200e_in1k.py'

model = dict(mask_generator=dict(alpha_0=0., alpha_T=0.))
