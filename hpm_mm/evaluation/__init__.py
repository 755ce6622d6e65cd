from .knn import (FEATURES, SAME_SET, extract_features, knn_classify,
                  model_device, pool_features, same_images)
from .linear import linear_probe

__all__ = [
    'knn_classify', 'extract_features', 'pool_features', 'same_images',
    'SAME_SET', 'model_device', 'FEATURES', 'linear_probe'
]
