# HPM with the main job's model and recipe on a folder of your own images
# (docs/own_data.md). Set `image` once in a config that inherits this one:
# hpm_mm applies it to the encoder, decoder and head (size, channels, patch
# grid), the data preprocessor (mean / std, colour order) and every
# loader's root and transforms, the pictures' hook's too
# (hpm_mm.datasets.image_spec). tools/pretrain_folder.py chooses these
# numbers from the images themselves.
_base_ = ['./fast/hpm-fast_vit-mini-p4_1xb256-coslr-10e_fmnist.py']

image = dict(
    root='data/my_images/',  # the folder (nested folders allowed)
    size=32,
    channels=3,
    patch_size=4,
    mean=[123.675, 116.28, 103.53],  # 0..255, per channel
    std=[58.395, 57.12, 57.375])

# the pipelines' sizes, roots and colour read the spec (a config that
# inherits this one and changes `image` gets them changed by hpm_mm)
size, color = image['size'], 'color' if image['channels'] == 3 else 'grayscale'
load = dict(type='LoadImageFromFileChecked', color_type=color)
# the load and random resized crop in one: a JPEG larger than the crop
# needs is decoded at 1/2, 1/4 or 1/8 of its size (docs/speed.md)
train_pipeline = [
    dict(
        type='LoadAndRandomResizedCrop',
        scale=size,
        crop_ratio_range=(0.2, 1.0),
        backend='pillow',
        interpolation='bicubic',
        color_type=color),
    dict(type='RandomFlip', prob=0.5),
    dict(type='PackInputs')
]
eval_pipeline = [
    load,
    dict(
        type='ResizeEdge',
        scale=size,
        edge='short',
        backend='pillow',
        interpolation='bicubic'),
    dict(type='CenterCrop', crop_size=size),
    dict(type='PackInputs')
]
folder = dict(type='CustomDataset', data_root=image['root'], with_label=False)
train_dataloader = dict(
    dataset=dict(_delete_=True, pipeline=train_pipeline, **folder))
# the pictures of the first images; kNN needs labels (one subfolder per
# class): tools/pretrain_folder.py adds a KNNEvalHook on a held-out fifth
custom_hooks = [
    dict(type='HPMScheduleHook', by_epoch=True),
    dict(
        type='HardPatchVisHook',
        interval=0,
        num_images=4,
        num_masks=8,
        dataloader=dict(
            batch_size=4,
            num_workers=0,
            persistent_workers=False,
            sampler=dict(type='DefaultSampler', shuffle=False),
            collate_fn=dict(type='default_collate'),
            dataset=dict(pipeline=eval_pipeline, **folder)))
]
