# HPM on Fashion-MNIST with the fast settings (docs/speed.md): the teacher
# scores the half-resolution image (4x4 of the 7x7 patches, its score map
# upsampled) and the loss predictor has 1 block instead of the
# reconstructor's 2 (the paper's decoder-depth ablation, Tab. S4). The main
# job's config: the step is 0.66x faithful HPM's on 2 AVX2 cores.
_base_ = ['../hpm_vit-mini-p4_1xb256-coslr-10e_fmnist.py']

model = dict(neck=dict(predictor_depth=1), teacher=dict(input_scale=0.5))
