# The main job's HPM config masking by the teacher's token norms instead of
# its predicted losses (docs/extending.md).
_base_ = 'hpm_mm::hpm/hpm_vit-mini-p4_1xb256-coslr-10e_fmnist.py'
custom_imports = dict(
    imports=['hpm_mm', 'token_norm'], allow_failed_imports=False)

model = dict(
    mask_generator=dict(
        _delete_=True,
        type='TokenNormMaskGenerator',
        mask_ratio=0.75,
        alpha_0=0.,
        alpha_T=0.5))
