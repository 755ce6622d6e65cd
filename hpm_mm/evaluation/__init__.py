from .knn import FEATURES, extract_features, knn_classify, pool_features
from .linear import linear_probe

__all__ = [
    'knn_classify', 'extract_features', 'pool_features', 'FEATURES',
    'linear_probe'
]
