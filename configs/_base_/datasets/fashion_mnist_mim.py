# Fashion-MNIST (Debian's dataset-fashion-mnist, prepared into data/ by
# tools/install.sh): 60k train / 10k test real 28x28 grayscale images at
# their native size (a patch-4 ViT sees 7x7 = 49 patches). Pretraining sees
# the first 10k training images per epoch (keeps the 10-epoch easy-to-hard
# schedule short); its evaluation hooks (kNN, hard-patch grids) are defined
# here once for every pretraining config on this data.
dataset_type = 'FashionMNISTSplit'  # split alone picks the files (no leak)
data_root = 'data/fashion_mnist/'
data_preprocessor = dict(  # refuses RGB images in one line
    type='ChannelCheckedDataPreprocessor',
    mean=[72.94],
    std=[90.02],
    to_rgb=False)

train_pipeline = [
    dict(
        type='RandomResizedCrop',
        scale=28,
        crop_ratio_range=(0.5, 1.0),
        backend='pillow',
        interpolation='bicubic'),
    dict(type='RandomFlip', prob=0.5),
    dict(type='PackInputs')
]

# one worker: on 2 CPU cores the step's two torch threads and a second
# worker oversubscribe the cores (a 7,680-image epoch: 2.7 s per step with 2
# workers, 2.0 s with 1, 2.4 s with none; docs/speed.md)
train_dataloader = dict(
    batch_size=256,
    num_workers=1,
    persistent_workers=True,
    sampler=dict(type='DefaultSampler', shuffle=True),
    collate_fn=dict(type='default_collate'),
    dataset=dict(
        type=dataset_type,
        data_root=data_root,
        split='train',
        indices=10000,
        with_label=False,  # pretraining reads none (docs/speed.md)
        pipeline=train_pipeline))

# evaluation: DINO-style kNN (T = 0.07, k in 10/20/100/200) of the student
# encoder after training (~2.5 min on 2 cores; for periodic evaluation every
# N epochs set the hook's interval=N); memory bank = the 60k training
# images, evaluated = the 10k test images (FashionMNISTSplit).
knn_pipeline = [dict(type='PackInputs')]  # the 28x28 images as they are
knn_loader = dict(
    batch_size=500,
    num_workers=1,
    persistent_workers=False,
    sampler=dict(type='DefaultSampler', shuffle=False),
    collate_fn=dict(type='default_collate'))
knn_hook = dict(
    type='KNNEvalHook',
    interval=0,
    train_dataloader=dict(
        **knn_loader,
        dataset=dict(
            type=dataset_type,
            data_root=data_root,
            split='train',
            pipeline=knn_pipeline)),
    val_dataloader=dict(
        **knn_loader,
        dataset=dict(
            type=dataset_type,
            data_root=data_root,
            split='test',
            pipeline=knn_pipeline)))
# after training: hard-patch grids of 4 test images into work_dir/hard_patches
# and the teacher's Spearman correlation (predicted vs true per-patch loss)
vis_hook = dict(
    type='HardPatchVisHook',
    interval=0,
    num_images=4,
    num_masks=8,
    dataloader=knn_hook['val_dataloader'])
