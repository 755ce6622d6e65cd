"""hpm_mm.apis.pretrain_folder(..., start_from=CKPT) (tools/pretrain_folder.py
--from): HPM continued on a folder of images from an imported authors'
checkpoint or an hpm_mm one: its model, size and normalisation, its student
and teacher, the continued recipe, the stop and resume, the refusals."""
import argparse
import os
import os.path as osp

import numpy as np
import pytest
import torch
from helpers import (FMNIST_CFG, TINY_RUN, make_image_folder, tiny_config,
                     tiny_hpm_cfg, tool_main, train)

from hpm_mm.errors import HPMError


def _pretrain(root, work, **kwargs):
    """pretrain_folder(root, work, **kwargs): (its result, its lines)."""
    from hpm_mm.apis import pretrain_folder
    lines = []
    result = pretrain_folder(str(root), str(work), log=lines.append, **kwargs)
    return result, '\n'.join(lines)


def authors_file(path, predictor=True, ema=False, seed=0):
    """A tiny HPM (32 px RGB, patch 8, 32-d x 2 blocks, 16-d decoders) saved
    in the authors' layout (timm names, ``model`` [+ ``model_ema``], their
    epoch and args), every tensor random; ``predictor=False``: MAE's
    visualize release (no loss predictor)."""
    from mmpretrain.registry import MODELS

    from hpm_mm.apis.convert import OFFICIAL_NAMES, rename
    g = torch.Generator().manual_seed(seed)
    names = MODELS.build(tiny_hpm_cfg(32, 8, 3)).state_dict()

    def state():
        return {
            rename(k, OFFICIAL_NAMES, False):
            torch.randn(v.shape, generator=g)
            for k, v in names.items()
            if not k.startswith(('teacher.', 'data_preprocessor')) and (
                predictor or '.predictor.' not in k)
        }

    ckpt = dict(
        model=state(), epoch=799, args=argparse.Namespace(norm_pix_loss=False))
    if ema:
        ckpt['model_ema'] = state()
    torch.save(ckpt, path)
    return str(path)


def imported(tmp_path, **kwargs):
    """An authors' file (:func:`authors_file`) imported: the path."""
    from hpm_mm.apis import import_official
    src = authors_file(tmp_path / 'authors.pth', **kwargs)
    out = str(tmp_path / 'imported.pth')
    import_official(src, out, num_heads=2, decoder_num_heads=2)
    return out


def hpm_mm_checkpoint(tmp_path):
    """The checkpoints of an hpm_mm run of the Fashion-MNIST config (a tiny
    model, 28 px grayscale, patch 4; two epochs on generated images): the
    paths of epoch 1 and epoch 2."""
    source = tmp_path / 'source'
    source.mkdir()
    cfg = tiny_config(
        source, FMNIST_CFG, TINY_RUN.format(keep=2, epochs=2), num_images=8)
    train(cfg, source / 'work')
    return [str(source / 'work' / f'epoch_{i}.pth') for i in (1, 2)]


def first_step_hook():
    """A hook that keeps the model's state before the first step."""
    from mmengine.hooks import Hook

    class FirstStep(Hook):
        priority = 'VERY_HIGH'
        state = None

        def before_train_iter(self, runner, batch_idx, data_batch=None):
            if self.state is None:
                self.state = {
                    k: v.detach().clone()
                    for k, v in runner.model.state_dict().items()
                }

    return FirstStep()


def test_from_an_authors_import_starts_from_its_student_and_teacher(tmp_path):
    """The written config builds the checkpoint's model; before the first
    step every student tensor is the file's and every teacher tensor its
    EMA entry's (the first EMA step averages, it does not copy)."""
    from hpm_mm.apis import build_runner, train_config
    from hpm_mm.engine.safe_load import load_file
    ckpt = imported(tmp_path, ema=True)
    folder = make_image_folder(str(tmp_path / 'imgs'), 2, 6, size=40)
    result, out = _pretrain(
        folder, tmp_path / 'w', start_from=ckpt, epochs=1, dry_run=True)
    runner = build_runner(train_config(result['config'], str(tmp_path / 'w')))
    hook = first_step_hook()
    runner.register_hook(hook)
    runner.train()
    saved = load_file(ckpt)['state_dict']
    fresh = runner.model.state_dict()  # (trained now: not the file's)
    floats = [k for k, v in saved.items() if v.is_floating_point()]
    assert {k
            for k in saved if k.startswith('teacher.')
            } and all(torch.equal(hook.state[k], saved[k]) for k in floats), [
                k for k in floats if not torch.equal(hook.state[k], saved[k])
            ][:3]
    assert int(hook.state['teacher.steps']) >= 1  # averaged, not copied
    s = 'backbone.patch_embed.projection.weight'
    t = 'teacher.module.' + s
    assert not torch.equal(saved[s], saved[t])  # the EMA entry is its own
    assert not torch.equal(fresh[s], saved[s])  # and the run trained
    # the config holds the folder's and the checkpoint's values only
    written = open(result['config']).read()
    assert "_base_ = 'from_checkpoint.py'" in written
    assert f'load_from = {ckpt!r}' in written and 'resume = False' in written
    assert 'arch' not in written and 'num_patches' not in written


def test_from_an_authors_import_end_to_end_with_the_rules(tmp_path, capsys):
    """tools/pretrain_folder.py --from an import on grayscale images: its 32
    px RGB model (the channel to all 3), the continued recipe in the one
    line, kNN, the grids and the export line, which runs."""
    from hpm_mm.apis import load_config
    ckpt = imported(tmp_path)
    folder = make_image_folder(str(tmp_path / 'imgs'), 2, 10, size=40)
    work = tmp_path / 'w'
    proc = tool_main('pretrain_folder.py', folder, '--from', ckpt,
                     '--work-dir', str(work), '--epochs', '2')
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(x for x in proc.stdout.splitlines() if 'images' in x)
    assert '20 images, 2 classes' in line and '32x32 RGB (grayscale images' \
        ' as RGB), patch 8;' in line, line
    assert "lr 4.69e-06 (0.00015 per 256 images, the checkpoint's), " \
        'warm-up 2 steps then cosine, alpha 0.5 -> 0.5 (where its run ' \
        'ended)' in line and 'batch 8, 2 epochs of 3 steps' in line
    assert 'kNN top-1 (16 bank / 4 held-out images)' in proc.stdout
    assert len(list((work / 'hard_patches').glob('*.png'))) == 4
    export = proc.stdout.strip().splitlines()[-1]
    assert f'tools/model_converters/hpm2backbone.py {work}/epoch_2.pth ' \
        f'{work}/backbone.pth --target mmpretrain' in export, export
    args = export.split('python ')[1].split(' (')[0].split()
    done = tool_main(args[0].split('tools/')[1], *args[1:])
    assert done.returncode == 0 and (work / 'backbone.pth').exists(), \
        done.stderr[-2000:]
    # the one rule for channels: the grayscale file as 3 equal channels
    cfg = load_config(str(work / 'hpm_folder.py'))
    from mmpretrain.registry import DATASETS
    item = DATASETS.build(cfg.custom_hooks[-1].dataloader.dataset)[0]
    x = item['inputs']
    assert x.shape == (3, 32, 32) and torch.equal(x[0], x[1]) and \
        torch.equal(x[1], x[2])


def test_from_an_hpm_mm_checkpoint_stops_and_resumes_its_own_run(
        tmp_path, monkeypatch):
    """--from the Fashion-MNIST config's checkpoint on RGB images: 28 px
    grayscale (colour as luminance); stopped after its first epoch, the
    same call resumes its own run (not the checkpoint again); another
    start in that work dir is refused."""
    from mmpretrain.registry import DATASETS
    from PIL import Image

    from hpm_mm.apis import load_config
    from hpm_mm.engine.hooks import AtomicCheckpointHook
    halfway, ckpt = hpm_mm_checkpoint(tmp_path)
    folder = make_image_folder(
        str(tmp_path / 'rgb'), 2, 8, size=28, gray=False)
    rng = np.random.default_rng(1)
    colour = sorted((tmp_path / 'rgb' / 'class_0').iterdir())
    for f in colour:  # colour, not gray as RGB
        Image.fromarray(rng.integers(0, 255, (28, 28, 3), np.uint8)).save(f)
    _, out = _pretrain(  # epoch 1 of 2: the schedule where it stood
        tmp_path / 'rgb',
        tmp_path / 'w1',
        start_from=halfway,
        dry_run=True)
    assert 'alpha 0.25 -> 0.5 (where its run stood (epoch 1 of 2))' in out, \
        out
    save = AtomicCheckpointHook.after_train_epoch

    def stop_after_first(self, runner):
        save(self, runner)
        if runner.epoch == 0:
            raise KeyboardInterrupt

    monkeypatch.setattr(AtomicCheckpointHook, 'after_train_epoch',
                        stop_after_first)
    work = tmp_path / 'w'
    with pytest.raises(KeyboardInterrupt):  # (resume asked: nothing yet)
        _pretrain(folder, work, start_from=ckpt, epochs=2, resume=True)
    monkeypatch.setattr(AtomicCheckpointHook, 'after_train_epoch', save)
    first = open(next(work.glob('*/*.log'))).read()
    assert f'Load checkpoint from {ckpt}' in first, first[-2000:]
    assert (work / 'epoch_1.pth').exists()
    assert not (work / 'epoch_2.pth').exists()
    result, out = _pretrain(folder, work, start_from=ckpt, epochs=2)
    assert '28x28 grayscale (colour images as luminance), patch 4' in out
    assert 'alpha 0.5 -> 0.5 (where its run ended)' in out
    assert 'holds a run on these same images: continuing' in out
    log = open(result['runner'].logger.log_file).read()
    assert f'resume: from {work}/epoch_1.pth' in log, log[-3000:]
    assert torch.load(work / 'epoch_2.pth')['meta']['epoch'] == 2
    # the one rule for channels: a colour file as PIL's luminance
    cfg = load_config(str(work / 'hpm_folder.py'))
    dataset = DATASETS.build(cfg.custom_hooks[-1].dataloader.dataset)
    item = dataset[0]  # (the held-out fifth's first: class_0's)
    path = item['data_samples'].img_path
    assert path in map(str, colour) and item['inputs'].shape == (1, 28, 28)
    want = np.asarray(Image.open(path).convert('L'))
    assert np.array_equal(item['inputs'][0].numpy(), want)
    # another start in the stopped run's work dir: one line, nothing moved
    before = sorted(os.listdir(work))
    with pytest.raises(HPMError) as refused:
        _pretrain(folder, work, epochs=2)
    assert f'holds a run from {ckpt}; this one starts from scratch' in str(
        refused.value) and f'--from {ckpt} to continue' in str(refused.value)
    assert sorted(os.listdir(work)) == before
    # the start is the resume room's record in the run's checkpoints, not
    # the written config's load_from (without it the run had gone on)
    os.remove(work / 'hpm_folder.py')
    with pytest.raises(HPMError, match=f'holds a run from {ckpt}; this one'):
        _pretrain(folder, work, epochs=2)


def test_an_untrained_predictor_trains_from_the_start_of_the_schedule(
        tmp_path):
    """MAE's import (no loss predictor) is not refused: the schedule starts
    at alpha_0 and the line says why; --alpha-0 and --lr override. A
    long path with spaces is the same start when the run goes on."""
    import shutil
    ckpt = imported(tmp_path, predictor=False)
    spaced = tmp_path / ('a folder name with spaces ' * 3) / 'the import.pth'
    spaced.parent.mkdir()
    ckpt = str(shutil.copy(ckpt, spaced))
    folder = make_image_folder(str(tmp_path / 'imgs'), 2, 4, size=32)
    _, out = _pretrain(
        folder, tmp_path / 'w', start_from=ckpt, epochs=1, dry_run=True)
    assert 'alpha 0 -> 0.5 (untrained predictor neck.predictor.: from ' \
        'the start)' in out, out
    (tmp_path / 'w' / 'epoch_1.pth').write_bytes(b'')  # as after a stop
    _, out = _pretrain(
        folder, tmp_path / 'w', start_from=ckpt, epochs=1, dry_run=True)
    assert 'holds a run on these same images: continuing' in out
    result, out = _pretrain(
        folder,
        tmp_path / 'w2',
        start_from=ckpt,
        epochs=1,
        dry_run=True,
        lr=0.01,
        alpha_0=0.25)
    assert 'lr 0.01, warm-up' in out and 'alpha 0.25 -> 0.5 (given)' in out
    from hpm_mm.apis import load_config
    cfg = load_config(result['config'])
    assert cfg.optim_wrapper.optimizer.lr == 0.01
    assert cfg.model.mask_generator.alpha_0 == 0.25


def test_the_continued_recipe_reaches_its_learning_rate(tmp_path):
    """A run of 8 steps (a 1-step warm-up had left mmengine's LinearLR at
    its start factor, 1e-3 of the rate, for the whole run): the written
    schedulers reach the printed lr, then decay."""
    from mmengine.registry import PARAM_SCHEDULERS

    from hpm_mm.apis import load_config
    ckpt = imported(tmp_path)
    folder = make_image_folder(str(tmp_path / 'imgs'), 2, 8, size=32)
    result, out = _pretrain(
        folder,
        tmp_path / 'w',
        start_from=ckpt,
        epochs=1,
        batch_size=2,
        dry_run=True)
    assert '1 epochs of 8 steps' in out, out
    cfg, lr = load_config(result['config']), result['settings']['lr']
    optimizer = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=lr)
    schedulers = [
        PARAM_SCHEDULERS.build(dict(s, optimizer=optimizer, epoch_length=8))
        for s in cfg.param_scheduler
    ]
    seen = []
    for _ in range(8):
        seen.append(optimizer.param_groups[0]['lr'])
        optimizer.step()
        for s in schedulers:
            s.step()
    assert max(seen) == pytest.approx(lr, rel=0.05), seen
    assert seen[0] < lr / 100 and seen[-1] < max(seen), seen


@pytest.mark.parametrize('case, says', [
    ('no config', 'holds no saved config (meta.cfg)'),
    ('bad config', 'its saved config (meta.cfg) does not load'),
    ('nan', 'holds non-finite values (NaN/inf)'),
    ('size', '--img-size 64: the checkpoint serves 32 (32 px inputs, 4x4 '
     'patches of 8 px'),
    ('channels', '--channels 1: the checkpoint serves 3'),
    ('batch', '12 images cannot fill one batch of 16. Fix: --batch-size 12'),
    ('lr', 'lr=0.0 is not a positive number. Fix:'),
    ('work dir', 'is the image folder. Fix: another --work-dir'),
])
def test_refusals_are_one_line_before_anything_is_written(
        tmp_path, case, says):
    ckpt = imported(tmp_path)
    if case == 'no config':  # the authors' file itself, not imported
        ckpt = str(tmp_path / 'authors.pth')
    elif case in ('bad config', 'nan'):  # a config cut short; a NaN
        saved = torch.load(ckpt)
        if case == 'nan':
            saved['state_dict']['backbone.ln1.weight'][0] = float('nan')
        else:
            saved['meta']['cfg'] = saved['meta']['cfg'][:200]
        torch.save(saved, ckpt)
    folder = make_image_folder(str(tmp_path / 'imgs'), 2, 6, size=32)
    kwargs = dict(
        size=dict(img_size=64),
        channels=dict(channels=1),
        batch=dict(batch_size=16),
        lr=dict(lr=0.0)).get(case, {})
    work = tmp_path / ('imgs/../imgs' if case == 'work dir' else 'w')
    with pytest.raises(HPMError) as refused:
        _pretrain(folder, work, start_from=ckpt, **kwargs)
    assert says in str(refused.value) and 'Fix:' in str(refused.value) and \
        '\n' not in str(refused.value), refused.value
    assert case == 'work dir' or not osp.exists(work) or os.listdir(work) \
        == ['.run.lock']
    assert sorted(os.listdir(folder)) == ['class_0', 'class_1']
