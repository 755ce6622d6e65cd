"""Evaluate a checkpoint with the config's test loop.

    python tools/test.py CONFIG CHECKPOINT [--work-dir DIR] [--out FILE]
                         [--partial-load] [--cfg-options k=v ...]
                         [--launcher pytorch]

The checkpoint must fill the model (every tensor present, with its shape):
a pretraining checkpoint tested with a classifier config, or a file of other
tensors, is refused with one line instead of evaluating a partly random
model. ``--partial-load`` evaluates anyway (missing tensors keep their
initialisation). A checkpoint holding NaN/inf is refused either way, and
``--out`` is checked (format, folder) before the evaluation.
"""
import argparse
import os
import os.path as osp

from hpm_mm.apis.config import CfgOptionsAction, load_config, merge_cfg_options


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
    cfg = load_config(args.config)
    if args.cfg_options is not None:
        merge_cfg_options(cfg, args.cfg_options)
    cfg.launcher = args.launcher
    if args.work_dir is not None:
        cfg.work_dir = args.work_dir
    elif cfg.get('work_dir') is None:
        cfg.work_dir = osp.join('./work_dirs',
                                osp.splitext(osp.basename(args.config))[0])
    cfg.load_from = args.checkpoint
    if args.out:
        check_out(args.out)
    from hpm_mm.engine.runner import setup_cpu_distributed
    setup_cpu_distributed(cfg.launcher, cfg)  # gloo + DDP without a GPU
    # an evaluation: no training parts, so hpm_mm's runner takes no work-dir
    # lock and checks no training run (its checkpoint is checked below)
    cfg.train_dataloader = cfg.train_cfg = cfg.optim_wrapper = None
    cfg.param_scheduler, cfg.resume = None, False
    from hpm_mm.apis import build_runner
    runner = build_runner(cfg)
    from mmpretrain.utils import get_ori_model

    from hpm_mm.engine.checkpoint import (checkpoint_mismatch,
                                          checkpoint_state, nonfinite_tensors)
    model = get_ori_model(runner.model)
    state = checkpoint_state(model, args.checkpoint)
    problem = nonfinite_tensors(state, args.checkpoint)
    if problem:
        raise SystemExit(f'tools/test.py: {problem}. Fix: test an earlier '
                         'checkpoint of the run (its training diverged).')
    problem = None if args.partial_load else checkpoint_mismatch(
        model, state, args.checkpoint)
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


def check_out(path: str) -> None:
    """Refuse an ``--out`` that could not be written, before the evaluation
    (mmengine's dump fails only after it): a format dump does not know, or
    a folder that does not exist."""
    ext = osp.splitext(path)[1].lower()
    if ext not in ('.json', '.yaml', '.yml', '.pkl', '.pickle'):
        raise SystemExit(
            f'tools/test.py: --out {path}: unknown format {ext or "(none)"}. '
            'Fix: end it in .json, .yaml or .pkl.')
    folder = osp.dirname(osp.abspath(path))
    if not osp.isdir(folder):
        raise SystemExit(
            f'tools/test.py: --out {path}: the folder {folder} does not '
            'exist. Fix: create it, or write elsewhere.')


if __name__ == '__main__':
    from hpm_mm.errors import HPMError
    try:
        main()
    except HPMError as e:  # the library's one-line refusal: exit 1
        raise SystemExit(f'test.py: {e}') from None
