import math
import os
import os.path as osp
import struct
import warnings

import numpy as np
from mmpretrain.datasets import FashionMNIST
from mmpretrain.datasets.mnist import read_image_file, read_label_file
from mmpretrain.registry import DATASETS

from hpm_mm.errors import HPMError

#: The checkout hpm_mm runs from (an editable install, as tools/install.sh
#: makes), where tools/install.sh prepares ``data/fashion_mnist``.
REPO = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
#: the command that prepares the idx files in the folder appended to it
PREPARE = (f'python {REPO}/tools/dataset_converters/prepare_fashion_mnist.py'
           ' --out ')


def resolve_data_root(data_root: str) -> str:
    """A relative ``data_root`` (the configs' ``data/fashion_mnist/``) as
    found: in the working directory, else in the checkout, so configs
    (``hpm_mm::`` ones too) run from any folder. Absolute roots, URLs and
    roots found nowhere are returned as given (loading then names both
    places in its error)."""
    in_repo = osp.join(REPO, data_root)
    found = data_root and not osp.exists(data_root) and osp.exists(in_repo)
    return in_repo if found else data_root


#: file name -> (bytes, SHA-256) of the release's gunzipped idx file
#: (header + payload; Debian's dataset-fashion-mnist, the Zalando release)
FILES = {
    'train-images-idx3-ubyte':
    (16 + 60000 * 28 * 28,
     'c59f468a2f672dc815687fe0f83887768d799fd8a3f3276145d20f83aa44d888'),
    'train-labels-idx1-ubyte':
    (8 + 60000,
     'bad3541b69d912435c50bb6ba87bec294ff4f6a2e1246121d8633921760443d9'),
    't10k-images-idx3-ubyte':
    (16 + 10000 * 28 * 28,
     '5b4141f0afbad91edebe8549f8fcffe087ea10ca49f1dbef5c9a5cd8815ce37b'),
    't10k-labels-idx1-ubyte':
    (8 + 10000,
     '0402a96d92fd2663957122ceb108a494c5af83dab82d92729df917d7dec38c34'),
}
#: (path, inode, size, mtime, ctime) of the files found to be the release's,
#: this process: a rewrite changes the ctime, which no ``os.utime`` restores
_RELEASE_CHECKED = set()


def release_problem(path: str, name: str, size_only: bool = False):
    """What is wrong with ``path`` as the release's idx file ``name``
    (None: its size and SHA-256 are the release's; with ``size_only``, its
    SHA-256 only when its size is the release's: a smaller idx file of the
    same name is a set of one's own). Each file is hashed once per process
    while unchanged."""
    import hashlib
    if not osp.exists(path):
        return 'missing'
    stat, (size, sha256) = os.stat(path), FILES[name]
    if stat.st_size != size:
        return None if size_only else (
            f'{stat.st_size} bytes instead of {size} (truncated or altered)')
    key = (osp.realpath(path), stat.st_ino, stat.st_size, stat.st_mtime_ns,
           stat.st_ctime_ns)
    if key in _RELEASE_CHECKED:
        return None
    digest = hashlib.sha256()
    with open(path, 'rb') as f:
        for block in iter(lambda: f.read(1 << 20), b''):
            digest.update(block)
    if digest.hexdigest() != sha256:
        return 'its SHA-256 is not the release\'s (altered)'
    _RELEASE_CHECKED.add(key)
    return None


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
    want = 4 + 4 * ndim + math.prod(dims)
    if size != want:
        return f'{size} bytes, its header says {want}: truncated or altered'
    return None


@DATASETS.register_module()
class FashionMNISTSplit(FashionMNIST):
    """mmpretrain's :class:`FashionMNIST` whose ``split`` alone chooses the
    files ('train': 60k, 'test': 10k): mmpretrain 1.2 reads the test files only
    with ``test_mode=True`` and silently returns the training set otherwise.
    ``data_root`` (relative: the working directory, then the checkout) holds
    the gunzipped idx files. ``with_label=False`` (pretraining) leaves the
    labels out of the samples: a worker hands each label over as a tensor of
    its own, which costs a 28 px image as much as its whole pipeline.

    Args:
        data_root (str): the folder of the gunzipped idx files (relative: the
            working directory, then the checkout).
        split (str): 'train' (60k) or 'test' (10k). Defaults to 'train'.
        download (bool): must stay False: nothing is downloaded at run time.
        with_label (bool): whether samples carry their label (False for
            pretraining). Defaults to True.
        **kwargs: mmpretrain's ``FashionMNIST`` arguments (pipeline, indices,
            ...); ``serialize_data`` defaults to False: the samples are views
            of the file's one array, which mmengine's pickling (~1.7 s a
            60k-image dataset) would copy.
    """

    def __init__(self,
                 data_root: str = '',
                 split: str = 'train',
                 download: bool = False,
                 with_label: bool = True,
                 **kwargs) -> None:
        self.with_label = with_label  # read by load_data_list in __init__
        kwargs.setdefault('serialize_data', False)  # views of one array
        super().__init__(
            data_root=resolve_data_root(data_root),
            split=split,
            download=download,
            **kwargs)

    def load_data_list(self):
        """The split's idx files, checked, as mmpretrain's samples: each
        image a view of the file's one array (mmpretrain converts them one
        by one)."""
        root = self.data_prefix['root']
        if not self._check_exists():
            raise FileNotFoundError(
                f'Fashion-MNIST is not in {osp.abspath(root)} (relative: the '
                f'working directory {os.getcwd()}, then in the checkout {REPO}'
                f'). Fix: {PREPARE}{osp.join(REPO, "data", "fashion_mnist")}')
        files = self.test_list if self.split == 'test' else self.train_list
        paths = [osp.join(root, name.replace('.gz', '')) for name, _ in files]
        for path in paths:
            problem = idx_problem(path) or release_problem(
                path, osp.basename(path), size_only=True)
            if problem:
                raise HPMError(f'{path}: {problem}. Fix: {PREPARE}{root}')
        with warnings.catch_warnings():
            # mmpretrain wraps the read-only file buffer in a tensor that
            # nothing writes to; torch warns about it on every run
            warnings.filterwarnings(
                'ignore', message='The given NumPy array is not writable')
            images = read_image_file(paths[0]).numpy()
            labels = read_label_file(paths[1]).numpy()
        if not self.with_label:
            return [{'img': image} for image in images]
        return [
            dict(img=image, gt_label=np.array(label))
            for image, label in zip(images, labels)
        ]
