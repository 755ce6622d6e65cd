# Fashion-MNIST twin of the Tab. 1 row 2 / Tab. 3 "random" row: the loss
# predictor trained with L_pred, the masks random throughout (alpha 0 -> 0,
# so no EMA teacher is built). What HPM adds to MAE without mining.
_base_ = ['../hpm_vit-mini-p4_1xb256-coslr-10e_fmnist.py']

model = dict(mask_generator=dict(mask_ratio=0.75, alpha_0=0., alpha_T=0.))
