from .knn import (FEATURES, SAME_SET, extract_features, knn_classify,
                  pool_features, same_images)
from .linear import linear_probe

__all__ = [
    'knn_classify', 'extract_features', 'pool_features', 'same_images',
    'SAME_SET', 'FEATURES', 'linear_probe'
]
