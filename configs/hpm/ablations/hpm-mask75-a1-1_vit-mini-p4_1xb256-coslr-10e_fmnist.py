# Fashion-MNIST twin of the Tab. 3 "all hard" row: every masked patch is one
# of the teacher's predicted-hardest (alpha 1 -> 1).
_base_ = ['../hpm_vit-mini-p4_1xb256-coslr-10e_fmnist.py']

model = dict(mask_generator=dict(mask_ratio=0.75, alpha_0=1., alpha_T=1.))
