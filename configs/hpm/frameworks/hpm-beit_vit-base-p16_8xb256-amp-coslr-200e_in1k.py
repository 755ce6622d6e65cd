# HPM on BEiT (v1), ViT-B/16, 200 epochs (supplementary table, HPM w/ BEiT:
# 81.5): the plain BEiT config plus hard-patch mining. A 2-block 512-d loss
# predictor on the encoder output learns BEiT's per-patch token
# cross-entropy (relative loss); the EMA teacher (1e-3 -> 1e-4) scores the
# full image; of the 75 masked patches alpha 0 -> 0.5 are the hardest and the
# rest are laid by BEiT's block-wise masking (rest=).
_base_ = './beit_vit-base-p16_8xb256-amp-coslr-200e_in1k.py'

model = dict(
    head=dict(loss_pred=dict(_delete_=True, type='HPMRelativeLoss')),
    predictor=dict(type='HPMLossPredictor'),  # 2 blocks, 512-d, 16 heads
    mask_generator=dict(
        _delete_=True,
        type='HPMMaskGenerator',
        mask_ratio=0.382,
        alpha_0=0.,
        alpha_T=0.5,
        rest=dict(type='BlockwiseMaskGenerator', min_num_patches=16))
)  # teacher: EMATeacher's defaults, HPM's 1e-3 -> 1e-4
custom_hooks = [dict(type='HPMScheduleHook', by_epoch=True)]
