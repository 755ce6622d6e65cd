"""Check a mask generator of your own against the contract.

    python tools/misc/check_mask_generator.py MODULE:CLASS \
        [--kwargs '{"alpha_0": 0.25}'] [--device cpu]

The properties of ``BaseMaskGenerator`` (docs/extending.md) the test suite
checks on every registered generator, each on one line; exit code 1 on a
violation. Runs on the pretraining install (no pytest). MODULE is imported
from the working directory, which registers the class.
"""
import argparse
import json
import sys

from hpm_mm.errors import exit_status


def run(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('target', help='MODULE:CLASS')
    parser.add_argument('--kwargs', default='{}', help='a json dict')
    parser.add_argument(
        '--device', default='cpu', help='where to run it (cpu, cuda)')
    args = parser.parse_args(argv)
    from hpm_mm.testing.check_mask_generator import load_generator, report
    lines, bad = report(
        load_generator(args.target), json.loads(args.kwargs), args.device)
    print('\n'.join(lines))
    return 1 if bad else 0


def main(argv=None):
    return exit_status('check_mask_generator.py', run, argv)


if __name__ == '__main__':
    sys.exit(main())
