"""HPM pretraining on a folder of your own images, from Python."""
import json
import os
import os.path as osp
from contextlib import contextmanager
from statistics import median
from typing import Callable, Dict, Optional

from hpm_mm.datasets.image_folder import split_labelled
from hpm_mm.engine.schedule import scale_recipe, steps_per_epoch
from hpm_mm.errors import HPMError

#: the image-folder base: the main job's model and recipe (docs/own_data.md)
FOLDER_CONFIG = 'hpm/hpm-fast_vit-mini-p4_1xb256-coslr-10e_image-folder.py'

SIZES = (32, 64, 96, 128, 224)  # candidate input sizes
TARGET_STEPS = 400  # the main job's schedule length


def choose_settings(scan: Dict,
                    img_size: Optional[int] = None,
                    channels: Optional[int] = None,
                    batch_size: Optional[int] = None,
                    epochs: Optional[int] = None) -> Dict:
    """Defaults from the images, each overridable: the largest of
    :data:`SIZES` not above the median short side, an 8 x 8 patch grid (16 px
    patches at 224), 1 channel when every image is, batch 256 or an eighth
    of the images, about :data:`TARGET_STEPS` steps in 10..200 epochs."""
    n = len(scan['files'])
    short = median(min(s) for s in scan['sizes'])
    size = img_size if img_size is not None else max(
        [s for s in SIZES if s <= short] or [SIZES[0]])
    patch = 16 if size >= 224 else size // 8
    if size % patch:
        raise HPMError(f'--img-size {size}: must be a multiple of '
                       f'{patch} (patch size). Fix: use one of {SIZES}.')
    ch = channels if channels is not None else (1 if scan['gray'] else 3)
    batch = batch_size if batch_size is not None else max(8, min(256, n // 8))
    batch = min(batch, n)
    steps = steps_per_epoch(n, batch)  # the loader keeps the last batch
    ep = epochs if epochs is not None else int(
        min(200, max(10, round(TARGET_STEPS / steps))))
    return dict(
        img_size=size,
        patch_size=patch,
        channels=ch,
        batch_size=batch,
        epochs=ep,
        steps_per_epoch=steps,
        median_short_side=short,
        num_images=n)


def folder_config(base_path: str, root: str, work_dir: str, scan: Dict,
                  settings: Dict, stats: Dict) -> str:
    """The config of a run on the folder ``root``: it inherits
    ``base_path`` (the image-folder base) and holds only the folder's
    values (its ``image`` spec, file lists, batch size, the recipe scaled to
    the run, the hooks' held-out lists). Writes the file lists into
    ``work_dir``; returns the config's text."""
    import pprint

    from mmengine.config import Config
    root, work_dir = osp.abspath(root), osp.abspath(work_dir)
    os.makedirs(work_dir, exist_ok=True)

    def write(name, rows):
        path = osp.join(work_dir, name)
        with open(path, 'w') as f:
            f.writelines(f'{row}\n' for row in rows)
        return path

    def dataset(ann_file, with_label):
        ds = dict(
            type='CustomDataset',
            data_root=root,
            data_prefix='',
            ann_file=ann_file,
            with_label=with_label,
            pipeline='{{_base_.eval_pipeline}}')
        if with_label:
            ds['metainfo'] = dict(classes=tuple(scan['classes']))
        return ds

    loader = dict(
        batch_size=min(256, settings['num_images']),
        num_workers=0,
        persistent_workers=False,
        sampler=dict(type='DefaultSampler', shuffle=False),
        collate_fn=dict(type='default_collate'))
    all_files = write('images.txt', scan['files'])
    hooks = [dict(type='HPMScheduleHook', by_epoch=True)]
    bank, val = split_labelled(scan['files'], scan['classes']) \
        if scan['classes'] else ([], [])
    if bank and val:
        bank_file = write('knn_bank.txt', [f'{f} {c}' for f, c in bank])
        val_file = write('knn_val.txt', [f'{f} {c}' for f, c in val])
        write('classes.txt', scan['classes'])
        vis_loader = dict(loader, dataset=dataset(val_file, True))
        hooks.append(
            dict(
                type='KNNEvalHook',
                interval=0,
                train_dataloader=dict(
                    loader, dataset=dataset(bank_file, True)),
                val_dataloader=vis_loader))
    else:
        vis_loader = dict(loader, dataset=dataset(all_files, False))
    hooks.append(
        dict(
            type='HardPatchVisHook',
            interval=0,
            num_images=min(4, settings['num_images']),
            num_masks=8,
            dataloader=vis_loader))
    # the recipe (warm-up, cosine, the teacher's lag) scaled to the run
    recipe = scale_recipe(
        Config.fromfile(base_path), settings['epochs'],
        settings['steps_per_epoch'])
    teacher = recipe.model.get('teacher') or {}
    values = dict(
        image=dict(
            root=root,
            size=settings['img_size'],
            channels=settings['channels'],
            patch_size=settings['patch_size'],
            mean=stats['mean'],
            std=stats['std']),
        train_dataloader=dict(
            batch_size=settings['batch_size'],
            num_workers=2,
            persistent_workers=True,
            dataset=dict(ann_file=all_files, data_prefix='')),
        train_cfg=dict(max_epochs=settings['epochs']),
        param_scheduler=[dict(s) for s in recipe.param_scheduler],
        model=dict(
            teacher={
                k: teacher[k]
                for k in ('momentum', 'end_momentum', 'momentum_epochs')
                if k in teacher
            }),
        auto_scale_lr=dict(base_batch_size=256, enable=False),
        custom_hooks=hooks,
        work_dir=work_dir)
    text = ('# Written by tools/pretrain_folder.py: the folder\'s values over '
            'the image-folder\n# base (docs/own_data.md); rerun or edit it '
            'with tools/train.py.\n'
            f'_base_ = {base_path!r}\n')
    for key, value in values.items():
        text += f'{key} = {pprint.pformat(value, sort_dicts=False)}\n'
    # the base's eval pipeline, by reference (the image spec sizes it)
    return text.replace("'{{_base_.eval_pipeline}}'",
                        '{{_base_.eval_pipeline}}')


def check_counts(**counts) -> None:
    """Refuse, before anything is read or written, a count that is not a
    positive whole number (0 had meant 'not given'; ``img_size=2`` was a
    ZeroDivisionError) or a channel count other than 1 or 3."""
    for name, value in counts.items():
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise HPMError(f'{name}={value!r}: give a positive whole number, '
                           'or leave it out to have it chosen from the '
                           'images.')
    size, channels = counts.get('img_size'), counts.get('channels')
    if size is not None and (size < 8 or size % 8):
        raise HPMError(f'img_size={size}: the input is cut into an 8 x 8 '
                       'grid of patches (16 px patches from 224 px), so it '
                       f'must be a multiple of 8. Fix: one of {SIZES}.')
    if channels is not None and channels not in (1, 3):
        raise HPMError(f'channels={channels}: 1 (grayscale) or 3 (RGB).')


def pretrain_folder(folder: str,
                    work_dir: Optional[str] = None,
                    epochs: Optional[int] = None,
                    img_size: Optional[int] = None,
                    channels: Optional[int] = None,
                    batch_size: Optional[int] = None,
                    amp: bool = False,
                    resume: Optional[bool] = None,
                    skip_unreadable: bool = False,
                    dry_run: bool = False,
                    cfg_options: Optional[dict] = None,
                    log: Optional[Callable[[str], None]] = None) -> dict:
    """Pretrain HPM (the main job's model and recipe, scaled) on a folder of
    images (docs/own_data.md). Every file is opened first (an unreadable one
    refused, or left out with ``skip_unreadable``); size, channels, patch,
    batch and epochs are chosen from the images (each argument overrides);
    one subfolder per class: a fifth held out for kNN. ``resume`` None
    continues an earlier run on the same images and refuses one on others;
    True continues; False refuses any. ``dry_run`` writes the config only.
    Returns ``config`` (an ordinary config for ``tools/train.py``),
    ``settings``, ``runner``, ``knn`` and ``grids``; refusals are HPMErrors."""
    from hpm_mm.datasets.image_folder import (channel_stats, check_folder,
                                              scan_folder)
    from .config import load_config
    from .train import train
    log = log or (lambda line: None)
    check_counts(
        epochs=epochs,
        img_size=img_size,
        channels=channels,
        batch_size=batch_size)
    folder = folder.rstrip('/') or '/'
    check_folder(folder)  # before a work dir is made for it
    work_dir = work_dir or osp.join(
        'work_dirs', f'folder_{osp.basename(osp.abspath(folder))}')
    from hpm_mm.engine.work_dir import hand_over, own_work_dir
    lock = own_work_dir(work_dir)  # before anything is written into it
    # the runner takes the lock over; a refusal puts the work dir back
    with hand_over(lock, work_dir), _restored_on_refusal(work_dir):
        scan = scan_folder(folder)
        bad = scan['unreadable']
        if bad:
            listing = '; '.join(f'{p} ({why})' for p, why in bad[:3])
            more = f' and {len(bad) - 3} more' if len(bad) > 3 else ''
            if not skip_unreadable:
                raise HPMError(
                    f'{len(bad)} unreadable image file(s) in {folder}: '
                    f'{listing}{more}. Fix: remove or repair them, or '
                    '--skip-unreadable.')
        if not scan['files']:
            raise HPMError(f'no readable image in {folder}. Fix: point at the '
                           'folder that holds your images.')
        resume = _resume_or_refuse(
            work_dir, scan['files'], resume, log,
            bool((cfg_options or {}).get('resume_changed_run')))
        settings = choose_settings(scan, img_size, channels, batch_size,
                                   epochs)
        stats = channel_stats(folder, scan['files'], settings['img_size'],
                              settings['channels'])
        from mmengine.config import Config
        base = Config._get_cfg_path(f'hpm_mm::{FOLDER_CONFIG}', '')[0]
        text = folder_config(base, folder, work_dir, scan, settings, stats)
        if bad:
            with open(osp.join(work_dir, 'unreadable.txt'), 'w') as f:
                f.writelines(f'{p}\t{why}\n' for p, why in bad)
            log(f'left out {len(bad)} unreadable file(s): {listing}{more} '
                f'(all in {osp.join(work_dir, "unreadable.txt")})')
        labels = (f'{len(scan["classes"])} classes (kNN on a held-out fifth)'
                  if scan['classes'] else 'unlabelled (no kNN)')
        if scan['classes'] and not all(
                split_labelled(scan['files'], scan['classes'])):
            # every class has one image: nothing to hold out, or no bank
            labels = (f'{len(scan["classes"])} classes; kNN skipped: it '
                      'holds out a fifth of each class and needs a class '
                      'with at least 2 images (each has 1); the hard-patch '
                      'grids are still drawn')
        log(f'{settings["num_images"]} images, {labels}; chosen: '
            f'{settings["img_size"]}x{settings["img_size"]} '
            f'{"grayscale" if settings["channels"] == 1 else "RGB"} '
            f'(median short side {settings["median_short_side"]:g} px), '
            f'patch {settings["patch_size"]}, batch {settings["batch_size"]}, '
            f'{settings["epochs"]} epochs of {settings["steps_per_epoch"]} '
            'steps; override: --img-size --channels --batch-size --epochs')
        cfg_path = osp.join(work_dir, 'hpm_folder.py')
        with open(cfg_path, 'w') as f:
            f.write(text)
        if cfg_options:  # checked on the config as it will run
            load_config(cfg_path, cfg_options)
        log(f'config: {cfg_path}')
        grids = osp.join(work_dir, 'hard_patches')
        result = dict(
            config=cfg_path,
            settings=settings,
            runner=None,
            knn=None,
            grids=grids)
        if dry_run:
            return result
        result['runner'] = train(
            cfg_path,
            work_dir,
            amp=amp,
            quiet=True,
            resume=resume or None,
            cfg_options=cfg_options)
    knn = osp.join(work_dir, 'knn.json')
    if osp.exists(knn):
        with open(knn) as f:
            result['knn'] = json.load(f)
    return result


@contextmanager
def _restored_on_refusal(work_dir: str):
    """The work dir's config and lists as they were before a run on the
    folder rewrote them: put back when the run is refused before it trained
    (bad options, a resume of another length, ...), so a refusal changes
    nothing."""
    import glob

    def files(*patterns):
        return [p for t in patterns for p in glob.glob(osp.join(work_dir, t))]

    before = {}
    for path in files('*.txt', '*.py'):
        with open(path, 'rb') as f:
            before[path] = f.read()
    checkpoints = {(p, osp.getmtime(p)) for p in files('*.pth')}
    try:
        yield
    except HPMError:
        if {(p, osp.getmtime(p)) for p in files('*.pth')} == checkpoints:
            for path in files('*.txt', '*.py'):  # nothing trained
                if path not in before:
                    os.remove(path)
            for path, data in before.items():
                with open(path, 'wb') as f:
                    f.write(data)
        raise


def _resume_or_refuse(work_dir: str,
                      files: list,
                      resume: Optional[bool],
                      log,
                      changed_run: bool = False) -> bool:
    """Whether to continue the work dir's earlier run: by default, yes when
    it trained on these same images (said in a line), refused when on
    others unless asked (``resume=True`` with ``resume_changed_run``:
    its trained epochs continue on the folder as it is now);
    ``resume=False`` refuses any earlier run."""
    from hpm_mm.engine.resume import checkpoints_in, refuse_earlier_run
    if not checkpoints_in(work_dir):
        return bool(resume)
    if resume is False:
        refuse_earlier_run(work_dir)
    listed = osp.join(work_dir, 'images.txt')
    before = open(listed).read().split('\n')[:-1] if osp.exists(listed) \
        else None
    if before != files:
        added = len(set(files) - set(before or []))
        removed = len(set(before or []) - set(files))
        what = (f'{len(before or [])} then, {len(files)} now: {added} added, '
                f'{removed} removed')
        if resume and changed_run:
            log(f'{work_dir} holds a run on other images ({what}): '
                'continuing its trained epochs on the folder as it is now, '
                'as --resume with resume_changed_run=True asks')
            return True
        raise HPMError(
            f'{work_dir} holds a run on other images ({what}). Fix: '
            '--work-dir NEW for a new run, or --resume --cfg-options '
            'resume_changed_run=True to continue it on these images.')
    if resume is None:
        log(f'{work_dir} holds an interrupted run on these same images: '
            'continuing it (--work-dir NEW starts a new one)')
    return True
