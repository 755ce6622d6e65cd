# HPM on SimMIM (the embedded data's check) with a loss predictor of your own
# (docs/extending.md).
_base_ = ('hpm_mm::hpm/frameworks/'
          'hpm-simmim_vit-mini-p4_1xb256-coslr-10e_fmnist.py')
custom_imports = dict(
    imports=['hpm_mm', 'margin_rank'], allow_failed_imports=False)

model = dict(
    predictor=dict(_delete_=True, type='LinearLossPredictor', embed_dim=192))
