"""Evaluate a checkpoint with the config's test loop.

    python tools/test.py CONFIG CHECKPOINT [--work-dir DIR] [--out FILE]
                         [--cfg-options k=v ...] [--launcher pytorch]
"""
import argparse
import os
import os.path as osp

from mmengine.config import Config, DictAction
from mmengine.runner import Runner


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description='Test a checkpoint')
    parser.add_argument('config', help='test config file path')
    parser.add_argument('checkpoint', help='checkpoint file')
    parser.add_argument('--work-dir', help='the dir to save logs and results')
    parser.add_argument(
        '--out', help='dump the metrics to this file (.json/.yaml/.pkl)')
    parser.add_argument(
        '--cfg-options',
        nargs='+',
        action=DictAction,
        help='override settings of the config, key=value')
    parser.add_argument(
        '--launcher',
        choices=['none', 'pytorch', 'slurm', 'mpi'],
        default='none',
        help='job launcher')
    parser.add_argument('--local_rank', '--local-rank', type=int, default=0)
    args = parser.parse_args(argv)
    os.environ.setdefault('LOCAL_RANK', str(args.local_rank))
    return args


def main(argv=None):
    args = parse_args(argv)
    import hpm_mm  # noqa: F401
    cfg = Config.fromfile(args.config)
    if args.cfg_options is not None:
        cfg.merge_from_dict(args.cfg_options)
    cfg.launcher = args.launcher
    if args.work_dir is not None:
        cfg.work_dir = args.work_dir
    elif cfg.get('work_dir') is None:
        cfg.work_dir = osp.join('./work_dirs',
                                osp.splitext(osp.basename(args.config))[0])
    cfg.load_from = args.checkpoint
    from hpm_mm.utils import setup_cpu_distributed
    setup_cpu_distributed(cfg)  # gloo + CPU DDP when there is no GPU
    runner = Runner.from_cfg(cfg)
    metrics = runner.test()
    if args.out:
        from mmengine.fileio import dump
        dump(metrics, args.out)
    return metrics


if __name__ == '__main__':
    main()
