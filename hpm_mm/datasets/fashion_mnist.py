import os
import os.path as osp
import warnings

from mmpretrain.datasets import FashionMNIST
from mmpretrain.registry import DATASETS


@DATASETS.register_module()
class FashionMNISTSplit(FashionMNIST):
    """mmpretrain's :class:`FashionMNIST` whose ``split`` chooses the files.

    mmpretrain 1.2 reads the test files only when ``test_mode=True``; with
    ``split='test'`` alone it silently returns the 60k training images, so an
    evaluation can leak the training set into the test set. Here ``split``
    alone decides ('train': 60k, 'test': 10k) and ``test_mode`` keeps its
    mmengine meaning.

    Args:
        data_root (str): Folder with the gunzipped idx files
            (``tools/dataset_converters/prepare_fashion_mnist.py``).
        split (str): ``'train'`` or ``'test'``. Defaults to ``'train'``.
        download (bool): Never possible here; defaults to False.
        **kwargs: Other arguments of :class:`FashionMNIST`.
    """

    def __init__(self, data_root: str = '', split: str = 'train',
                 download: bool = False, **kwargs) -> None:
        super().__init__(
            data_root=data_root, split=split, download=download, **kwargs)

    def load_data_list(self):
        root = self.data_prefix['root']
        if '://' not in root and not self._check_exists():
            where = osp.abspath(root)
            raise FileNotFoundError(
                f'Fashion-MNIST is not in {where} (data_root={root!r} is '
                f'relative to the working directory {os.getcwd()}). Fix: '
                'python tools/dataset_converters/prepare_fashion_mnist.py '
                f'--out {where} (offline, from Debian\'s dataset-fashion-'
                'mnist), or run from the repository root, or set data_root '
                'to the folder with the idx files.')
        test_mode = self.test_mode
        self.test_mode = self.split == 'test'
        try:
            with warnings.catch_warnings():
                # mmpretrain wraps the read-only file buffer in a tensor that
                # nothing writes to; torch warns about it on every run
                warnings.filterwarnings(
                    'ignore', message='The given NumPy array is not writable')
                return super().load_data_list()
        finally:
            self.test_mode = test_mode
