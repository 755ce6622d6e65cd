# Tab. 3: gamma 0.75, alpha 1 -> 1, all hard (81.40).
_base_ = '../hpm_vit-base-p16_8xb512-amp-coslr-200e_in1k.py'

model = dict(
    mask_generator=dict(
        mask_ratio=0.75, alpha_0=1., alpha_T=1., mode='argmax'))
