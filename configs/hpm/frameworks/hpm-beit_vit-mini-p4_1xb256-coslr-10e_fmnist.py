# HPM on BEiT with the main job's mini ViT and data (the check on the
# embedded Fashion-MNIST). No DALL-E weights exist for 1-channel 56-px
# images, so the tokenizer is a randomly initialised DALL-E encoder
# (32 hidden, 512 tokens) on a 56-px view: its tokens are a fixed function
# of each patch, enough to check that the mining learns, not a BEiT
# representation. Block-wise masking of 40% with alpha 0 -> 0.5 hardest.
_base_ = './hpm-simmim_vit-mini-p4_1xb256-coslr-10e_fmnist.py'

data_preprocessor = dict(
    _delete_=True,
    type='TwoNormDataPreprocessor',
    mean=[72.94],
    std=[90.02],
    second_mean=[-31.875],  # DALL-E's map_pixels
    second_std=[318.75],
    to_rgb=False)
train_dataloader = dict(
    dataset=dict(pipeline=[
        dict(type='RandomFlip', prob=0.5),
        dict(
            type='RandomResizedCropAndInterpolationWithTwoPic',
            size=28,
            second_size=56,
            interpolation='bicubic',
            second_interpolation='lanczos',
            scale=(0.5, 1.0)),
        dict(type='PackInputs')
    ]))
model = dict(
    type='HPMBEiT',
    neck=None,
    head=dict(
        _delete_=True,
        type='HPMBEiTHead',
        embed_dims={{_base_.vit_mini.arch.embed_dims}},
        num_embed=512),
    target_generator=dict(
        type='DALL-E',
        n_hid=32,
        vocab_size=512,
        input_channels={{_base_.vit_mini.in_channels}}),
    mask_generator=dict(
        mask_ratio=0.4, rest=dict(type='BlockwiseMaskGenerator')))
# kNN and the pictures read single views; this check logs rank_acc only
custom_hooks = [dict(type='HPMScheduleHook', by_epoch=True)]
