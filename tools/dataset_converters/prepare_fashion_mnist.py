"""Prepare the embedded Fashion-MNIST data for mmpretrain's ``FashionMNIST``.

Debian's ``dataset-fashion-mnist`` package ships the 70k real images as gzipped
idx files under ``/usr/share/datasets/fashion-mnist``; mmpretrain reads the
gunzipped files from ``data_root``. This script gunzips them into ``--out``
(default ``data/fashion_mnist``), checks their sizes, and installs the Debian
package first when it is missing and apt can be used.

    python tools/dataset_converters/prepare_fashion_mnist.py
"""
import argparse
import gzip
import os
import os.path as osp
import shutil
import subprocess
import sys

DEBIAN_DIR = '/usr/share/datasets/fashion-mnist'
# file name -> number of bytes of the gunzipped idx file (header + payload)
FILES = {
    'train-images-idx3-ubyte': 16 + 60000 * 28 * 28,
    'train-labels-idx1-ubyte': 8 + 60000,
    't10k-images-idx3-ubyte': 16 + 10000 * 28 * 28,
    't10k-labels-idx1-ubyte': 8 + 10000,
}
APT_HINT = ('Fashion-MNIST is missing. Run (as root): '
            'apt-get update && apt-get install -y dataset-fashion-mnist, '
            'or put the four *-ubyte.gz files in --src.')


def _install_debian_package() -> bool:
    if os.geteuid() != 0 or shutil.which('apt-get') is None:
        return False
    print('[data] installing Debian package dataset-fashion-mnist ...')
    env = dict(os.environ, DEBIAN_FRONTEND='noninteractive')
    ok = subprocess.call(
        ['apt-get', 'install', '-y', '-qq', 'dataset-fashion-mnist'],
        env=env) == 0
    if not ok:
        ok = (
            subprocess.call(['apt-get', 'update', '-qq'], env=env) == 0
            and subprocess.call(
                ['apt-get', 'install', '-y', '-qq', 'dataset-fashion-mnist'],
                env=env) == 0)
    return ok


def prepare(src: str, out: str) -> str:
    """Gunzip the idx files from ``src`` into ``out``; return ``out``."""
    if all(
            osp.exists(osp.join(out, f)) and osp.getsize(osp.join(out, f)) == n
            for f, n in FILES.items()):
        print(f'[data] Fashion-MNIST ready in {out}')
        return out
    if not all(osp.exists(osp.join(src, f + '.gz')) for f in FILES):
        if src != DEBIAN_DIR or not _install_debian_package():
            raise SystemExit(APT_HINT)
    os.makedirs(out, exist_ok=True)
    for name, size in FILES.items():
        dst = osp.join(out, name)
        tmp = dst + '.part'
        with gzip.open(osp.join(src, name + '.gz'), 'rb') as fin, \
                open(tmp, 'wb') as fout:
            shutil.copyfileobj(fin, fout)
        if osp.getsize(tmp) != size:
            os.remove(tmp)
            raise SystemExit(f'{name}: expected {size} bytes after gunzip, '
                             f'got {osp.getsize(tmp)}; the source is '
                             'corrupt. Reinstall dataset-fashion-mnist.')
        os.replace(tmp, dst)
    print(f'[data] Fashion-MNIST (70000 images) written to {out}')
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        '--src', default=DEBIAN_DIR, help='folder with the *-ubyte.gz files')
    parser.add_argument(
        '--out',
        default='data/fashion_mnist',
        help='output folder (the config data_root)')
    args = parser.parse_args(argv)
    prepare(args.src, args.out)


if __name__ == '__main__':
    sys.exit(main())
