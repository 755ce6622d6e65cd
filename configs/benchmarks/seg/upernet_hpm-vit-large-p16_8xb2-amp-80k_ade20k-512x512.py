# As the ViT-L 160k config, 80k iterations.
_base_ = './upernet_hpm-vit-large-p16_8xb2-amp-160k_ade20k-512x512.py'

param_scheduler = [
    dict(
        type='LinearLR', start_factor=1e-6, by_epoch=False, begin=0, end=1500),
    dict(
        type='PolyLR',
        eta_min=0.0,
        power=1.0,
        begin=1500,
        end=80000,
        by_epoch=False)
]
train_cfg = dict(max_iters=80000)
