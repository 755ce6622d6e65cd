# HPM ViT-B/16, 800 epochs (paper Tab. 8: 84.2 fine-tune).
_base_ = './hpm_vit-base-p16_8xb512-amp-coslr-200e_in1k.py'

# schedule
warmup_epochs = 10
max_epochs = 800
param_scheduler = [
    dict(
        type='LinearLR',
        start_factor=1e-4,
        by_epoch=True,
        begin=0,
        end=warmup_epochs,
        convert_to_iter_based=True),
    dict(
        type='CosineAnnealingLR',
        T_max=max_epochs - warmup_epochs,
        eta_min=0.,
        by_epoch=True,
        begin=warmup_epochs,
        end=max_epochs,
        convert_to_iter_based=True)
]
train_cfg = dict(max_epochs=max_epochs)
