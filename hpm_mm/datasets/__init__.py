from .fashion_mnist import FashionMNISTSplit
from .transforms import LoadAndRandomResizedCrop, LoadImageFromFileChecked

__all__ = [
    'FashionMNISTSplit', 'LoadImageFromFileChecked', 'LoadAndRandomResizedCrop'
]
