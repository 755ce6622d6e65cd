"""Prepare the embedded Fashion-MNIST data for mmpretrain's ``FashionMNIST``.

Debian's ``dataset-fashion-mnist`` package ships the 70k real images as gzipped
idx files under ``/usr/share/datasets/fashion-mnist``; mmpretrain reads the
gunzipped files from ``data_root``. This script gunzips them into ``--out``
(default ``data/fashion_mnist``), checks their sizes and SHA-256 sums (every
run: a truncated or altered file is prepared again), and installs the
Debian package first when it is missing and apt can be used.

    python tools/dataset_converters/prepare_fashion_mnist.py
"""
import argparse
import gzip
import os
import os.path as osp
import shutil
import subprocess
import sys

# the release's sizes and SHA-256 sums, which the dataset checks too
from hpm_mm.datasets.fashion_mnist import FILES, release_problem

DEBIAN_DIR = '/usr/share/datasets/fashion-mnist'
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


def problem(path: str, name: str):
    """What is wrong with ``path`` as the idx file ``name`` (None: it is
    the release's file, by size and SHA-256)."""
    return release_problem(path, name)


def prepare(src: str, out: str) -> str:
    """Gunzip the idx files from ``src`` into ``out`` where they are not
    the release's files, as a set (a stop leaves no part file); ``out``
    tried by making a file there before any work. Returns ``out``."""
    from hpm_mm.engine.work_dir import check_writable, write_outputs
    from hpm_mm.errors import HPMError
    wrong = {f: problem(osp.join(out, f), f) for f in FILES}
    wrong = {f: p for f, p in wrong.items() if p}
    if not wrong:
        print(f'[data] Fashion-MNIST ready in {out} (sizes and SHA-256 '
              'checked)')
        return out
    try:  # before the package install and the gunzip
        check_writable(out, 'the data folder (--out)', folder=True)
    except HPMError as e:
        raise SystemExit(str(e)) from None
    for f, p in wrong.items():
        if p != 'missing':
            print(f'[data] {osp.join(out, f)}: {p}; preparing it again')
    if not all(osp.exists(osp.join(src, f + '.gz')) for f in wrong):
        if src != DEBIAN_DIR or not _install_debian_package():
            raise SystemExit(APT_HINT)

    def gunzip(name):

        def write(part):
            with gzip.open(osp.join(src, name + '.gz'), 'rb') as fin, \
                    open(part, 'wb') as fout:
                shutil.copyfileobj(fin, fout)
            bad = problem(part, name)
            if bad:
                raise SystemExit(
                    f'{osp.join(src, name)}.gz gunzips to a file of {bad}: '
                    'the source is corrupt. Fix: reinstall dataset-fashion-'
                    'mnist (apt-get install --reinstall -y dataset-fashion-'
                    'mnist).')

        return write

    write_outputs({osp.join(out, name): gunzip(name) for name in wrong})
    print(f'[data] Fashion-MNIST written to {out} ({len(wrong)} of '
          f'{len(FILES)} files; sizes and SHA-256 checked)')
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
