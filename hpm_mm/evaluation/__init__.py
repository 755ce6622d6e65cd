from .knn import (FEATURES, SAME_SET, bank_and_evaluated, extract_features,
                  knn_classify, model_device, pool_features)
from .linear import linear_probe

__all__ = [
    'knn_classify', 'extract_features', 'pool_features', 'bank_and_evaluated',
    'SAME_SET', 'model_device', 'FEATURES', 'linear_probe'
]
