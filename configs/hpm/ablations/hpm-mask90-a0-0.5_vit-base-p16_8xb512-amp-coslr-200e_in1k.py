# Tab. 3: gamma 0.9, alpha 0 -> 0.5 (82.66).
_base_ = '../hpm_vit-base-p16_8xb512-amp-coslr-200e_in1k.py'

model = dict(
    mask_generator=dict(
        mask_ratio=0.9, alpha_0=0., alpha_T=0.5, mode='argmax'))
