_base_ = './hpm_vit-base-p16.py'

# ViT-L/16 encoder (1024-d, 24 layers); the decoders stay 8 x 512-d.
model = dict(backbone=dict(arch='l'), neck=dict(embed_dim=1024))
