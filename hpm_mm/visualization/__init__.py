from .hard_patches import (analyze_hard_patches, draw_hard_patches,
                           fixed_samples, foreground_iou, saliency_mask,
                           spearman)

__all__ = [
    'analyze_hard_patches', 'draw_hard_patches', 'fixed_samples', 'spearman',
    'saliency_mask', 'foreground_iou'
]
