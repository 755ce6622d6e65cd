# The AMP stability run's toy (its CPU dry run, gpu_check.sh with
# HPM_GPU_TINY=1 and tests/test_dev_scripts/test_amp_stability.py): a 32-d,
# 2-block ViT on 64 px images, the same recipe otherwise.
_base_ = ['./amp-stability_hpm-vit-base-p16_fmnist-224px.py']

model = dict(
    backbone=dict(
        arch=dict(
            _delete_=True,
            embed_dims=32,
            num_layers=2,
            num_heads=2,
            feedforward_channels=64),
        img_size=64),
    neck=dict(
        num_patches=16,
        embed_dim=32,
        decoder_embed_dim=16,
        decoder_depth=1,
        decoder_num_heads=2,
        predictor_depth=1))
train_dataloader = dict(
    num_workers=0,
    persistent_workers=False,
    dataset=dict(pipeline=[
        dict(type='Resize', scale=64, interpolation='bilinear'),
        dict(type='RandomFlip', prob=0.5),
        dict(type='PackInputs')
    ]))
