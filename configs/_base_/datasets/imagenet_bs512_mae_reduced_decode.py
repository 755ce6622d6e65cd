# mmpretrain's MAE ImageNet data, its load and random resized crop as one
# transform that decodes each JPEG only at the size its crop needs (the box
# drawn from the header as RandomResizedCrop draws it, then a 1/2, 1/4 or
# 1/8 DCT-domain decode): ~4x the images/s per core (docs/speed.md, "The
# ImageNet input pipeline"). The full decode of every image:
#   --cfg-options train_dataloader.dataset.pipeline.0.reduce=False
_base_ = 'mmpretrain::_base_/datasets/imagenet_bs512_mae.py'

train_pipeline = [
    dict(
        type='LoadAndRandomResizedCrop',
        scale=224,
        crop_ratio_range=(0.2, 1.0),
        backend='pillow',
        interpolation='bicubic'),
    dict(type='RandomFlip', prob=0.5),
    dict(type='PackInputs')
]
train_dataloader = dict(dataset=dict(pipeline=train_pipeline))
