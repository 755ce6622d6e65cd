"""hpm_mm on the torches setup.py declares (``torch>=2.1``), each in its own
environment made by ``tools/install.sh`` (docs/install.md, two
environments): on the oldest pretraining torch (2.4) a checkpoint saves,
resumes, evaluates, converts and loads into a backbone; on torch 2.1 with
mmcv's compiled ops (a detection user's) pretraining is refused in one line
at its start, a pretraining checkpoint is never loaded as a full pickle,
and converted backbones train Mask R-CNN and UperNet. The environments:
``HPM_STACK_VENVS`` (paths joined by ``os.pathsep``), default
``~/.cache/hpm_mm/stacks/*``; a torch without one is skipped, saying so."""
import glob
import os
import os.path as osp
import subprocess

import pytest
from helpers import (REPO, TINY_RUN, det_config, folder_loader,
                     make_image_folder, seg_config, tiny_config, tool_main)


def _stacks() -> dict:
    paths = os.environ.get('HPM_STACK_VENVS')
    paths = paths.split(os.pathsep) if paths else glob.glob(
        osp.expanduser('~/.cache/hpm_mm/stacks/*'))
    found = {}
    for venv in paths:
        py = osp.join(venv, 'bin', 'python')
        proc = subprocess.run(
            [py, '-c', 'import torch; print(torch.__version__)'],
            capture_output=True,
            text=True) if osp.isfile(py) else None
        if proc is not None and proc.returncode == 0:
            found['.'.join(proc.stdout.strip().split('.')[:2])] = py
    return found


STACKS = _stacks()


def run(py, *args):
    proc = subprocess.run([py, *map(str, args)],
                          cwd=REPO,
                          text=True,
                          capture_output=True,
                          timeout=900,
                          env=dict(
                              os.environ,
                              PYTHONUNBUFFERED='1',
                              PYTHONPATH=REPO))  # this tree's hpm_mm
    return proc.returncode, proc.stdout + proc.stderr, proc.stderr


def knn_config(tmp_path):
    data = make_image_folder(str(tmp_path / 'held_out'), 2, 3)
    hooks = f'''custom_hooks = [
    dict(type='HPMScheduleHook'),
    dict(type='KNNEvalHook', ks=(1, ),
         train_dataloader={folder_loader(data)!r},
         val_dataloader={folder_loader(data)!r})]'''
    return tiny_config(
        tmp_path,
        body=TINY_RUN.format(keep=2, epochs=1),
        hooks=hooks,
        num_images=8)


@pytest.mark.skipif('2.4' not in STACKS, reason='no torch 2.4 environment')
def test_the_oldest_pretraining_torch_runs_the_chain(tmp_path):
    """torch 2.4.1 (the declared pretraining floor): every load of its own
    checkpoint was refused (_codecs.encode outside the allow-list)."""
    py, cfg, work = STACKS['2.4'], knn_config(tmp_path), tmp_path / 'w'
    steps = [
        ('tools/train.py', cfg, '--work-dir', work),
        ('tools/train.py', cfg, '--work-dir', work, '--resume',
         '--cfg-options', 'train_cfg.max_epochs=2', 'resume_changed_run=True'),
        ('tools/analysis_tools/knn_eval.py', cfg, work / 'epoch_2.pth'),
        ('tools/model_converters/hpm2backbone.py', work / 'epoch_2.pth',
         tmp_path / 'vit.pth', '--target', 'mmpretrain'),
        ('-c', 'import hpm_mm; from mmpretrain.models import '
         'VisionTransformer as V; V(arch=dict(embed_dims=16, num_layers=1, '
         'num_heads=2, feedforward_channels=32), img_size=28, patch_size=4, '
         "in_channels=1, init_cfg=dict(type='Pretrained', checkpoint="
         f"{str(tmp_path / 'vit.pth')!r}, prefix='backbone.'))"
         '.init_weights()'),
    ]
    outs = []
    for step in steps:
        rc, out, _ = run(py, *step)
        assert rc == 0, f'{step}:\n{out[-3000:]}'
        outs.append(out)
    assert 'resumed epoch: 1' in outs[1]
    # and the current torch reads what torch 2.4 wrote
    from hpm_mm.apis import load_model
    load_model(cfg, str(work / 'epoch_2.pth'))


@pytest.mark.skipif('2.1' not in STACKS, reason='no torch 2.1 environment')
def test_a_torch_2_1_transfer_environment(tmp_path, rgb_hpm_checkpoint,
                                          hpm_checkpoint):
    """torch 2.1.2 + mmcv 2.1 with its ops: pretraining and pretraining
    checkpoints are refused in one line naming torch >= 2.4 (--resume and
    kNN had loaded them as a full pickle); backbones converted on a current
    torch train the Mask R-CNN and UperNet configs."""
    py = STACKS['2.1']
    for step in (('tools/train.py', tiny_config(tmp_path), '--work-dir',
                  tmp_path / 'w'),
                 ('tools/model_converters/hpm2backbone.py', hpm_checkpoint,
                  tmp_path / 'o.pth', '--target', 'mmpretrain')):
        rc, out, err = run(py, *step)
        last = err.strip().splitlines()[-1]
        assert rc == 1 and 'torch >= 2.4' in last, out[-3000:]
        assert 'Traceback' not in err, err[-3000:]
    # pip install -e . (with dependencies) keeps this torch and setuptools
    # (torch>=2.4 in setup.py had pip replace torch 2.1.2 by a CUDA 13 one)
    rc, out, _ = run(py, '-m', 'pip', 'install', '--dry-run', '--report',
                     tmp_path / 'pip.json', '-e', '.')
    assert rc == 0, out[-3000:]
    import json
    names = {
        i['metadata']['name'].lower()
        for i in json.loads((tmp_path / 'pip.json').read_text())['install']
    }
    assert not names & {'torch', 'torchvision', 'setuptools'}, names
    for target, size, make in (('mmdet', 128, det_config), ('mmseg', 64,
                                                            seg_config)):
        weights = tmp_path / f'{target}.pth'
        assert tool_main('model_converters/hpm2backbone.py',
                         rgb_hpm_checkpoint, weights, '--target', target,
                         '--img-size', size).returncode == 0
        cfg = make(tmp_path / target, str(weights))
        cfg = cfg[0] if isinstance(cfg, tuple) else cfg
        rc, out, _ = run(py, 'tools/train.py', cfg, '--work-dir',
                         tmp_path / f'work_{target}')
        assert rc == 0 and 'Iter(train) [2/2]' in out, out[-3000:]
