"""The OpenMMLab toolkits' own entry points on hpm_mm's configs (what a
user of mmpretrain, mmdet or mmseg runs): their ``tools/train.py`` (shipped
in each package's ``.mim/``) trains hpm_mm's pretraining config under
hpm_mm's runner and the transfer configs from a converted backbone; without
mmcv's compiled ops the last line mmdet's and mmseg's tools print is
hpm_mm's one-line reason (it was mmengine's "set PYTHONPATH")."""
import importlib.util
import os.path as osp
import subprocess
import sys

import pytest
from helpers import (NEEDS_FULL, REPO, TINY_RUN, det_config, seg_config,
                     tiny_config, tool_main)

pytestmark = NEEDS_FULL

HIDE_OPS = "import sys; sys.modules['mmcv._ext'] = None; "


def toolkit_train(package, config, work, hide_ops=False):
    tool = osp.join(
        osp.dirname(importlib.util.find_spec(package).origin), '.mim', 'tools',
        'train.py')
    code = ((HIDE_OPS if hide_ops else '') + 'import runpy; sys.argv = '
            f'[{tool!r}, {str(config)!r}, "--work-dir", {str(work)!r}]; '
            f'runpy.run_path({tool!r}, run_name="__main__")')
    if not hide_ops:
        code = 'import sys; ' + code
    return subprocess.run([sys.executable, '-c', code],
                          cwd=REPO,
                          text=True,
                          capture_output=True,
                          timeout=900)


def test_mmpretrains_train_runs_hpm_under_hpm_mms_runner(tmp_path):
    cfg = tiny_config(
        tmp_path, body=TINY_RUN.format(keep=1, epochs=1), num_images=8)
    proc = toolkit_train('mmpretrain', cfg, tmp_path / 'w')
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    assert 'precision: fp32' in out and (tmp_path / 'w' /
                                         'epoch_1.pth').exists()


@pytest.mark.parametrize('target,size,make,package',
                         [('mmdet', 128, det_config, 'mmdet'),
                          ('mmseg', 64, seg_config, 'mmseg')])
def test_mmdet_and_mmseg_train_run_the_transfer_configs(
        tmp_path, rgb_hpm_checkpoint, target, size, make, package):
    weights = tmp_path / f'{target}.pth'
    assert tool_main('model_converters/hpm2backbone.py', rgb_hpm_checkpoint,
                     weights, '--target', target, '--img-size',
                     size).returncode == 0
    cfg = make(tmp_path, str(weights))
    cfg = cfg[0] if isinstance(cfg, tuple) else cfg
    proc = toolkit_train(package, cfg, tmp_path / 'w')
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0 and 'Iter(train) [2/2]' in out, out[-3000:]
    hidden = toolkit_train(package, cfg, tmp_path / 'w2', hide_ops=True)
    last = hidden.stderr.strip().splitlines()[-1]
    assert hidden.returncode != 0 and "needs mmcv's compiled ops" in last \
        and 'Fix: bash tools/install.sh full' in last, hidden.stderr[-3000:]
