from .fashion_mnist import FashionMNISTSplit
from .transforms import (LoadAndRandomResizedCrop, LoadBytesAndCropBox,
                         LoadImageFromFileChecked)

__all__ = [
    'FashionMNISTSplit', 'LoadImageFromFileChecked',
    'LoadAndRandomResizedCrop', 'LoadBytesAndCropBox'
]
