"""HPM pretraining on a folder of your own images, from Python
(docs/own_data.md)."""
import json
import math
import os
import os.path as osp
from contextlib import contextmanager
from pathlib import Path
from statistics import median
from typing import Callable, Dict, Optional

from mmengine.config import Config

from hpm_mm.datasets.image_folder import split_labelled
from hpm_mm.engine.schedule import scale_recipe, steps_per_epoch
from hpm_mm.errors import HPMError

#: the image-folder base: the main job's model and recipe (docs/own_data.md)
FOLDER_CONFIG = 'hpm/hpm-fast_vit-mini-p4_1xb256-coslr-10e_image-folder.py'

SIZES = (32, 64, 96, 128, 224)  # candidate input sizes
MAX_SIZE = 1024  # the largest a user may ask for (the det recipes' input)
START_CONFIG = 'from_checkpoint.py'  # a --from checkpoint's saved config
TARGET_STEPS = 400  # the main job's schedule length
#: pretrain_folder's arguments that are numbers (:func:`check_numbers`)
NUMBERS = ('epochs', 'img_size', 'channels', 'batch_size', 'lr', 'alpha_0')


def choose_settings(scan: Dict,
                    img_size: Optional[int] = None,
                    channels: Optional[int] = None,
                    batch_size: Optional[int] = None,
                    epochs: Optional[int] = None,
                    patch_size: Optional[int] = None) -> Dict:
    """Defaults from the images, each overridable: the largest of
    :data:`SIZES` not above the median short side, an 8 x 8 patch grid (16 px
    patches at 224), 1 channel when every image is, batch 256 or an eighth
    of the images, about :data:`TARGET_STEPS` steps in 10..200 epochs; a
    batch larger than the folder is refused."""
    n = len(scan['files'])
    short = median(min(s) for s in scan['sizes'])
    size = img_size if img_size is not None else max(
        [s for s in SIZES if s <= short] or [SIZES[0]])
    patch = patch_size or (16 if size >= 224 else size // 8)
    if size % patch:
        raise HPMError(f'--img-size {size}: must be a multiple of '
                       f'{patch} (patch size). Fix: use one of {SIZES}.')
    ch = channels if channels is not None else (1 if scan['gray'] else 3)
    if batch_size is not None and batch_size > n:
        raise HPMError(f'{n} images cannot fill one batch of {batch_size}. '
                       f'Fix: --batch-size {n} or fewer, or more images.')
    batch = batch_size or min(n, max(8, min(256, n // 8)))
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


def check_numbers(**values) -> None:
    """Refuse, before anything is read or written, a count that is not a
    positive whole number (0 had meant 'not given'; ``img_size=2`` was a
    ZeroDivisionError), an ``img_size`` not a multiple of 8, ``channels``
    other than 1 or 3, an ``lr`` that is not a positive number or an
    ``alpha_0`` outside 0..1."""
    rules = dict(
        lr=('a positive number', lambda v: v > 0),
        alpha_0=('a share in 0..1', lambda v: 0 <= v <= 1),
        img_size=(
            f'a multiple of 8 from 8 to {MAX_SIZE}',
            lambda v: isinstance(v, int) and v in range(8, MAX_SIZE + 1, 8)),
        channels=('1 or 3', lambda v: isinstance(v, int) and v in (1, 3)))
    for name, value in values.items():
        want, fits = rules.get(name, ('a positive whole number',
                                      lambda v: isinstance(v, int) and v >= 1))
        if value is not None and (isinstance(value, bool)
                                  or not isinstance(value, (int, float)) or
                                  not math.isfinite(value) or not fits(value)):
            raise HPMError(f'{name}={value!r} is not {want}. Fix: leave it '
                           'out to have it chosen.')


def from_checkpoint(path: str,
                    img_size: Optional[int] = None,
                    channels: Optional[int] = None) -> Dict:
    """What a run ``--from`` the checkpoint ``path`` takes from it: its saved
    config (``cfg``, ``text``), input size, patch size and channels (its
    position and patch embeddings'), normalisation, the easy-to-hard
    schedule (``alpha``: None without one) and the parts an import left
    untrained. A checkpoint without a config, or an
    ``img_size`` / ``channels`` other than its own, is one HPMError line."""
    from hpm_mm.engine.config_check import run_keys
    from hpm_mm.engine.safe_load import check_finite, load_file
    from .convert import saved_config
    ckpt = load_file(path)
    meta = ckpt.get('meta') if isinstance(ckpt, dict) else None
    why = 'it holds no saved config (meta.cfg) that names its model'
    try:
        cfg = saved_config(ckpt) if isinstance(meta, dict) else None
    except Exception as e:  # mmengine raises many kinds for a bad text
        cfg, why = None, (f'its saved config (meta.cfg) does not load '
                          f'({type(e).__name__}: {e})').replace('\n', ' ')
    if cfg is None:
        raise HPMError(f'--from {path}: {why}. Fix: an hpm_mm checkpoint (a '
                       'released one imported by official2hpm.py).')
    state = ckpt.get('state_dict') or {}
    pos = state.get('backbone.pos_embed')
    proj = state.get('backbone.patch_embed.projection.weight')
    if pos is None or proj is None or proj.dim() != 4:
        raise HPMError(f'--from {path}: no ViT encoder (backbone.pos_embed)'
                       ' in it. Fix: an HPM or MAE ViT checkpoint.')
    check_finite(state, f'--from {path}')
    patch, ch = int(proj.shape[-1]), int(proj.shape[1])
    side = int((pos.shape[1] - 1)**.5 + .5)  # (the cls token first)
    size = side * patch
    for name, asked, own in (('img-size', img_size, size), ('channels',
                                                            channels, ch)):
        if asked not in (None, own):
            raise HPMError(f'--{name} {asked}: the checkpoint serves {own} '
                           f'({size} px inputs, {side}x{side} patches of '
                           f'{patch} px). Fix: leave --{name} out.')
    pre = cfg.model.get('data_preprocessor') or cfg.get(
        'data_preprocessor') or {}
    if pre.get('mean') is None or pre.get('std') is None:
        raise HPMError(f'--from {path}: its config has no data_preprocessor'
                       ' mean / std. Fix: a checkpoint of a normalising one.')
    masks = cfg.model.get('mask_generator') or {}
    imported = meta.get('imported') or {}
    saved = {k: v for k, v in cfg.to_dict().items() if k in run_keys()}
    return dict(
        # as the resume room records a run's start (its checkpoints' meta)
        path=path if '://' in path else osp.realpath(path),
        cfg=cfg,
        text=f'# the run settings saved in {path} (meta.cfg)\n' +
        Config(saved).pretty_text,  # its settings, not its files' variables
        img_size=size,
        patch_size=patch,
        channels=ch,
        mean=list(pre['mean']),
        std=list(pre['std']),
        alpha=(masks.get('alpha_0', 0.),
               masks.get('alpha_T', .5)) if 'alpha_T' in masks else None,
        untrained=list(imported.get('untrained') or ()),
        epochs=(None, None) if imported else
        (meta.get('epoch'), cfg.train_cfg.get('max_epochs')),
        kind=f"imported, {imported.get('layout', '?')} layout"
        if imported else 'hpm_mm')


def choose_recipe(settings: Dict, base: Config, start: Optional[Dict],
                  lr: Optional[float], alpha_0: Optional[float]) -> str:
    """The run's recipe into ``settings`` (``lr``, ``schedulers``,
    ``teacher``, ``alpha_0``); returns its words for the settings line.
    One learning-rate rule, MAE's linear scaling: the checkpoint's (else
    the ``base`` config's) rate per 256 images times batch / 256. From
    scratch: the base's warm-up and cosine scaled to the run
    (:func:`~hpm_mm.engine.schedule.scale_recipe`). From a checkpoint
    (docs/own_data.md): a linear warm-up over
    :data:`~hpm_mm.engine.schedule.WARMUP_FRACTION` of the steps (at least
    2: over one, mmengine's LinearLR never ramps; the optimizer starts
    without its moments) then a cosine to 0, and the easy-to-hard schedule
    from where the predictor stands: where its run stood (alpha_T after a
    finished run), from alpha_0 where an import left it untrained. Either
    way the EMA teacher's lag is scaled to the run; ``lr`` and ``alpha_0``
    override."""
    from hpm_mm.engine.schedule import WARMUP_FRACTION, teacher_momentum
    epochs, per_epoch = settings['epochs'], settings['steps_per_epoch']
    recipe = start['cfg'] if start else base  # per its auto_scale_lr batch
    per_256 = recipe.optim_wrapper.optimizer.lr * 256 / (
        (recipe.get('auto_scale_lr') or {}).get('base_batch_size')
        or recipe.train_dataloader.batch_size)
    momentum, end_momentum = teacher_momentum(epochs * per_epoch)
    settings.update(
        lr=lr if lr is not None else
        float(f"{per_256 * settings['batch_size'] / 256:.3g}"),
        teacher=dict(
            momentum=float(f'{momentum:.4g}'),
            end_momentum=float(f'{end_momentum:.4g}'),
            momentum_epochs=epochs),
        alpha_0=alpha_0)
    words = f"lr {settings['lr']:g}" + ('' if lr is not None else (
        f" ({per_256:g} per 256 images, the "
        f"{'checkpoint' if start else 'recipe'}'s)"))
    if start is None:
        settings['schedulers'] = scale_recipe(base, epochs,
                                              per_epoch).param_scheduler
        return words + ('' if alpha_0 is None else
                        f', alpha_0 {alpha_0:g} (given)')
    warm = max(2, round(WARMUP_FRACTION * epochs * per_epoch))
    settings['schedulers'] = [  # (mmengine's defaults: to 0 from step 0)
        dict(type='LinearLR', start_factor=1e-3, by_epoch=False, end=warm),
        dict(type='CosineAnnealingLR', end=epochs, convert_to_iter_based=True)
    ]
    words += f', warm-up {warm} steps then cosine'
    if start['alpha'] is None:
        if alpha_0 is not None:
            raise HPMError(f"--alpha-0 {alpha_0}: the checkpoint's model "
                           'masks at random. Fix: leave --alpha-0 out.')
        return words + ', random masks (the checkpoint\'s)'
    fresh = [p for p in start['untrained'] if 'predictor' in p]
    a0, aT = start['alpha']
    done, total = start['epochs']  # (an import: its run ended)
    stood = a0 + min(done / total, 1.) * (aT - a0) if done and total else aT
    why = ('given' if alpha_0 is not None else
           f'untrained predictor {", ".join(fresh)}: from the start'
           if fresh else f'where its run stood (epoch {done} of {total})'
           if stood != aT else 'where its run ended')
    settings['alpha_0'] = a0 = alpha_0 if alpha_0 is not None else \
        a0 if fresh else round(stood, 3)
    return words + f', alpha {a0:g} -> {aT:g} ({why})'


def folder_config(base: Config,
                  root: str,
                  work_dir: str,
                  scan: Dict,
                  split: tuple,
                  settings: Dict,
                  stats: Dict,
                  start: Optional[Dict] = None) -> str:
    """The config of a run on the folder ``root``: it inherits ``base``
    (the image-folder base's file; with ``start``, the checkpoint's saved
    config, beside it in ``work_dir``, and the base's pipelines)
    and holds only the folder's values (its ``image`` spec, which sizes
    every part; file lists, batch size, :func:`choose_recipe`'s recipe, the
    hooks' held-out ``split``) and the checkpoint's (its weights). Writes
    the file lists into ``work_dir``; returns the config's text."""
    import pprint
    root, work_dir = osp.abspath(root), osp.abspath(work_dir)
    os.makedirs(work_dir, exist_ok=True)

    def dataset(name, rows, labelled=True):  # its file list written
        path = osp.join(work_dir, name)
        Path(path).write_text(''.join(f'{row}\n' for row in rows))
        classes = dict(metainfo=dict(classes=tuple(scan['classes'] or ())))
        return dict(
            type='CustomDataset',
            data_root=root,
            data_prefix='',
            ann_file=path,
            with_label=labelled,
            pipeline='{{_base_.eval_pipeline}}',
            **(classes if labelled else {}))

    loader = dict(
        batch_size=min(256, settings['num_images']),
        num_workers=0,
        persistent_workers=False,
        sampler=dict(type='DefaultSampler', shuffle=False),
        collate_fn=dict(type='default_collate'))
    every = dataset('images.txt', scan['files'], False)
    bank, val = ([f'{f} {c}' for f, c in part] for part in split)
    vis_loader = dict(
        loader, dataset=dataset('knn_val.txt', val) if all(split) else every)
    hooks = [dict(type='HPMScheduleHook', by_epoch=True)]
    if all(split):
        hooks.append(
            dict(
                type='KNNEvalHook',
                interval=0,
                train_dataloader=dict(
                    loader, dataset=dataset('knn_bank.txt', bank)),
                val_dataloader=vis_loader))
    hooks.append(
        dict(
            type='HardPatchVisHook',
            interval=0,
            num_images=min(4, settings['num_images']),
            num_masks=8,
            dataloader=vis_loader))
    train_set, values = dict(ann_file=every['ann_file'], data_prefix=''), {}
    if start is not None:  # the base's pipelines and data
        values = dict(
            train_pipeline=base.train_pipeline,
            eval_pipeline=base.eval_pipeline)
        train_set = dict(
            every, _delete_=True, pipeline='{{_base_.train_pipeline}}')
    model = dict(teacher=settings['teacher'])
    if settings['alpha_0'] is not None:
        model['mask_generator'] = dict(alpha_0=settings['alpha_0'])
    values.update(
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
            dataset=train_set),
        train_cfg=dict(max_epochs=settings['epochs']),
        optim_wrapper=dict(optimizer=dict(lr=settings['lr'])),
        param_scheduler=[dict(s) for s in settings['schedulers']],
        model=model,
        auto_scale_lr=dict(  # its lr is for its batch: --from reads it
            base_batch_size=settings['batch_size'],
            enable=False),
        custom_hooks=hooks,
        work_dir=work_dir)
    if start is not None:  # no other data, no epoch hooks
        values.update(
            default_hooks=dict(checkpoint=dict(interval=1, max_keep_ckpts=2)),
            load_from=start['path'],
            resume=False,
            val_dataloader=None,
            val_cfg=None,
            val_evaluator=None)
    text = ("# Written by tools/pretrain_folder.py: the folder's values over "
            '_base_ (docs/own_data.md);\n# rerun or edit it with tools/train.'
            f'py.\n_base_ = {START_CONFIG if start else base.filename!r}\n')
    for key, value in values.items():  # (a path on one line: repr)
        text += f'{key} = ' + (repr(value) if isinstance(value, str) else
                               pprint.pformat(value, sort_dicts=False)) + '\n'
    # the pipelines by reference: the base's, or those written above
    for name in ('train_pipeline', 'eval_pipeline'):
        text = text.replace(f"'{{{{_base_.{name}}}}}'",
                            name if start else f'{{{{_base_.{name}}}}}')
    return text


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
                    log: Optional[Callable[[str], None]] = None,
                    start_from: Optional[str] = None,
                    lr: Optional[float] = None,
                    alpha_0: Optional[float] = None) -> dict:
    """Pretrain HPM on a folder of images (docs/own_data.md): the main job's
    model and recipe scaled, or, ``start_from`` a checkpoint (hpm_mm's or
    an imported one), its model, input size, channels and normalisation,
    its student and teacher, a continued recipe (:func:`choose_recipe`).
    Every file is opened first (an unreadable one refused, or left out with
    ``skip_unreadable``); size, channels, patch, batch, epochs, ``lr`` and
    ``alpha_0`` are chosen (each argument overrides); one subfolder per
    class: a fifth held out for kNN. ``resume`` None continues an earlier
    run on the same images from the same start and refuses another; True
    continues; False refuses any. ``dry_run`` writes the config only.
    Returns ``config`` (an ordinary config for ``tools/train.py``),
    ``settings``, ``runner``, ``knn``, ``grids`` and ``export`` (the
    hpm2backbone.py line); refusals are HPMErrors."""
    from hpm_mm.datasets.image_folder import (channel_stats, check_folder,
                                              scan_folder)
    from hpm_mm.engine.work_dir import hand_over, own_work_dir
    from .config import load_config
    from .train import train
    check_numbers(**{k: v for k, v in locals().items() if k in NUMBERS})
    log = log or (lambda line: None)
    folder = folder.rstrip('/') or '/'
    check_folder(folder)  # before a work dir is made for it
    start = from_checkpoint(start_from, img_size, channels) \
        if start_from is not None else None
    work_dir = work_dir or osp.join(
        'work_dirs', f'folder_{osp.basename(osp.abspath(folder))}')
    if osp.realpath(work_dir) == osp.realpath(folder):
        raise HPMError(f'--work-dir {work_dir} is the image folder. Fix: '
                       'another --work-dir.')
    lock = own_work_dir(work_dir)  # before anything is written into it
    # the runner takes the lock over; a refusal puts the work dir back
    with hand_over(lock, work_dir), _restored_on_refusal(work_dir):
        scan = scan_folder(folder)
        bad = scan['unreadable']
        listing = '; '.join(f'{p} ({why})' for p, why in bad[:3]) + (
            f' and {len(bad) - 3} more' if len(bad) > 3 else '')
        if bad and not skip_unreadable:
            raise HPMError(f'{len(bad)} unreadable image file(s): {listing}'
                           '. Fix: remove them, or --skip-unreadable.')
        if not scan['files']:
            raise HPMError(f'no readable image in {folder}. Fix: point at the '
                           'folder that holds your images.')
        settings = choose_settings(
            scan,
            *((start['img_size'], start['channels']) if start else
              (img_size, channels)), batch_size, epochs, start
            and start['patch_size'])
        resume = _resume_or_refuse(
            work_dir, scan['files'], resume, log,
            bool((cfg_options or {}).get('resume_changed_run')), start
            and start['path'])
        base = Config.fromfile(
            Config._get_cfg_path(f'hpm_mm::{FOLDER_CONFIG}', '')[0])
        recipe = choose_recipe(settings, base, start, lr, alpha_0)
        size = (f'{settings["img_size"]}x{settings["img_size"]} '
                f'{"grayscale" if settings["channels"] == 1 else "RGB"}')
        if start is None:
            stats = channel_stats(folder, scan['files'], settings['img_size'],
                                  settings['channels'])
            chosen = (f'chosen: {size} (median short side '
                      f'{settings["median_short_side"]:g} px)')
        else:
            stats = dict(mean=start['mean'], std=start['std'])
            how = 'grayscale images as RGB' if scan['gray'] else \
                'colour images as luminance'  # where they differ
            chosen = f'from {start_from} ({start["kind"]}): its {size}' + (
                f' ({how})'
                if scan['gray'] == (start['channels'] == 3) else '')
            Path(work_dir, START_CONFIG).write_text(start['text'])
        split = split_labelled(scan['files'], scan['classes'] or [])
        text = folder_config(base, folder, work_dir, scan, split, settings,
                             stats, start)
        if bad:
            listed = ''.join(f'{p}\t{why}\n' for p, why in bad)
            Path(work_dir, 'unreadable.txt').write_text(listed)
            log(f'left out {len(bad)} unreadable file(s): {listing} '
                f'(all in {osp.join(work_dir, "unreadable.txt")})')
        classes = len(scan['classes'] or ())
        labels = (  # (one image per class: nothing to hold out, or no bank)
            f'{classes} classes (kNN on a held-out fifth)' if all(split) else
            f'{classes} classes; kNN skipped (1 image each: none held out)'
            if classes else 'unlabelled (no kNN)')
        log(f'{settings["num_images"]} images, {labels}; {chosen}, patch '
            f'{settings["patch_size"]}; {recipe}, batch '
            f'{settings["batch_size"]}, {settings["epochs"]} epochs of '
            f'{settings["steps_per_epoch"]} steps')
        cfg_path = osp.join(work_dir, 'hpm_folder.py')
        Path(cfg_path).write_text(text)
        if cfg_options:  # checked on the config as it will run
            load_config(cfg_path, cfg_options)
        log(f'config: {cfg_path}')
        result = dict(
            config=cfg_path,
            settings=settings,
            runner=None,
            knn=None,
            grids=osp.join(work_dir, 'hard_patches'),
            export=None)
        if dry_run:
            return result
        result['runner'] = train(
            cfg_path,
            work_dir,
            amp=amp,
            quiet=True,
            resume=resume or None,
            cfg_options=cfg_options)
    knn = Path(work_dir, 'knn.json')
    result['knn'] = json.loads(knn.read_text()) if knn.exists() else None
    last = Path(work_dir, 'last_checkpoint').read_text().strip()
    last = osp.join(work_dir, osp.basename(last))  # (a copy's: its own)
    result['export'] = (
        'export the encoder: python tools/model_converters/hpm2backbone.py '
        f'{last} {osp.join(work_dir, "backbone.pth")} --target mmpretrain')
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

    before = {p: Path(p).read_bytes() for p in files('*.txt', '*.py')}
    checkpoints = {(p, osp.getmtime(p)) for p in files('*.pth')}
    try:
        yield
    except HPMError:
        if {(p, osp.getmtime(p)) for p in files('*.pth')} == checkpoints:
            for path in files('*.txt', '*.py'):  # nothing trained
                if path not in before:
                    os.remove(path)
            for path, data in before.items():
                Path(path).write_bytes(data)
        raise


def _resume_or_refuse(work_dir: str,
                      files: list,
                      resume: Optional[bool],
                      log,
                      changed_run: bool = False,
                      start: Optional[str] = None) -> bool:
    """Whether to continue the work dir's earlier run: by default, yes when
    it trained on these same images from the same ``start`` (the resume
    room's record of its checkpoints; said in a line), refused when from
    another start, and when on other images unless asked (``resume=True``
    with ``resume_changed_run``: its trained epochs continue on the folder
    as it is now); ``resume=False`` refuses any earlier run."""
    from hpm_mm.engine.resume import (checkpoints_in, refuse_earlier_run,
                                      run_start)
    if not checkpoints_in(work_dir):
        return False  # nothing to continue: the run starts (from its start)
    if resume is False:
        refuse_earlier_run(work_dir)
    then = run_start(work_dir)  # (False: none of its checkpoints complete)
    if then is not False and then != start:
        raise HPMError(
            f'{work_dir} holds a run from {then or "scratch"}; this one starts'
            f' from {start or "scratch"}. Fix: --work-dir NEW, or '
            f'{f"--from {then}" if then else "no --from"} to continue it.')
    listed = Path(work_dir, 'images.txt')
    old = listed.read_text().split('\n')[:-1] if listed.exists() else []
    what = (f'other images ({len(old)} then, {len(files)} now: '
            f'{len(set(files) - set(old))} added, '
            f'{len(set(old) - set(files))} removed)')
    if old != files and not (resume and changed_run):
        raise HPMError(f'{work_dir} holds a run on {what}. Fix: --work-dir NEW'
                       ', or --resume --cfg-options resume_changed_run=True.')
    if resume is None or old != files:
        log(f'{work_dir} holds a run on '
            f'{what if old != files else "these same images"}: continuing it')
    return True
