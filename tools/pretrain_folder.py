"""Pretrain HPM on a folder of your own images, in one command.

    python tools/pretrain_folder.py FOLDER [--from CKPT] [--work-dir DIR]
        [--epochs N] [--img-size S] [--channels 1|3] [--batch-size B]
        [--lr LR] [--alpha-0 A] [--amp] [--resume | --new-run]
        [--skip-unreadable] [--dry-run] [--cfg-options k=v ...]

FOLDER: any images (JPEG, PNG, BMP, WebP, TIFF; any size; grayscale or
colour; nested folders). Every file is opened first; an unreadable one
stops the run with its name (``--skip-unreadable`` leaves such files out
and lists them in the work dir). When FOLDER holds one subfolder per class
(``FOLDER/<class>/.../<img>``), a fifth of each class is held out and the
encoder is evaluated with kNN after training; otherwise the images are used
unlabelled.

The model and recipe are the main job's (the mini ViT, HPM with the
easy-to-hard schedule); input size, channels, patch size, batch size and
epochs are chosen from the images and printed in one line (each has an
option to override it). ``--from CKPT`` (an hpm_mm checkpoint or one
imported by official2hpm.py) continues HPM from its weights instead: its
model, input size, channels and normalisation, and a continued recipe
(docs/own_data.md). The config written to the work dir is an ordinary
config: rerun or edit it with tools/train.py.

The same command after a stop continues the run (it says so): a work dir
that holds an earlier run on the same images is resumed from its newest
complete checkpoint; one on other images (files added or removed) is
refused in one line. The work dir is locked before anything is written.

Output: ``WORK_DIR/hard_patches/*.png`` (the hard-patch grids),
``WORK_DIR/knn.json`` (labelled folders), the checkpoints and the log; the
last line exports the encoder (tools/model_converters/hpm2backbone.py).
"""
import argparse
import sys

from hpm_mm.apis.config import CfgOptionsAction
from hpm_mm.errors import exit_status


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description='Pretrain HPM on a folder of images')
    parser.add_argument('folder', help='folder of images (nested allowed)')
    parser.add_argument(
        '--from',
        dest='start_from',
        metavar='CKPT',
        help='continue HPM from this checkpoint (hpm_mm or imported)')
    parser.add_argument('--work-dir', help='default: work_dirs/folder_<name>')
    parser.add_argument('--epochs', type=int, help='default: from the images')
    parser.add_argument(
        '--img-size', type=int, help='default: from the images')
    parser.add_argument(
        '--channels',
        type=int,
        choices=[1, 3],
        help='default: from the images')
    parser.add_argument(
        '--batch-size', type=int, help='default: from the images')
    parser.add_argument(
        '--lr', type=float, help='default: scaled to the batch')
    parser.add_argument(
        '--alpha-0',
        type=float,
        help='the easy-to-hard schedule\'s start (default: the recipe\'s)')
    parser.add_argument(
        '--amp',
        action='store_true',
        help="precision='auto': bf16 (fp16 without bf16) on a GPU, fp32 on a "
        'CPU')
    group = parser.add_mutually_exclusive_group()
    group.add_argument(
        '--resume',
        action='store_true',
        default=None,
        help='continue the run of the work dir (the default when it ran on '
        'the same images)')
    group.add_argument(
        '--new-run',
        dest='resume',
        action='store_false',
        help='refuse a work dir that holds an earlier run')
    parser.add_argument(
        '--skip-unreadable',
        action='store_true',
        help='leave unreadable files out (listed in '
        'WORK_DIR/unreadable.txt) instead of stopping')
    parser.add_argument(
        '--dry-run',
        action='store_true',
        help='scan, choose and write the config; no training')
    parser.add_argument('--cfg-options', nargs='+', action=CfgOptionsAction)
    return parser.parse_args(argv)


def run(argv=None):
    args = parse_args(argv)
    from hpm_mm.apis import pretrain_folder
    result = pretrain_folder(
        args.folder,
        args.work_dir,
        epochs=args.epochs,
        img_size=args.img_size,
        channels=args.channels,
        batch_size=args.batch_size,
        amp=args.amp,
        resume=args.resume,
        skip_unreadable=args.skip_unreadable,
        dry_run=args.dry_run,
        cfg_options=args.cfg_options,
        log=lambda line: print(line, flush=True),
        start_from=args.start_from,
        lr=args.lr,
        alpha_0=args.alpha_0)
    if args.dry_run:
        return result['config']
    r = result['knn']
    if r is not None:
        print(f'kNN top-1 ({r["num_train"]} bank / {r["num_val"]} held-out '
              f'images): ' + ', '.join(f'k={k}: {v:.2f}%'
                                       for k, v in r['acc'].items()))
    print(f'hard-patch grids: {result["grids"]}/')
    print(result['export'])
    return result['config']


def main(argv=None):
    return exit_status('pretrain_folder.py', run, argv)


if __name__ == '__main__':
    sys.exit(main())
