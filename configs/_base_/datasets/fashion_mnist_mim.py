# Fashion-MNIST (Debian's dataset-fashion-mnist, prepared into data/ by
# tools/install.sh): 60k train / 10k test real 28x28 grayscale images,
# resized to 32x32 so a patch-4 ViT sees 8x8 = 64 patches.
dataset_type = 'FashionMNISTSplit'  # split alone picks the files (no leak)
data_root = 'data/fashion_mnist/'
data_preprocessor = dict(
    type='SelfSupDataPreprocessor', mean=[72.94], std=[90.02], to_rgb=False)

train_pipeline = [
    dict(
        type='RandomResizedCrop',
        scale=32,
        crop_ratio_range=(0.5, 1.0),
        backend='pillow',
        interpolation='bicubic'),
    dict(type='RandomFlip', prob=0.5),
    dict(type='PackInputs')
]

train_dataloader = dict(
    batch_size=256,
    num_workers=2,
    persistent_workers=True,
    sampler=dict(type='DefaultSampler', shuffle=True),
    collate_fn=dict(type='default_collate'),
    dataset=dict(
        type=dataset_type,
        data_root=data_root,
        split='train',
        pipeline=train_pipeline))
