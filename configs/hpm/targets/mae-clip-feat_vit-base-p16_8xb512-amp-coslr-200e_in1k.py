# Tab. 1 "CLIP features", plain (fine-tune 83.20; Tab. 6 COCO 46.21 / 41.55,
# ADE20k 46.59): MILAN's target without its attention-guided masking.
_base_ = './hpm-clip-feat-lpred_vit-base-p16_8xb512-amp-coslr-200e_in1k.py'

model = dict(neck=dict(predictor_depth=0), head=dict(loss_pred=None))
