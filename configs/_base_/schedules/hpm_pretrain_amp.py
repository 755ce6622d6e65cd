# Paper Tab. S1: AdamW (0.9, 0.95), wd 0.05, lr = 1.5e-4 * batch / 256,
# batch 4096, cosine decay; gradient clipping at 5.0 as in the authors' code;
# fp16 autocast with dynamic loss scaling (as the authors on GPU); a step
# with a non-finite loss or gradients is skipped on every rank.
optim_wrapper = dict(
    type='GuardedAmpOptimWrapper',
    loss_scale='dynamic',
    # the EMA teacher's frozen parameters: one log line, not one warning each
    constructor='FrozenAwareOptimWrapperConstructor',
    clip_grad=dict(max_norm=5.0),
    optimizer=dict(
        type='AdamW',
        lr=1.5e-4 * 4096 / 256,
        betas=(0.9, 0.95),
        weight_decay=0.05),
    paramwise_cfg=dict(
        custom_keys={
            'ln': dict(decay_mult=0.0),
            'norm': dict(decay_mult=0.0),
            'bias': dict(decay_mult=0.0),
            'pos_embed': dict(decay_mult=0.),
            'mask_token': dict(decay_mult=0.),
            'cls_token': dict(decay_mult=0.)
        }))

# Tab. S1: warmup 10 epochs (ViT-B), 40 (ViT-L), then a cosine to 0 that
# ends with the run: no `end` or `T_max`, so mmengine ends it at
# train_cfg.max_epochs and a config of another length sets only that
warmup_epochs = 10
param_scheduler = [
    dict(
        type='LinearLR',
        start_factor=1e-4,
        by_epoch=True,
        begin=0,
        end=warmup_epochs,
        convert_to_iter_based=True),
    dict(
        type='CosineAnnealingLR',
        eta_min=0.,
        by_epoch=True,
        begin=warmup_epochs,
        convert_to_iter_based=True)
]
train_cfg = dict(type='EpochBasedTrainLoop', max_epochs=200)
auto_scale_lr = dict(base_batch_size=4096)

# hpm_mm's runner: its run policy (precision, run length, one run per work
# dir, resume checks) whoever builds it (hpm_mm.engine.runner)
runner_type = 'HPMRunner'
