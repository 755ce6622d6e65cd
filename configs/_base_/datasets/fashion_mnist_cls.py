# Fashion-MNIST classification (linear probe / fine-tune of the small
# models): 60k train, evaluated on the 10k test images, 28x28 grayscale.
dataset_type = 'FashionMNISTSplit'
data_root = 'data/fashion_mnist/'
data_preprocessor = dict(
    num_classes=10, mean=[72.94], std=[90.02], to_rgb=False)

train_pipeline = [
    dict(type='RandomCrop', crop_size=28, padding=2),
    dict(type='RandomFlip', prob=0.5, direction='horizontal'),
    dict(type='PackInputs')
]
test_pipeline = [dict(type='PackInputs')]  # the 28x28 images as they are

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
val_dataloader = dict(
    batch_size=500,
    num_workers=2,
    persistent_workers=True,
    sampler=dict(type='DefaultSampler', shuffle=False),
    collate_fn=dict(type='default_collate'),
    dataset=dict(
        type=dataset_type,
        data_root=data_root,
        split='test',
        pipeline=test_pipeline))
val_evaluator = dict(type='Accuracy', topk=(1, ))
test_dataloader = val_dataloader
test_evaluator = val_evaluator
