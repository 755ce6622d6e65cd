"""Evaluate a checkpoint with the config's test loop.

    python tools/test.py CONFIG CHECKPOINT [--work-dir DIR] [--out FILE]
                         [--partial-load] [--cfg-options k=v ...]
                         [--launcher pytorch]

The checkpoint must fit the model (every tensor present, with its shape,
and none the model lacks): a pretraining checkpoint tested with a classifier
config, a deeper model's, or a file of other tensors, is refused with one
line instead of evaluating a partly random or cut model. ``--partial-load``
evaluates anyway (missing tensors keep their initialisation). A checkpoint
holding NaN/inf is refused either way, and ``--out`` is planned before the
evaluation (its format; its folder tried by making a file; never over an
input or a file hpm_mm did not write) and written whole.
"""
import argparse
import sys

from hpm_mm.apis.config import parse_launched
from hpm_mm.errors import exit_status


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
        help='evaluate even when the checkpoint does not fit the model')
    return parse_launched(parser, argv)


def run(argv=None):
    args = parse_args(argv)
    from hpm_mm.apis import test
    return test(
        args.config,
        args.checkpoint,
        args.work_dir,
        out=args.out,
        partial_load=args.partial_load,
        launcher=args.launcher,
        cfg_options=args.cfg_options)


def main(argv=None):
    return exit_status('tools/test.py', run, argv)


if __name__ == '__main__':
    sys.exit(main())
