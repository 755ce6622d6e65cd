"""FashionMNISTSplit: the embedded data found from any folder, the real fix
when it is missing."""
import os.path as osp

import hpm_mm  # noqa: F401  (allow-lists the checkpoint types for torch.load)


def test_missing_dataset_gives_the_real_fix(tmp_path, monkeypatch):
    import pytest

    from hpm_mm.datasets import FashionMNISTSplit
    from hpm_mm.datasets.fashion_mnist import REPO
    monkeypatch.chdir(tmp_path)
    with pytest.raises(FileNotFoundError) as e:
        FashionMNISTSplit(data_root='data/not_prepared/', split='test')
    msg = str(e.value)
    where = osp.join(str(tmp_path), 'data', 'not_prepared')
    assert f'Fashion-MNIST is not in {where}' in msg
    assert f'working directory {tmp_path}, then in the checkout {REPO}' \
        in msg
    assert 'prepare_fashion_mnist.py --out' in msg
    assert 'download=True' not in msg
    assert not (tmp_path / 'data').exists()  # nothing left behind


def test_configs_find_the_embedded_data_from_any_folder(tmp_path, monkeypatch):
    """The configs' relative data_root resolves in the checkout when the
    working directory has no data/ (issue #30)."""
    import pytest

    from hpm_mm.datasets import FashionMNISTSplit
    from hpm_mm.datasets.fashion_mnist import REPO
    if not osp.exists(osp.join(REPO, 'data', 'fashion_mnist')):
        pytest.skip('the embedded data is not prepared in this checkout')
    monkeypatch.chdir(tmp_path)
    ds = FashionMNISTSplit(data_root='data/fashion_mnist/', split='test')
    assert len(ds) == 10000
    assert ds.data_prefix['root'] == osp.join(REPO, 'data', 'fashion_mnist/')


def test_a_truncated_or_foreign_file_is_named_with_its_fix(tmp_path):
    """A truncated idx file, or one with a bad magic number, is refused in
    one line naming the file (not a reshape traceback deep in mmpretrain)."""
    import struct

    import pytest

    from hpm_mm.datasets import FashionMNISTSplit
    from hpm_mm.errors import HPMError
    root = tmp_path / 'fm'
    root.mkdir()
    images = struct.pack('>4I', 2051, 3, 28, 28) + bytes(3 * 28 * 28)
    labels = struct.pack('>2I', 2049, 3) + bytes(3)
    for split in ('train', 't10k'):
        (root / f'{split}-images-idx3-ubyte').write_bytes(images)
        (root / f'{split}-labels-idx1-ubyte').write_bytes(labels)
    assert len(FashionMNISTSplit(data_root=str(root), split='test')) == 3
    for name, data, words in (
        ('t10k-images-idx3-ubyte', images[:1000], 'truncated or altered'),
        ('t10k-images-idx3-ubyte', b'\x89PNG' + images[4:], 'bad magic'),
    ):
        (root / name).write_bytes(data)
        with pytest.raises(HPMError) as e:
            FashionMNISTSplit(data_root=str(root), split='test')
        msg = str(e.value)
        assert '\n' not in msg and msg.startswith(str(root / name))
        assert words in msg and 'prepare_fashion_mnist.py --out' in msg


def test_prepare_checks_every_file_and_prepares_a_bad_one_again(tmp_path):
    """Sizes and SHA-256 on every run: a truncated file is prepared again
    from the Debian package's files (where this machine has them)."""
    import hashlib
    import shutil

    import pytest

    from hpm_mm.datasets.fashion_mnist import REPO
    spec = __import__('importlib.util').util.spec_from_file_location(
        'prep',
        osp.join(REPO, 'tools', 'dataset_converters',
                 'prepare_fashion_mnist.py'))
    prep = __import__('importlib.util').util.module_from_spec(spec)
    spec.loader.exec_module(prep)
    if not osp.isdir(prep.DEBIAN_DIR):
        pytest.skip("Debian's dataset-fashion-mnist is not installed here")
    out = tmp_path / 'fm'
    prep.prepare(prep.DEBIAN_DIR, str(out))
    labels = out / 't10k-labels-idx1-ubyte'
    from hpm_mm.datasets.fashion_mnist import FILES
    assert hashlib.sha256(labels.read_bytes()).hexdigest() == \
        FILES[labels.name][1]
    labels.write_bytes(labels.read_bytes()[:100])
    assert 'truncated' in prep.problem(str(labels), labels.name)
    prep.prepare(prep.DEBIAN_DIR, str(out))
    assert prep.problem(str(labels), labels.name) is None
    # an altered byte, same size: the SHA-256 finds it
    data = bytearray(labels.read_bytes())
    data[50] ^= 1
    labels.write_bytes(bytes(data))
    assert 'SHA-256' in prep.problem(str(labels), labels.name)
    shutil.rmtree(out)


def test_an_altered_release_file_is_refused_on_every_path(tmp_path):
    """A file of the release's size whose SHA-256 is not the release's (an
    altered byte) is refused by the dataset itself, so tools/train.py and
    the apis check it too (only install.sh and main_job.sh did), also with
    its mtime put back; a smaller idx file of the same name is a set of
    one's own."""
    import os
    import shutil

    import pytest

    from hpm_mm.datasets import FashionMNISTSplit
    from hpm_mm.datasets.fashion_mnist import REPO
    from hpm_mm.errors import HPMError
    prepared = osp.join(REPO, 'data', 'fashion_mnist')
    if not osp.exists(osp.join(prepared, 't10k-labels-idx1-ubyte')):
        pytest.skip('the embedded data is not prepared in this checkout')
    root = tmp_path / 'fm'
    root.mkdir()
    for name in ('t10k-images-idx3-ubyte', 't10k-labels-idx1-ubyte'):
        shutil.copy(osp.join(prepared, name), root / name)
    for name in ('train-images-idx3-ubyte', 'train-labels-idx1-ubyte'):
        (root / name).symlink_to(osp.join(prepared, name))
    assert len(FashionMNISTSplit(data_root=str(root), split='test')) == 10000
    labels = root / 't10k-labels-idx1-ubyte'
    data = bytearray(labels.read_bytes())
    data[50] = (data[50] + 1) % 10  # another class, same size
    before = os.stat(labels)
    labels.write_bytes(bytes(data))  # its mtime put back: checked again
    os.utime(labels, ns=(before.st_atime_ns, before.st_mtime_ns))
    with pytest.raises(HPMError) as e:
        FashionMNISTSplit(data_root=str(root), split='test')
    msg = str(e.value)
    assert '\n' not in msg and msg.startswith(str(labels))
    assert "SHA-256 is not the release's" in msg and \
        'prepare_fashion_mnist.py --out' in msg


def test_pretraining_samples_carry_no_labels(tmp_path):
    """``with_label=False`` (the pretraining configs' train set): the packed
    samples hold no label (each would travel from a worker as a tensor of
    its own); the images are the same as with labels."""
    import struct

    import numpy as np
    from helpers import REPO
    from mmengine.config import Config
    from mmengine.registry import init_default_scope

    from hpm_mm.datasets import FashionMNISTSplit
    init_default_scope('mmpretrain')
    root = tmp_path / 'fm'
    root.mkdir()
    pixels = np.random.default_rng(0).integers(0, 256, 3 * 28 * 28, np.uint8)
    images = struct.pack('>4I', 2051, 3, 28, 28) + pixels.tobytes()
    labels = struct.pack('>2I', 2049, 3) + bytes([4, 1, 7])
    for split in ('train', 't10k'):
        (root / f'{split}-images-idx3-ubyte').write_bytes(images)
        (root / f'{split}-labels-idx1-ubyte').write_bytes(labels)
    pipeline = [dict(type='PackInputs')]
    plain, bare = (
        FashionMNISTSplit(
            data_root=str(root), split='train', pipeline=pipeline, **kw)
        for kw in ({}, dict(with_label=False)))
    assert [int(plain[i]['data_samples'].gt_label) for i in range(3)] == \
        [4, 1, 7]
    for i in range(3):
        assert 'gt_label' not in bare[i]['data_samples']
        assert bare[i]['inputs'].equal(plain[i]['inputs'])
    cfg = Config.fromfile(f'{REPO}/configs/_base_/datasets/'
                          'fashion_mnist_mim.py')
    assert cfg.train_dataloader.dataset.with_label is False
    assert cfg.knn_hook.train_dataloader.dataset.get('with_label', True)


def test_the_samples_are_mmpretrains_of_the_split_asked_for():
    """Both splits' samples as mmpretrain's ``FashionMNIST`` reads them
    (its ``test_mode`` choosing the files), image for image and label for
    label, and without labels for pretraining (``with_label=False``)."""
    import numpy as np
    import pytest
    from mmpretrain.datasets import FashionMNIST

    from hpm_mm.datasets import FashionMNISTSplit
    from hpm_mm.datasets.fashion_mnist import REPO
    root = osp.join(REPO, 'data', 'fashion_mnist')
    if not osp.exists(root):
        pytest.skip('the embedded data is not prepared in this checkout')
    for split in ('train', 'test'):
        ours = FashionMNISTSplit(data_root=root, split=split)
        theirs = FashionMNIST(data_root=root, test_mode=split == 'test')
        assert len(ours) == len(theirs) == (60000
                                            if split == 'train' else 10000)
        for i in (0, 1, 777, len(ours) - 1):
            a, b = ours.get_data_info(i), theirs.get_data_info(i)
            assert a.keys() == b.keys() == {'img', 'gt_label', 'sample_idx'}
            assert a['img'].dtype == b['img'].dtype == np.uint8
            assert np.array_equal(a['img'], b['img'])
            assert a['gt_label'].dtype == b['gt_label'].dtype == np.int64
            assert a['gt_label'].shape == b['gt_label'].shape == ()
            assert a['gt_label'] == b['gt_label']
        every = range(len(ours)) if split == 'test' else range(0, 60000, 997)
        assert np.array_equal(
            np.stack([ours.get_data_info(i)['img'] for i in every]),
            np.stack([theirs.get_data_info(i)['img'] for i in every]))
        assert [int(ours.get_data_info(i)['gt_label']) for i in every] == \
            [int(theirs.get_data_info(i)['gt_label']) for i in every]
    unlabelled = FashionMNISTSplit(data_root=root, with_label=False)
    assert unlabelled.get_data_info(3).keys() == {'img', 'sample_idx'}
