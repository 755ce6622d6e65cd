# The main job's HPM config with contrast-ranked masks instead of the
# teacher's predicted losses (docs/extending.md).
_base_ = 'hpm_mm::hpm/hpm_vit-mini-p4_1xb256-coslr-10e_fmnist.py'
custom_imports = dict(
    imports=['hpm_mm', 'contrast_mask'], allow_failed_imports=False)

model = dict(
    mask_generator=dict(
        _delete_=True,
        type='ContrastMaskGenerator',
        mask_ratio=0.75,
        alpha_0=0.,
        alpha_T=0.5))
