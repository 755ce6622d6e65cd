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
