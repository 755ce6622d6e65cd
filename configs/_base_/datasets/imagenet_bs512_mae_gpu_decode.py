# mmpretrain's MAE ImageNet data with the JPEGs decoded on the GPU: the
# workers read each file's bytes and draw its crop box and flip
# (LoadBytesAndCropBox), the data preprocessor decodes the batch with nvJPEG,
# crops, resizes and flips it there (docs/speed.md, "The ImageNet input
# pipeline"). On a CPU the same path decodes with libjpeg.
_base_ = 'mmpretrain::_base_/datasets/imagenet_bs512_mae.py'

data_preprocessor = dict(type='DeviceDecodeDataPreprocessor')
train_pipeline = [
    dict(
        type='LoadBytesAndCropBox',
        scale=224,
        crop_ratio_range=(0.2, 1.0),
        interpolation='bicubic',
        flip_prob=0.5),
    dict(
        type='PackInputs',
        meta_keys=('img_path', 'ori_shape', 'img_shape', 'device_decode'))
]
train_dataloader = dict(
    collate_fn=dict(type='pseudo_collate'),
    dataset=dict(pipeline=train_pipeline))
