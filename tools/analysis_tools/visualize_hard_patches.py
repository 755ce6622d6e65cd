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
import sys

from hpm_mm.apis.config import CfgOptionsAction
from hpm_mm.errors import exit_status


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description='Visualise hard patches')
    parser.add_argument('config', help='the config the checkpoint trained')
    parser.add_argument('checkpoint', help='an hpm_mm checkpoint')
    parser.add_argument('--images', help='folder of images to draw')
    parser.add_argument(
        '--num-samples', type=int, default=8, help='images to draw')
    parser.add_argument(
        '--progress',
        type=float,
        default=1.0,
        help='training progress t/T at which the mask '
        'generator draws the mask (default: 1.0, the end)')
    parser.add_argument(
        '--num-masks',
        type=int,
        default=8,
        help='random masks averaged for the true per-patch loss')
    parser.add_argument(
        '--student',
        action='store_true',
        help="use the student's loss predictor")
    parser.add_argument(
        '--out-dir',
        help='default: hard_patches/<checkpoint name>[_student]/ beside the '
        'checkpoint (each checkpoint its own folder)')
    parser.add_argument(
        '--saliency',
        action='store_true',
        help='also the IoU of the predicted-loss map with the foreground')
    parser.add_argument(
        '--fg-threshold',
        type=float,
        default=10.,
        help='foreground = raw pixel value above this')
    parser.add_argument(
        '--masks',
        help='folder of label maps <stem>.png '
        '(foreground = label > 0) for --saliency')
    parser.add_argument(
        '--cfg-options',
        nargs='+',
        action=CfgOptionsAction,
        help='override config settings, key=value (xxx=[a,b] lists)')
    return parser.parse_args(argv)


def run(argv=None):
    args = parse_args(argv)
    from hpm_mm.apis import hard_patches, load_config
    cfg = load_config(args.config, args.cfg_options)
    if args.out_dir is None:
        import os.path as osp
        stem = osp.splitext(osp.basename(args.checkpoint))[0]
        args.out_dir = osp.join(
            osp.dirname(osp.abspath(args.checkpoint)), 'hard_patches',
            stem + ('_student' if args.student else ''))
    summary = hard_patches(
        cfg,
        args.checkpoint,
        args.out_dir,
        images=args.images,
        num_samples=args.num_samples,
        progress=args.progress,
        num_masks=args.num_masks,
        student=args.student,
        saliency=args.saliency,
        fg_threshold=args.fg_threshold,
        masks=args.masks)
    n = summary['num_images']
    print(f'wrote {n} grids to {args.out_dir}')
    print(f"Spearman({summary['shown']}, true per-patch loss): mean "
          f"{summary['spearman_mean']:.3f} over {n} images")
    if args.saliency:
        print('saliency IoU (pred. loss > median vs foreground): '
              f"{summary['saliency_iou']:.3f} (random mask of the same size:"
              f" {summary['random_iou']:.3f})")
    return summary


def main(argv=None):
    return exit_status('visualize_hard_patches.py', run, argv)


if __name__ == '__main__':
    sys.exit(main())
