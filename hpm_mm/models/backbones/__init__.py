from .hpm_vit import HPMViT

__all__ = ['HPMViT']
