# HPM on SimMIM, ViT-B/16, 200 epochs: SimMIM's setting (the plain config
# below) plus hard-patch mining: a 2-block 512-d loss predictor on the
# encoder output learns SimMIM's per-patch L1 loss with the relative loss;
# the EMA teacher (1e-3 -> 1e-4, as HPM) scores the full image; alpha 0 -> 0.5
# of the masked patches are the hardest. Not in the paper (no number).
_base_ = './simmim_vit-base-p16_8xb256-amp-step-200e_in1k.py'

model = dict(
    head=dict(loss_pred=dict(_delete_=True, type='HPMRelativeLoss')),
    predictor=dict(type='HPMLossPredictor'),  # 2 blocks, 512-d, 16 heads
    mask_generator=dict(
        _delete_=True,
        type='HPMMaskGenerator',
        mask_ratio=0.6,
        alpha_0=0.,
        alpha_T=0.5))  # teacher: EMATeacher's defaults, HPM's 1e-3 -> 1e-4
custom_hooks = [dict(type='HPMScheduleHook', by_epoch=True)]
