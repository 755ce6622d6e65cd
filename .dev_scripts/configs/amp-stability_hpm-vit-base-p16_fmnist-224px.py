# The AMP stability run (.dev_scripts/amp_stability.py): the ImageNet HPM
# ViT-B/16 recipe (model, AdamW, clipping, alpha 0 -> 0.5) on Fashion-MNIST's
# training images resized to 224 px, read as grayscale (a 1-channel patch
# embedding). The script sets the run's length (scale_recipe rescales the
# recipe's warm-up and cosine), batch and lr and the precision (fp16 or bf16)
# for each run.
_base_ = ['../../configs/hpm/hpm_vit-base-p16_8xb512-amp-coslr-200e_in1k.py']

model = dict(
    backbone=dict(patch_cfg=dict(in_channels=1)),
    neck=dict(in_chans=1),
    head=dict(in_channels=1))
data_preprocessor = dict(
    _delete_=True,
    type='ChannelCheckedDataPreprocessor',
    mean=[72.94],
    std=[90.02],
    to_rgb=False)
train_dataloader = dict(
    batch_size=64,
    num_workers=2,
    persistent_workers=True,
    sampler=dict(type='DefaultSampler', shuffle=True),
    collate_fn=dict(type='default_collate'),
    dataset=dict(
        _delete_=True,
        type='FashionMNISTSplit',
        data_root='data/fashion_mnist/',
        split='train',
        pipeline=[
            dict(type='Resize', scale=224, interpolation='bilinear'),
            dict(type='RandomFlip', prob=0.5),
            dict(type='PackInputs')
        ]))
default_hooks = dict(
    logger=dict(type='LoggerHook', interval=10),
    checkpoint=dict(interval=10, max_keep_ckpts=1))
resume = False
