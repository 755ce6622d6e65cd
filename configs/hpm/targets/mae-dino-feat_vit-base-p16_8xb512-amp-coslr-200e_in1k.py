# Tab. 1 "DINO features", plain (fine-tune 83.46): no predictor, random
# masks, so no EMA teacher is built.
_base_ = './hpm-dino-feat-lpred_vit-base-p16_8xb512-amp-coslr-200e_in1k.py'

model = dict(neck=dict(predictor_depth=0), head=dict(loss_pred=None))
