import json
import os.path as osp

import numpy as np
import pytest
import torch
from helpers import (FMNIST_CFG, folder_loader, make_image_folder, tiny_config,
                     tool_main, train)
from PIL import Image
from scipy.stats import spearmanr

from hpm_mm.visualization import foreground_iou, saliency_mask, spearman


@pytest.mark.parametrize('seed', range(3))
def test_spearman_matches_scipy(seed):
    g = torch.Generator().manual_seed(seed)
    pred = torch.randn(5, 30, generator=g)
    target = torch.randint(0, 6, (5, 30), generator=g).float()  # ties
    pred[0, :10] = 1.0  # ties in the prediction too
    got = spearman(pred, target)
    for b in range(5):
        want = spearmanr(pred[b].numpy(), target[b].numpy()).statistic
        assert float(got[b]) == pytest.approx(want, abs=1e-6)


def test_saliency_iou():
    pred = torch.zeros(1, 16)
    pred[0, [5, 6, 9, 10]] = 1.  # the 4 centre patches of a 4x4 grid
    sal = saliency_mask(pred, (16, 16), quantile=0.75)
    gt = np.zeros((1, 16, 16), bool)
    gt[0, 4:12, 4:12] = True
    iou = foreground_iou(sal, gt)[0]
    assert 0.5 < iou <= 1.0
    assert foreground_iou(~gt, gt)[0] == 0


def test_tool_writes_grids(tmp_path, hpm_checkpoint):
    folder = make_image_folder(str(tmp_path / 'imgs'), 1, 3)
    out = tmp_path / 'vis'
    proc = tool_main('analysis_tools/visualize_hard_patches.py',
                     FMNIST_CFG, hpm_checkpoint, '--images',
                     osp.join(folder, 'class_0'), '--out-dir', out,
                     '--saliency', '--num-masks', '2')
    assert proc.returncode == 0 and 'Spearman' in proc.stdout, proc.stderr
    # (the teacher's scores are the trained teacher's, loaded in its place:
    # test_whole_load_puts_the_trained_teacher_in_place)
    pngs = sorted(out.glob('*.png'))
    assert [p.name for p in pngs] == ['000.png', '001.png', '002.png']
    w, h = Image.open(pngs[0]).size
    assert (w, h) == (1250, 290)  # 12.5 x 2.9 inches at 100 dpi
    summary = json.loads((out / 'summary.json').read_text())
    assert -1 <= summary['spearman_mean'] <= 1
    assert 0 <= summary['saliency_iou'] <= 1


def test_images_in_class_folders_are_found(tmp_path, hpm_checkpoint):
    """``--images`` on a folder of class folders (nested deeper too) draws
    every image, named by its path there (two classes' 000.png are two
    pictures); it said the folder had no images. An unreadable image is one
    line naming it, before anything is written."""
    root = make_image_folder(str(tmp_path / 'imgs'), 2, 2)
    deeper = tmp_path / 'imgs' / 'class_1' / 'more'
    deeper.mkdir()
    Image.open(osp.join(root, 'class_0', '000.png')).save(deeper / 'x.png')
    out = tmp_path / 'vis'
    args = ('analysis_tools/visualize_hard_patches.py', FMNIST_CFG,
            hpm_checkpoint, '--images', root, '--out-dir', out, '--num-masks',
            '1')
    proc = tool_main(*args)
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in out.glob('*.png')) == [
        'class_0-000.png', 'class_0-001.png', 'class_1-000.png',
        'class_1-001.png', 'class_1-more-x.png'
    ]
    assert json.loads((out / 'summary.json').read_text())['num_images'] == 5
    (deeper / 'bad.png').write_bytes(b'not a png')
    out = tmp_path / 'vis2'
    proc = tool_main(*args[:-3], out, '--num-masks', '1')
    line = proc.stderr.strip()
    assert proc.returncode == 1 and '\n' not in line, line
    assert f'{deeper / "bad.png"} cannot be read' in line, line
    assert not out.exists()


def test_whole_load_puts_the_trained_teacher_in_place(hpm_checkpoint):
    """The pictures' loader (whole=True) fills the EMA teacher with the
    checkpoint's teacher (it had kept its initial weights: the tool drew a
    random teacher's scores, Spearman ~0); the default (student) load
    leaves it out."""
    from mmengine.config import Config

    from hpm_mm.apis import load_model
    from hpm_mm.apis.model import load_checkpoint_strict
    saved = torch.load(hpm_checkpoint, map_location='cpu')['state_dict']
    key = next(
        k for k in saved if k.startswith('teacher.module.backbone.')
        and k.endswith('qkv.weight'))
    for whole in (False, True):
        model = load_model(Config.fromfile(FMNIST_CFG))
        load_checkpoint_strict(
            model,
            hpm_checkpoint,
            whole=whole,
            required_prefix=('backbone.', 'neck.'))
        got = model.state_dict()[key]
        assert torch.equal(got, saved[key]) == whole
        assert torch.equal(model.state_dict()[key[len('teacher.module.'):]],
                           saved[key[len('teacher.module.'):]])


def test_hook_writes_at_intervals(tmp_path):
    folder = make_image_folder(str(tmp_path / 'held_out'), 1, 4, seed=5)
    loader = folder_loader(folder, batch_size=1)
    loader['dataset']['with_label'] = False
    hooks = ("custom_hooks = [dict(type='HPMScheduleHook'), "
             f"dict(type='HardPatchVisHook', dataloader={loader!r}, "
             "num_images=2, interval=2, by_epoch=False, num_masks=2)]")
    cfg = tiny_config(
        tmp_path,
        FMNIST_CFG,
        num_images=12,
        hooks=hooks,
        body='train_cfg = dict(_delete_=True, '
        "type='IterBasedTrainLoop', max_iters=3)\n"
        'param_scheduler = []\n'
        "default_hooks = dict(checkpoint=dict(by_epoch=False,"
        ' interval=3))')
    work = tmp_path / 'work'
    train(cfg, work)
    names = sorted(p.name for p in (work / 'hard_patches').glob('*.png'))
    assert names == [
        'iter_2_img0.png', 'iter_2_img1.png', 'iter_3_img0.png',
        'iter_3_img1.png'
    ]
    logs = list(work.glob('*/vis_data/scalars.json'))
    rows = [json.loads(line) for line in logs[0].read_text().splitlines()]
    assert sum('hpm/spearman' in r for r in rows) == 2


def test_saliency_against_ade20k_label_maps(tmp_path, hpm_checkpoint):
    from helpers import make_ade20k
    root = make_ade20k(str(tmp_path / 'ade'), num_images=2)
    out = tmp_path / 'vis'
    proc = tool_main('analysis_tools/visualize_hard_patches.py', FMNIST_CFG,
                     hpm_checkpoint, '--images',
                     osp.join(root, 'images', 'validation'), '--masks',
                     osp.join(root, 'annotations', 'validation'), '--saliency',
                     '--num-masks', '1', '--out-dir', out)
    assert proc.returncode == 0 and 'saliency IoU' in proc.stdout, \
        proc.stderr
    summary = json.loads((out / 'summary.json').read_text())
    assert 0 <= summary['saliency_iou'] <= 1
    assert len(list(out.glob('*.png'))) == 2


def test_a_pictures_folder_that_cannot_be_written_is_one_line(
        tmp_path, hpm_checkpoint, monkeypatch):
    """Under a file, or read-only (faked: root writes anywhere): one line
    before any work (a traceback after the analysis, for a checkpoint in a
    read-only folder: the pictures' default place)."""
    import tempfile

    from hpm_mm.apis import hard_patches
    from hpm_mm.errors import HPMError
    (tmp_path / 'a_file').write_text('')
    with pytest.raises(HPMError, match='is not a folder. Fix: --out-dir'):
        hard_patches(FMNIST_CFG, hpm_checkpoint,
                     str(tmp_path / 'a_file' / 'pics'))

    def refused(*args, **kwargs):
        raise PermissionError(13, 'Permission denied')

    monkeypatch.setattr(tempfile, 'mkstemp', refused)  # root writes anywhere
    with pytest.raises(HPMError, match='is not writable .*Fix: --out-dir'):
        hard_patches(FMNIST_CFG, hpm_checkpoint, str(tmp_path / 'pics'))
    assert not (tmp_path / 'pics').exists()


def test_the_pictures_run_without_autograd(tmp_path, hpm_checkpoint,
                                           monkeypatch):
    """The analysis builds no autograd graph (hard_patches is no_grad)."""
    import hpm_mm.visualization as vis
    from hpm_mm.apis import hard_patches
    seen, real = [], vis.analyze_hard_patches

    def spy(*args, **kwargs):
        seen.append(torch.is_grad_enabled())
        return real(*args, **kwargs)

    monkeypatch.setattr(vis, 'analyze_hard_patches', spy)
    folder = make_image_folder(str(tmp_path / 'imgs'), 1, 2)
    hard_patches(
        FMNIST_CFG,
        hpm_checkpoint,
        str(tmp_path / 'vis'),
        images=osp.join(folder, 'class_0'),
        num_masks=1)
    assert seen == [False]
