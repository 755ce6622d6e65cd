"""Evaluate a checkpoint with the config's test loop.

    python tools/test.py CONFIG CHECKPOINT [--work-dir DIR] [--out FILE]
                         [--partial-load] [--cfg-options k=v ...]
                         [--launcher pytorch]

The checkpoint must fill the model (every tensor present, with its shape):
a pretraining checkpoint tested with a classifier config, or a file of other
tensors, is refused with one line instead of evaluating a partly random
model. ``--partial-load`` evaluates anyway (missing tensors keep their
initialisation).
"""
import argparse
import os
import os.path as osp

from mmengine.config import Config
from mmengine.runner import Runner

from hpm_mm.utils.cli import (CfgOptionsAction, load_config,
                              merge_cfg_options)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description='Test a checkpoint')
    parser.add_argument('config', help='test config file path')
    parser.add_argument('checkpoint', help='checkpoint file')
    parser.add_argument('--work-dir', help='the dir to save logs and results')
    parser.add_argument(
        '--out', help='dump the metrics to this file (.json/.yaml/.pkl)')
    parser.add_argument(
        '--partial-load',
        action='store_true',
        help='evaluate even when the checkpoint does not fill the model')
    parser.add_argument(
        '--cfg-options',
        nargs='+',
        action=CfgOptionsAction,
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
    cfg = load_config(args.config, 'test.py')
    if args.cfg_options is not None:
        merge_cfg_options(cfg, args.cfg_options)
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
    if not args.partial_load:
        from mmengine.model import is_model_wrapper
        from mmengine.runner.checkpoint import _load_checkpoint

        from hpm_mm.utils import checkpoint_mismatch
        ckpt = _load_checkpoint(args.checkpoint, map_location='cpu')
        model = runner.model.module if is_model_wrapper(runner.model) \
            else runner.model
        problem = checkpoint_mismatch(
            model, ckpt.get('state_dict', ckpt), args.checkpoint)
        if problem:
            raise SystemExit(
                f'tools/test.py: {problem}. Fix: test it with the config it '
                'was trained with (a pretraining checkpoint needs a linear '
                'probe or fine-tune first), or pass --partial-load.')
    metrics = runner.test()
    if args.out:
        from mmengine.fileio import dump
        dump(metrics, args.out)
    return metrics


if __name__ == '__main__':
    main()
