"""Draw what HPM sees: per image, the input, the true per-patch loss
(averaged over random masks), the teacher's predicted loss, the mask the
model's mask generator draws at training progress ``--progress`` (1.0: the
end of the schedule; alpha_T = 0.5 for HPM's default) and the
reconstruction (paper Fig. 2/S1/S2).

    python tools/analysis_tools/visualize_hard_patches.py CONFIG CHECKPOINT \
        [--images DIR | --num-samples 8] [--progress 1.0] [--num-masks 8] \
        [--out-dir DIR] [--saliency]

Without ``--images`` the samples come from the evaluated split of the
config's ``KNNEvalHook`` (held-out data), else from its train dataloader.
Prints the Spearman rank correlation between predicted and true losses and,
with ``--saliency``, the IoU of the thresholded predicted-loss map (above
the image's median) against the foreground: the objects of a label map
(``--masks DIR`` with ``<image stem>.png``, label > 0, e.g. ADE20k's
annotations) or, without one, the non-background pixels (raw value >
``--fg-threshold``, right for Fashion-MNIST).
"""
import argparse
import json
import os
import os.path as osp

import numpy as np
import torch
from mmengine.dataset import Compose, default_collate
from mmengine.registry import init_default_scope
from mmengine.runner import Runner

from hpm_mm.apis.config import CfgOptionsAction, load_config, merge_cfg_options


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description='Visualise hard patches')
    parser.add_argument('config')
    parser.add_argument('checkpoint')
    parser.add_argument('--images', help='folder of images to draw')
    parser.add_argument('--num-samples', type=int, default=8)
    parser.add_argument(
        '--progress',
        type=float,
        default=1.0,
        help='training progress t/T at which the mask '
        'generator draws the mask (default: 1.0, the end)')
    parser.add_argument('--num-masks', type=int, default=8)
    parser.add_argument(
        '--student',
        action='store_true',
        help="use the student's loss predictor")
    parser.add_argument('--out-dir', default='work_dirs/hard_patches')
    parser.add_argument('--saliency', action='store_true')
    parser.add_argument(
        '--fg-threshold',
        type=float,
        default=10.,
        help='foreground = raw pixel value above this')
    parser.add_argument(
        '--masks',
        help='folder of label maps <stem>.png '
        '(foreground = label > 0) for --saliency')
    parser.add_argument('--cfg-options', nargs='+', action=CfgOptionsAction)
    return parser.parse_args(argv)


def folder_batch(folder, model_cfg):
    """Load, resize and pack every image of ``folder``."""
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
    files = sorted(
        osp.join(folder, f) for f in os.listdir(folder)
        if f.lower().endswith(('.png', '.jpg', '.jpeg', '.bmp')))
    if not files:
        raise SystemExit(f'no .png/.jpg images in {folder}')
    return [pipeline(dict(img_path=f)) for f in files], files


def dataset_batch(cfg, num):
    hooks = [
        h for h in cfg.get('custom_hooks', [])
        if h.get('type') == 'KNNEvalHook'
    ]
    loader_cfg = hooks[0]['val_dataloader'] if hooks else \
        cfg.train_dataloader
    dataset = Runner.build_dataloader(
        dict(
            loader_cfg, batch_size=1, num_workers=0, persistent_workers=False),
        seed=0).dataset
    idx = np.linspace(0, len(dataset) - 1, num).astype(int)
    return [dataset[i] for i in idx], [f'sample_{i}' for i in idx]


def label_foreground(folder, names, size):
    """(B, H, W) foreground (label > 0) of ``folder/<stem>.png``, resized
    (nearest) to the model input size."""
    from PIL import Image
    masks = []
    for name in names:
        path = osp.join(folder, osp.splitext(osp.basename(name))[0] + '.png')
        if not osp.exists(path):
            raise SystemExit(f'--masks: no label map {path} for {name}')
        label = Image.open(path).resize((size[1], size[0]), Image.NEAREST)
        masks.append(np.asarray(label) > 0)
    return np.stack(masks)


def main(argv=None):
    args = parse_args(argv)
    import hpm_mm  # noqa: F401
    from hpm_mm.apis import load_model
    from hpm_mm.engine.checkpoint import load_checkpoint_strict
    from hpm_mm.visualization import (analyze_hard_patches, draw_hard_patches,
                                      foreground_iou, saliency_mask)
    cfg = load_config(args.config)
    if args.cfg_options:
        merge_cfg_options(cfg, args.cfg_options)
    init_default_scope(cfg.get('default_scope', 'mmpretrain'))
    model = load_model(cfg)
    if model.__class__.__name__ != 'HPM':
        raise SystemExit(f'{args.config} builds a {type(model).__name__}; '
                         'the heatmaps need an HPM model (loss predictor).')
    # the pictures draw the loss predictor's scores: a checkpoint without
    # it (plain MAE, another model) would draw a random predictor's; the
    # teacher's scores need the trained teacher, loaded in its place
    required = ('backbone.', 'neck.')
    if getattr(model, 'teacher', None) is not None and not args.student:
        required += ('teacher.', )
    try:
        load_checkpoint_strict(
            model, args.checkpoint, required_prefix=required, whole=True)
    except KeyError as e:
        raise SystemExit(f'visualize_hard_patches.py: {e.args[0]} The '
                         'pictures need its trained loss predictor.')
    model.eval()

    samples, names = (
        folder_batch(args.images, cfg.model) if args.images else dataset_batch(
            cfg, args.num_samples))
    batch = model.data_preprocessor(default_collate(samples), False)
    inputs = batch['inputs']
    result = analyze_hard_patches(
        model,
        inputs,
        args.progress,
        args.num_masks,
        use_teacher=not args.student)
    os.makedirs(args.out_dir, exist_ok=True)
    pre = model.data_preprocessor
    mean = pre.mean.view(-1).tolist()
    std = pre.std.view(-1).tolist()
    for i, name in enumerate(names):
        stem = osp.splitext(osp.basename(name))[0]
        draw_hard_patches(result, inputs, i, mean, std,
                          osp.join(args.out_dir, f'{stem}.png'))
    rho = result['spearman']
    summary = dict(
        spearman_mean=float(rho.mean()),
        spearman_per_image=[float(r) for r in rho])
    print(f'wrote {len(names)} grids to {args.out_dir}')
    print(f"Spearman({result['shown_name']}, true per-patch loss): mean "
          f'{rho.mean():.3f} over {len(names)} images')
    if args.saliency:
        if args.masks:
            fg = label_foreground(args.masks, names, inputs.shape[-2:])
        else:
            raw = torch.stack([s['inputs'] for s in samples]).float()
            fg = (raw.mean(1) > args.fg_threshold).numpy()
        sal = saliency_mask(result['shown'], inputs.shape[-2:])
        iou = foreground_iou(sal, fg)
        # reference: a mask of the same size placed at random
        rng = np.random.default_rng(0)
        rand = np.stack(
            [rng.permutation(s.ravel()).reshape(s.shape) for s in sal])
        summary.update(
            saliency_iou=float(iou.mean()),
            random_iou=float(foreground_iou(rand, fg).mean()))
        print(f"saliency IoU (pred. loss > median vs foreground): "
              f"{summary['saliency_iou']:.3f} (random mask of the same size:"
              f" {summary['random_iou']:.3f})")
    with open(osp.join(args.out_dir, 'summary.json'), 'w') as f:
        json.dump(summary, f, indent=2)
    return summary


if __name__ == '__main__':
    from hpm_mm.apis import cli_main
    cli_main(main, 'visualize_hard_patches.py')
