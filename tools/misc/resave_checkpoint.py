"""Re-save, in place, a trusted checkpoint that mmengine's HistoryBuffers
made unloadable: saved by a process without hpm_mm imported (a plain
``torch.save`` of a loaded checkpoint), it pickles their methods with
``builtins.getattr``, which the checkpoint allow-list refuses.

    python tools/misc/resave_checkpoint.py CKPT

Loads it weights-only with exactly ``builtins.getattr`` added to the
allow-list (torch's legacy pre-zip files too; written back in the zip
format), and refuses in one line, loading nothing, an address, a missing,
damaged or cut file, a folder, or a file naming any other global outside
it (named). A file that loads as it is is left as it is. docs/reliability.md.
"""
import argparse
import os
import sys

from hpm_mm.errors import exit_status


def run(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('checkpoint', help='the checkpoint, re-saved in place')
    args = parser.parse_args(argv)
    from hpm_mm.engine.safe_load import resave_checkpoint
    from hpm_mm.engine.work_dir import check_writable
    if os.path.isfile(args.checkpoint):  # its folder, before the work
        check_writable(args.checkpoint, 'the re-saved checkpoint')
    if resave_checkpoint(args.checkpoint):
        print(f're-saved {args.checkpoint}: it loads with the allow-list now')
    else:
        print(f'{args.checkpoint} loads with the allow-list as it is: left '
              'as it was')


def main(argv=None):
    return exit_status('resave_checkpoint.py', run, argv)


if __name__ == '__main__':
    sys.exit(main())
