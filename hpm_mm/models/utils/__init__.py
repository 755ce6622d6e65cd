from .mask_generator import HPMMaskGenerator

__all__ = ['HPMMaskGenerator']
