from .hpm_vit import HPMViT, MaskTokenViT

__all__ = ['HPMViT', 'MaskTokenViT']
