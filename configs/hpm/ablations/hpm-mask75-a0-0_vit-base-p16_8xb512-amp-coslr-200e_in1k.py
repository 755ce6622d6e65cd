# Tab. 3 'random' / Tab. 1 row 2 (L_pred trained, random masks): gamma 0.75, alpha 0 -> 0 (82.49). No teacher is built.
_base_ = '../hpm_vit-base-p16_8xb512-amp-coslr-200e_in1k.py'

model = dict(
    mask_generator=dict(
        mask_ratio=0.75, alpha_0=0., alpha_T=0., mode='argmax'))
