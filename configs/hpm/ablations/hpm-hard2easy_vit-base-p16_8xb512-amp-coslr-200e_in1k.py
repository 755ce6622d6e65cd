# Tab. 4: hard-to-easy, alpha 0.5 -> 0 (81.71).
_base_ = '../hpm_vit-base-p16_8xb512-amp-coslr-200e_in1k.py'

model = dict(
    mask_generator=dict(
        mask_ratio=0.75, alpha_0=0.5, alpha_T=0., mode='argmax'))
