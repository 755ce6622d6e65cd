from .knn import extract_features, knn_classify, pool_features

__all__ = ['knn_classify', 'extract_features', 'pool_features']
