from .fashion_mnist import FashionMNISTSplit
from .transforms import LoadImageFromFileChecked

__all__ = ['FashionMNISTSplit', 'LoadImageFromFileChecked']
