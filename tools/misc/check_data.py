"""Check a config's image files before training.

    python tools/misc/check_data.py CONFIG [--max-images N] [--cfg-options ...]

Builds every dataset the config reads (train/val/test dataloaders and the
datasets of its hooks, e.g. the kNN memory bank), opens every image file
with PIL (header and full decode) and compares the channels the pipeline
loads with the model's input channels. Prints one line per problem and a
summary per dataset; exits 1 when anything is wrong. ``tools/train.py
--check-data`` runs the same check before training.
"""
import argparse
import sys

from hpm_mm.apis.config import CfgOptionsAction
from hpm_mm.errors import exit_status


def run(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('config', help='the config whose datasets to check')
    parser.add_argument(
        '--max-images',
        type=int,
        default=0,
        help='check at most N images per dataset (0: all)')
    parser.add_argument(
        '--cfg-options',
        nargs='+',
        action=CfgOptionsAction,
        help='override config settings, key=value (xxx=[a,b] lists)')
    args = parser.parse_args(argv)
    import hpm_mm  # noqa: F401
    from hpm_mm.apis import load_config
    from hpm_mm.datasets.data_check import check_data
    cfg = load_config(args.config, args.cfg_options)
    result = check_data(cfg, args.max_images)
    for line in result['report']:
        print(line)
    for line in result['problems']:
        print(f'PROBLEM {line}')
    print(f"{len(result['problems'])} problem(s)")
    return 1 if result['problems'] else 0


def main(argv=None):
    return exit_status('check_data.py', run, argv)


if __name__ == '__main__':
    sys.exit(main())
