from .knn import FEATURES, extract_features, knn_classify, pool_features

__all__ = ['knn_classify', 'extract_features', 'pool_features', 'FEATURES']
