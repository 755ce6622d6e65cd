from .fashion_mnist import FashionMNISTSplit

__all__ = ['FashionMNISTSplit']
