# Linear probe of the small Fashion-MNIST encoder on the CLS token (what the
# authors' linear script reads, MAE's global_pool=False) instead of the
# average of the patch tokens (the paper's text); otherwise identical.
_base_ = './vit-mini-p4_1xb256-linear-coslr-10e_fmnist.py'

model = dict(backbone=dict(out_type='cls_token'))
