"""Train a model from a config (mmpretrain's CLI conventions).

    python tools/train.py CONFIG [--work-dir DIR] [--resume [CKPT]] [--amp]
                          [--quiet] [--tensorboard]
                          [--cfg-options k=v ...] [--launcher pytorch]

The run's policy (precision, run length, one run per work dir, resume, the
checkpoint checks, skipped steps, CPU DDP) is hpm_mm's runner's
(:mod:`hpm_mm.engine.runner`): ``RUNNERS.build(cfg)``, ``mim train`` and
:func:`hpm_mm.apis.train` get the same.
"""
import argparse
import sys

from hpm_mm.apis.config import parse_launched
from hpm_mm.errors import exit_status


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description='Train a model')
    parser.add_argument('config', help='train config file path')
    parser.add_argument('--work-dir', help='the dir to save logs and models')
    parser.add_argument(
        '--resume',
        nargs='?',
        type=str,
        const='auto',
        help='resume from this checkpoint, or from the latest checkpoint in '
        'the work_dir when no path is given')
    parser.add_argument(
        '--amp',
        action='store_true',
        help="precision='auto': bf16 autocast on a GPU with bf16, fp16 with a "
        'dynamic loss scale on one without, fp32 on a CPU (over the '
        "config's precision key, with a warning)")
    parser.add_argument(
        '--quiet',
        action='store_true',
        help='console: one line per epoch (ConsoleProgressHook) and warnings; '
        'the environment, the config and every logged line stay in the work '
        "dir's log file")
    parser.add_argument(
        '--tensorboard',
        action='store_true',
        help='also log to TensorBoard (work_dir/<timestamp>/vis_data): the '
        'loss curves, kNN and the hard-patch grids')
    parser.add_argument(
        '--check-data',
        action='store_true',
        help='open every image file of the config first (as '
        'tools/misc/check_data.py) and stop on any problem')
    parser.add_argument(
        '--no-validate',
        action='store_true',
        help='skip the validation loop during training')
    parser.add_argument(
        '--auto-scale-lr',
        action='store_true',
        help='scale the lr by total batch / auto_scale_lr.base_batch_size')
    parser.add_argument(
        '--no-pin-memory', action='store_true', help='pin_memory=False')
    parser.add_argument(
        '--no-persistent-workers',
        action='store_true',
        help='persistent_workers=False')
    return parse_launched(parser, argv)


def run(argv=None):
    args = parse_args(argv)
    from hpm_mm.apis import build_runner, train_config
    cfg = train_config(
        args.config,
        args.work_dir,
        resume=args.resume,
        amp=args.amp,
        quiet=args.quiet,
        tensorboard=args.tensorboard,
        validate=not args.no_validate,
        auto_scale_lr=args.auto_scale_lr,
        launcher=args.launcher,
        cfg_options=args.cfg_options,
        pin_memory=not args.no_pin_memory,
        persistent_workers=not args.no_persistent_workers)
    if args.check_data:
        from hpm_mm.datasets.data_check import check_data
        result = check_data(cfg)
        print('\n'.join(result['report']))
        if result['problems']:
            raise SystemExit('train.py --check-data: ' +
                             '\n'.join(result['problems']))
    runner = build_runner(cfg)
    runner.train()
    return runner


def main(argv=None):
    return exit_status('train.py', run, argv)


if __name__ == '__main__':
    sys.exit(main())
