# HPM, ViT-B/16 encoder; reconstructor and loss predictor: 8 blocks, 512-d,
# 16 heads each, sharing decoder_embed / mask_token / decoder pos-embed.
custom_imports = dict(imports=['hpm_mm'], allow_failed_imports=False)

model = dict(
    type='HPM',
    backbone=dict(type='HPMViT', arch='b', img_size=224, patch_size=16),
    neck=dict(
        type='HPMPretrainDecoder',
        num_patches=196,
        patch_size=16,
        in_chans=3,
        embed_dim=768,
        decoder_embed_dim=512,
        decoder_depth=8,
        decoder_num_heads=16,
        mlp_ratio=4.,
        predictor_depth=None,  # None: as deep as the reconstructor (8)
    ),
    head=dict(
        type='HPMPretrainHead',
        norm_pix=False,  # off in every script of the authors
        patch_size=16,
        in_channels=3,
        loss_pred=dict(type='HPMRelativeLoss')),
    mask_generator=dict(
        type='HPMMaskGenerator',
        mask_ratio=0.75,  # gamma
        alpha_0=0.,
        alpha_T=0.5,
        mode='argmax'),
    # EMA teacher: momentum 1e-3 -> 1e-4 (decay 0.999 -> 0.9999) over 100 ep.
    teacher=dict(
        type='EMATeacher',
        momentum=1e-3,
        end_momentum=1e-4,
        momentum_epochs=100,
        dtype=None,  # None: the step's precision (AMP autocast when on)
        input_scale=1.0),  # fraction of the patch grid the teacher sees
    init_cfg=[
        dict(type='Xavier', layer='Linear', distribution='uniform'),
        dict(type='Constant', layer='LayerNorm', val=1.0, bias=0.0)
    ])

# alpha_t = alpha_0 + t / T * (alpha_T - alpha_0), t = epoch (see the hook)
custom_hooks = [dict(type='HPMScheduleHook', by_epoch=True)]

model_wrapper_cfg = dict(
    type='MMDistributedDataParallel',
    broadcast_buffers=False,
    find_unused_parameters=False)
