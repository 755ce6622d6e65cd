"""The hard-patch pictures of a checkpoint (paper Fig. 2/S1/S2), from
Python: per image, the input, the true per-patch loss (averaged over random
masks), the teacher's (or student's) predicted loss, the mask the model's
mask generator draws at training progress ``progress`` and the
reconstruction."""
import json
import os
import os.path as osp
from typing import Optional, Union

import numpy as np
import torch
from mmengine.config import Config
from mmengine.dataset import Compose, default_collate

from hpm_mm.errors import HPMError
from hpm_mm.visualization import fixed_samples
from .config import load_config
from .knn import knn_hook


def folder_batch(folder, model_cfg):
    """Load, resize and pack every image under ``folder``, class folders and
    nested ones too (the own-folder scan,
    :func:`hpm_mm.datasets.image_folder.scan_folder`); an unreadable one is
    refused in one line."""
    from hpm_mm.datasets.image_folder import scan_folder
    scan = scan_folder(folder)
    if scan['unreadable']:
        (rel, why), more = scan['unreadable'][0], len(scan['unreadable']) - 1
        raise HPMError(
            f'--images: {osp.join(folder, rel)} cannot be read ({why})'
            f'{f" and {more} more" if more else ""}. Fix: leave it out.')
    size = model_cfg.backbone.get('img_size', 224)
    in_ch = model_cfg.backbone.get('patch_cfg', {}).get('in_channels', 3)
    pipeline = Compose([
        dict(
            type='LoadImageFromFile',
            color_type='grayscale' if in_ch == 1 else 'color'),
        dict(
            type='Resize',
            scale=(size, size),
            backend='pillow',
            interpolation='bicubic'),
        dict(type='PackInputs')
    ])
    files = [osp.join(folder, f) for f in scan['files']]
    return [pipeline(dict(img_path=f)) for f in files], files


def dataset_batch(cfg, num):
    """``num`` images of the config's kNN evaluation set (else its training
    set), spread evenly, and their names."""
    hook = knn_hook(cfg, required=False)
    samples, idx = fixed_samples(
        hook['val_dataloader'] if hook else cfg.train_dataloader, num)
    return samples, [f'sample_{i}' for i in idx]


def label_foreground(folder, names, size):
    """(B, H, W) foreground (label > 0) of ``folder/<stem>.png``, resized
    (nearest) to the model input size."""
    from PIL import Image
    masks = []
    for name in names:
        path = osp.join(folder, osp.splitext(osp.basename(name))[0] + '.png')
        if not osp.exists(path):
            raise HPMError(f'--masks: no label map {path} for {name}. Fix: '
                           'one <image stem>.png per image.')
        label = Image.open(path).resize((size[1], size[0]), Image.NEAREST)
        masks.append(np.asarray(label) > 0)
    return np.stack(masks)


@torch.no_grad()
def hard_patches(config: Union[str, Config],
                 checkpoint: str,
                 out_dir: str,
                 images: Optional[str] = None,
                 num_samples: int = 8,
                 progress: float = 1.0,
                 num_masks: int = 8,
                 student: bool = False,
                 saliency: bool = False,
                 fg_threshold: float = 10.,
                 masks: Optional[str] = None) -> dict:
    """Draw the hard-patch grid of each image into ``out_dir`` (a PNG each and
    ``summary.json``) from ``checkpoint`` (its loss predictor, and teacher
    unless ``student``): ``images`` (a folder) or ``num_samples`` of the
    config's evaluated data, the mask at ``progress``, the true loss averaged
    over ``num_masks`` masks; ``saliency`` adds the IoU of the predicted-loss
    map with the foreground (``masks/<stem>.png``, or pixels above
    ``fg_threshold``). Returns the Spearman statistics (and IoUs)."""
    from PIL import Image

    from hpm_mm.engine.work_dir import (MARK, check_writable, plan_outputs,
                                        text_writer, write_outputs)
    from hpm_mm.visualization import (analyze_hard_patches, draw_hard_patches,
                                      foreground_iou, saliency_mask)
    from .model import load_checkpoint_strict, load_model
    cfg = load_config(config)
    fix = '--out-dir a folder you can write'
    check_writable(out_dir, 'the pictures', True, fix)
    if not images and (isinstance(num_samples, bool)
                       or not isinstance(num_samples, int) or num_samples < 1):
        raise HPMError(f'num_samples={num_samples!r}: not a count. Fix: '
                       '--num-samples 1 or more.')
    model = load_model(cfg)
    if model.__class__.__name__ != 'HPM':
        raise HPMError(f'{cfg.filename or "the config"} builds a '
                       f'{type(model).__name__}. Fix: an HPM config.')
    # the pictures draw the loss predictor's scores: a checkpoint without
    # it (plain MAE, another model) would draw a random predictor's; the
    # teacher's scores need the trained teacher, loaded in its place
    required = ('backbone.', 'neck.')
    if getattr(model, 'teacher', None) is not None and not student:
        required += ('teacher.', )
    from hpm_mm.engine.safe_load import load_file
    ckpt = load_file(checkpoint)
    untrained = ((ckpt.get('meta') or {}).get('imported')
                 or {}).get('untrained', ())
    if 'neck.predictor.' in untrained:
        raise HPMError(f'{checkpoint} has no trained loss predictor. Fix: '
                       'pretrain it with HPM first (load_from).')
    load_checkpoint_strict(
        model,
        ckpt,
        whole=True,
        required_prefix=required,
        name=checkpoint,
        fix='an HPM checkpoint: the pictures need its trained loss predictor')
    model.eval()
    samples, names = (
        folder_batch(images, cfg.model) if images else dataset_batch(
            cfg, num_samples))
    stems = [  # named by the path in the folder: two classes' 1.png stay two
        osp.splitext(osp.relpath(name, images) if images else name)[0].replace(
            os.sep, '-') for name in names
    ]
    summary_path = osp.join(out_dir, 'summary.json')
    outputs = [osp.join(out_dir, f'{stem}.png') for stem in stems]
    plan_outputs(  # before the analysis; the inputs never written over
        outputs + [summary_path], 'the pictures',
        [checkpoint] + (names if images else []) + [
            osp.join(masks,
                     osp.splitext(osp.basename(n))[0] + '.png')
            for n in names if masks
        ], summary_path, True, fix)
    batch = model.data_preprocessor(default_collate(samples), False)
    inputs = batch['inputs']
    result = analyze_hard_patches(
        model, inputs, progress, num_masks, use_teacher=not student)
    writers = {}
    for i, path in enumerate(outputs):
        rgb = draw_hard_patches(result, inputs, i, model.data_preprocessor)
        writers[path] = lambda part, rgb=rgb: Image.fromarray(rgb).save(
            part, format='PNG')
    rho = result['spearman']
    summary = dict(
        spearman_mean=float(rho.mean()),
        spearman_per_image=[float(r) for r in rho],
        shown=result['shown_name'],
        num_images=len(names))
    if saliency:
        if masks:
            fg = label_foreground(masks, names, inputs.shape[-2:])
        else:
            raw = torch.stack([s['inputs'] for s in samples]).float()
            fg = (raw.mean(1) > fg_threshold).numpy()
        sal = saliency_mask(result['shown'], inputs.shape[-2:])
        iou = foreground_iou(sal, fg)
        # reference: a mask of the same size placed at random
        rng = np.random.default_rng(0)
        rand = np.stack(
            [rng.permutation(s.ravel()).reshape(s.shape) for s in sal])
        summary.update(
            saliency_iou=float(iou.mean()),
            random_iou=float(foreground_iou(rand, fg).mean()))
    writers[summary_path] = text_writer(
        json.dumps(dict(summary, **{MARK: 'hard_patches'}), indent=2))
    write_outputs(writers)
    return summary
