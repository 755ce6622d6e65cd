"""Pretrain HPM on a folder of your own images, in one command.

    python tools/pretrain_folder.py FOLDER [--work-dir DIR] [--epochs N]
        [--img-size S] [--channels 1|3] [--batch-size B] [--amp]
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
option to override it). The config written to the work dir is an ordinary
config: rerun or edit it with tools/train.py.

Output: ``WORK_DIR/hard_patches/*.png`` (the hard-patch grids),
``WORK_DIR/knn.json`` (labelled folders), the checkpoints and the log.
"""
import argparse
import os.path as osp
import subprocess
import sys

ROOT = osp.dirname(osp.dirname(osp.abspath(__file__)))
BASE_CONFIG = osp.join(ROOT, 'configs', 'hpm',
                       'hpm_vit-mini-p4_1xb256-coslr-10e_fmnist.py')


def parse_args(argv=None):
    from hpm_mm.utils.cli import CfgOptionsAction
    parser = argparse.ArgumentParser(
        description='Pretrain HPM on a folder of images')
    parser.add_argument('folder', help='folder of images (nested allowed)')
    parser.add_argument('--work-dir', help='default: work_dirs/folder_<name>')
    parser.add_argument('--epochs', type=int)
    parser.add_argument('--img-size', type=int)
    parser.add_argument('--channels', type=int, choices=[1, 3])
    parser.add_argument('--batch-size', type=int)
    parser.add_argument(
        '--amp',
        action='store_true',
        help='bf16 autocast on a CPU, fp16 on CUDA')
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


def main(argv=None):
    args = parse_args(argv)
    from mmengine.config import Config

    from hpm_mm.utils.image_folder import (channel_stats, choose_settings,
                                           folder_config, scan_folder)
    folder = args.folder.rstrip('/') or '/'
    work_dir = args.work_dir or osp.join(
        'work_dirs', f'folder_{osp.basename(osp.abspath(folder))}')
    scan = scan_folder(folder)
    bad = scan['unreadable']
    if bad:
        listing = '; '.join(f'{p} ({why})' for p, why in bad[:3])
        more = f' and {len(bad) - 3} more' if len(bad) > 3 else ''
        if not args.skip_unreadable:
            raise SystemExit(
                f'pretrain_folder.py: {len(bad)} unreadable image file(s) in '
                f'{folder}: {listing}{more}. Fix: remove or repair them, or '
                'pass --skip-unreadable to leave them out.')
    if not scan['files']:
        raise SystemExit(f'pretrain_folder.py: no readable image in {folder}.')
    settings = choose_settings(scan, args.img_size, args.channels,
                               args.batch_size, args.epochs)
    stats = channel_stats(folder, scan['files'], settings['img_size'],
                          settings['channels'])
    cfg = folder_config(
        Config.fromfile(BASE_CONFIG), folder, work_dir, scan, settings, stats)
    if bad:
        with open(osp.join(work_dir, 'unreadable.txt'), 'w') as f:
            f.writelines(f'{p}\t{why}\n' for p, why in bad)
        print(f'left out {len(bad)} unreadable file(s): {listing}{more} '
              f'(all in {osp.join(work_dir, "unreadable.txt")})')
    labels = (f'{len(scan["classes"])} classes (kNN on a held-out fifth)'
              if scan['classes'] else 'unlabelled (no kNN)')
    print(f'{settings["num_images"]} images, {labels}; chosen: '
          f'{settings["img_size"]}x{settings["img_size"]} '
          f'{"grayscale" if settings["channels"] == 1 else "RGB"} '
          f'(median short side {settings["median_short_side"]:g} px), '
          f'patch {settings["patch_size"]}, batch {settings["batch_size"]}, '
          f'{settings["epochs"]} epochs of {settings["steps_per_epoch"]} '
          'steps; override: --img-size --channels --batch-size --epochs')
    if args.cfg_options:
        from hpm_mm.utils.cli import merge_cfg_options
        merge_cfg_options(cfg, args.cfg_options)
    cfg_path = osp.join(work_dir, 'hpm_folder.py')
    cfg.dump(cfg_path)
    print(f'config: {cfg_path}')
    if args.dry_run:
        return cfg_path
    cmd = [
        sys.executable,
        osp.join(ROOT, 'tools', 'train.py'), cfg_path, '--work-dir', work_dir,
        '--quiet'
    ]
    if args.amp:
        cmd.append('--amp')
    rc = subprocess.call(cmd)
    if rc:
        raise SystemExit(rc)
    knn = osp.join(work_dir, 'knn.json')
    if osp.exists(knn):
        import json
        r = json.load(open(knn))
        print(f'kNN top-1 ({r["num_train"]} bank / {r["num_val"]} held-out '
              f'images): ' + ', '.join(f'k={k}: {v:.2f}%'
                                       for k, v in r['acc'].items()))
    grids = osp.join(work_dir, 'hard_patches')
    print(f'hard-patch grids: {grids}/')
    return cfg_path


if __name__ == '__main__':
    main()
