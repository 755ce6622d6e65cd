from .base import IMAGE_SCORES, BaseMaskGenerator, RandomMaskGenerator
from .blockwise_mask_generator import BlockwiseMaskGenerator
from .hpm_mask_generator import AttentionMaskGenerator, HPMMaskGenerator

__all__ = [
    'IMAGE_SCORES', 'BaseMaskGenerator', 'RandomMaskGenerator',
    'HPMMaskGenerator', 'AttentionMaskGenerator', 'BlockwiseMaskGenerator'
]
