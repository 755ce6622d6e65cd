import os
import os.path as osp
import struct
import warnings

from mmpretrain.datasets import FashionMNIST
from mmpretrain.registry import DATASETS

from hpm_mm.errors import HPMError

#: The checkout hpm_mm runs from (an editable install, as tools/install.sh
#: makes), where tools/install.sh prepares ``data/fashion_mnist``.
REPO = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))


def resolve_data_root(data_root: str) -> str:
    """A relative ``data_root`` (the configs' ``data/fashion_mnist/``) as
    found: in the working directory, else in the checkout, so configs
    (``hpm_mm::`` ones too) run from any folder. Absolute roots, URLs and
    roots found nowhere are returned as given (loading then names both
    places in its error)."""
    if not data_root or osp.isabs(data_root) or '://' in data_root or \
            osp.exists(data_root):
        return data_root
    in_repo = osp.join(REPO, data_root)
    return in_repo if osp.exists(in_repo) else data_root


def idx_problem(path: str):
    """What makes ``path`` no idx file (None: its magic number, dimensions
    and size agree): a truncated or altered download would otherwise fail
    deep in a reshape, naming no file."""
    size = osp.getsize(path)
    with open(path, 'rb') as f:
        head = f.read(16)
    if len(head) < 8 or head[:2] != b'\0\0' or head[2] != 8 or \
            head[3] not in (1, 3):
        return 'not an idx file of bytes (bad magic number)'
    ndim = head[3]
    if len(head) < 4 + 4 * ndim:
        return f'{size} bytes: shorter than its header'
    dims = struct.unpack(f'>{ndim}I', head[4:4 + 4 * ndim])
    want = 4 + 4 * ndim
    count = 1
    for d in dims:
        count *= d
    want += count
    if size != want:
        return (f'{size} bytes where its header ({" x ".join(map(str, dims))})'
                f' says {want}: truncated or altered')
    return None


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
            (``tools/dataset_converters/prepare_fashion_mnist.py``); a
            relative one is looked for in the working directory, then in
            the checkout (:func:`resolve_data_root`).
        split (str): ``'train'`` or ``'test'``. Defaults to ``'train'``.
        download (bool): Never possible here; defaults to False.
        **kwargs: Other arguments of :class:`FashionMNIST`.
    """

    def __init__(self,
                 data_root: str = '',
                 split: str = 'train',
                 download: bool = False,
                 **kwargs) -> None:
        super().__init__(
            data_root=resolve_data_root(data_root),
            split=split,
            download=download,
            **kwargs)

    def load_data_list(self):
        root = self.data_prefix['root']
        if '://' not in root and not self._check_exists():
            where = osp.abspath(root)
            raise FileNotFoundError(
                f'Fashion-MNIST is not in {where} (a relative data_root is '
                f'looked for in the working directory {os.getcwd()}, then in '
                f'the checkout {REPO}). Fix: python {REPO}/tools/'
                'dataset_converters/prepare_fashion_mnist.py --out '
                f'{osp.join(REPO, "data", "fashion_mnist")} (offline, from '
                "Debian's dataset-fashion-mnist), or set data_root to the "
                'folder with the idx files.')
        if '://' not in root:
            files = self.test_list if self.split == 'test' else \
                self.train_list
            for name, _ in files:
                path = osp.join(root, name.replace('.gz', ''))
                problem = idx_problem(path) if osp.exists(path) else None
                if problem:
                    raise HPMError(
                        f'{path}: {problem}. Fix: python {REPO}/tools/'
                        'dataset_converters/prepare_fashion_mnist.py --out '
                        f'{root} (it checks every file and prepares the bad '
                        'ones again).')
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
