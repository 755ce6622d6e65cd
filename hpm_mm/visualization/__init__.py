from .hard_patches import (analyze_hard_patches, draw_hard_patches,
                           foreground_iou, saliency_mask, spearman)

__all__ = [
    'analyze_hard_patches', 'draw_hard_patches', 'spearman', 'saliency_mask',
    'foreground_iou'
]
