"""Import the authors' released HPM checkpoints (or MAE's official ones) as
hpm_mm HPM checkpoints.

    python tools/model_converters/official2hpm.py SRC OUT.pth \
        [--num-heads N] [--decoder-num-heads N] [--no-ema]

Reads SRC weights-only (its CRCs checked), the sizes from its tensors and
every tensor of the model (one missing: refused in one line; only the parts
its layout lacks start fresh, named), and writes OUT.pth (student = the
released weights, teacher = its EMA weights where it has them, else the
same; no optimizer state) and its config OUT.py as a set (never over SRC or
a file hpm_mm did not write), which every hpm_mm command takes: knn_eval.py,
visualize_hard_patches.py, hpm2backbone.py, the fine-tune / detection /
segmentation configs' ``init_cfg``, ``load_from`` to continue pretraining.
``--num-heads`` is only needed for an encoder of no standard ViT width.
docs/transfer.md.
"""
import argparse
import sys

from hpm_mm.errors import exit_status


def run(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('src', help="the authors' or MAE's .pth")
    parser.add_argument('out', help='the hpm_mm checkpoint to write (.pth)')
    parser.add_argument(
        '--num-heads',
        type=int,
        help='the encoder\'s heads: only for a width no standard ViT has')
    parser.add_argument(
        '--decoder-num-heads',
        type=int,
        help='the decoder\'s heads: only for a decoder not 512 wide '
        '(default 16)')
    parser.add_argument(
        '--no-ema',
        action='store_true',
        help="teacher = the released weights, not the file's EMA entry")
    args = parser.parse_args(argv)
    from hpm_mm.apis import import_official
    done = import_official(args.src, args.out, args.num_heads,
                           args.decoder_num_heads, not args.no_ema)
    print(done['message'])
    print(f"wrote {done['out']} and {done['config']}; e.g. python "
          f"tools/analysis_tools/knn_eval.py {done['config']} {done['out']}")
    return done


def main(argv=None):
    return exit_status('official2hpm.py', run, argv)


if __name__ == '__main__':
    sys.exit(main())
