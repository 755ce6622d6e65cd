# HPM on iBOT, ViT-B/16, 50 epochs of 2 x 224 px + 10 x 96 px crops
# (supplementary table, HPM w/ iBOT: 83.4): the plain iBOT config plus
# hard-patch mining. A 2-block 512-d loss predictor on the encoder output of
# the masked global crops learns iBOT's per-patch distillation loss
# (relative loss); iBOT's own EMA teacher scores the patches with its copy
# of the predictor in its pass over the global crops; each global crop keeps
# iBOT's mask size (none, or 10-50%), of which alpha 0 -> 0.5 are its
# hardest patches and the rest iBOT's block-wise rectangles (rest=).
_base_ = './ibot_vit-base-p16_16xb64-amp-coslr-50e_in1k.py'

model = dict(
    head=dict(loss_pred=dict(_delete_=True, type='HPMRelativeLoss')),
    predictor=dict(type='HPMLossPredictor'),  # 2 blocks, 512-d, 16 heads
    mask_generator=dict(
        _delete_=True,
        type='HPMMaskGenerator',
        mask_ratio={{_base_.model.mask_generator.mask_ratio}},
        alpha_0=0.,
        alpha_T=0.5,
        rest=dict(type='BlockwiseMaskGenerator', min_num_patches=16)))
