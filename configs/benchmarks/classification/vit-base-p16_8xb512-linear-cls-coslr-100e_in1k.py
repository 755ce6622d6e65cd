# Linear probing of an HPM ViT-B/16 on the CLS token after the final norm
# (the authors' linear script, MAE's global_pool=False), the Tab. S3 recipe
# otherwise; the paper's text describes the average of the patch tokens:
# vit-base-p16_8xb512-linear-coslr-100e_in1k.py.
_base_ = './vit-base-p16_8xb512-linear-coslr-100e_in1k.py'

model = dict(backbone=dict(out_type='cls_token'))
