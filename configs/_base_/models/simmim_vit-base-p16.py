# SimMIM with the project's ViT-B/16 (MaskTokenViT: HPMViT + a mask token):
# every patch is encoded, masked ones as the mask token; a linear decoder
# (1x1 conv + pixel shuffle) to pixels; L1 on the masked pixels. SimMIM's
# ViT also used a shared relative position bias and layer scale 0.1; here
# the encoder is HPM's (absolute sin-cos positions, no layer scale), so that
# only the pretext task differs and every checkpoint goes through the same
# converters. Masks: per 16-px patch at ratio 0.6 (SimMIM masks 32-px units).
custom_imports = dict(imports=['hpm_mm'], allow_failed_imports=False)

model = dict(
    type='HPMSimMIM',
    backbone=dict(
        type='MaskTokenViT',
        arch='b',
        img_size=224,
        patch_size=16,
        drop_path_rate=0.1),
    neck=dict(type='HPMSimMIMDecoder', in_channels=768, encoder_stride=16),
    head=dict(type='HPMSimMIMHead', patch_size=16, loss_pred=None),
    mask_generator=dict(type='RandomMaskGenerator', mask_ratio=0.6),
    init_cfg=[
        dict(type='Xavier', layer='Linear', distribution='uniform'),
        dict(type='Constant', layer='LayerNorm', val=1.0, bias=0.0)
    ])
