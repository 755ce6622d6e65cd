"""kNN evaluation of a pretrained checkpoint (DINO protocol).

    python tools/analysis_tools/knn_eval.py CONFIG CHECKPOINT \
        [--ks 10 20 100 200] [--temperature 0.07] [--teacher] [--amp]
        [--layer -2] [--out res.json]

The memory bank and evaluated data come from the config's ``KNNEvalHook``
(in ``custom_hooks``), so this tool and the periodic evaluation agree.
"""
import argparse
import json
import sys

from hpm_mm.apis.config import CfgOptionsAction
from hpm_mm.errors import exit_status


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description='kNN evaluation')
    parser.add_argument('config', help='the config the checkpoint trained')
    parser.add_argument(
        'checkpoint', help='the checkpoint (any word with --raw-pixels)')
    parser.add_argument(
        '--ks',
        type=int,
        nargs='+',
        default=None,
        help="numbers of neighbours; default: the config's KNNEvalHook")
    parser.add_argument(
        '--temperature',
        type=float,
        default=None,
        help="the vote's softmax temperature; default: the hook's (0.07)")
    parser.add_argument(
        '--feature',
        choices=['avg', 'cls'],
        default=None,
        help="'avg': patch tokens averaged (the paper's "
        "text); 'cls': the CLS token (the authors' scripts); "
        "default: the config's KNNEvalHook (avg)")
    parser.add_argument(
        '--amp',
        action='store_true',
        help="precision='auto' for the pass: bf16 (fp16) autocast on a GPU, "
        'fp32 on a CPU')
    parser.add_argument(
        '--teacher',
        action='store_true',
        help="evaluate the EMA teacher's encoder")
    parser.add_argument(
        '--raw-pixels',
        action='store_true',
        help='baseline: kNN on the normalised pixels (the '
        'checkpoint argument is ignored)')
    parser.add_argument(
        '--layer',
        type=int,
        help='read the tokens out of this encoder block (0-based, negative '
        "from the end); default: the hook's layer, else the encoder's output")
    parser.add_argument('--out', help='write the accuracies to this json')
    parser.add_argument(
        '--cfg-options',
        nargs='+',
        action=CfgOptionsAction,
        help='override config settings, key=value (xxx=[a,b] lists)')
    return parser.parse_args(argv)


def run(argv=None):
    args = parse_args(argv)
    from hpm_mm.apis import knn_eval, load_config
    from hpm_mm.engine.work_dir import (MARK, plan_outputs, text_writer,
                                        write_outputs)
    from hpm_mm.errors import HPMError
    if args.out:  # before the work (it died after the evaluation)
        plan_outputs([args.out], 'the kNN result (--out)',
                     [args.config, args.checkpoint])
        if not args.out.endswith('.json'):  # (test.py's --out: by suffix)
            raise HPMError(f'--out {args.out}: the accuracies are written '
                           'as json. Fix: --out NAME.json.')
    cfg = load_config(args.config, args.cfg_options)
    r = knn_eval(
        cfg,
        args.checkpoint,
        ks=args.ks,
        temperature=args.temperature,
        feature=args.feature,
        teacher=args.teacher,
        amp=args.amp,
        raw_pixels=args.raw_pixels,
        layer=args.layer,
        log=print)
    acc = r['acc']
    where = '' if r['layer'] is None else f", block {r['layer']}"
    print(f"\nkNN top-1 (T={r['temperature']}, {r['feature']} features"
          f"{where}, "
          f"{r['precision']}), {r['num_train']} train / {r['num_val']} test "
          'images')
    print('| k | top-1 (%) |\n|---|---|')
    for k, v in acc.items():
        print(f'| {k} | {v:.2f} |')
    print(f"best: k={r['best_k']}, {r['best']:.2f}%")
    if args.out:
        keys = ('best_k', 'best', 'feature', 'layer', 'precision')
        saved = {
            MARK: 'knn_eval.py',
            'acc': {
                str(k): v
                for k, v in acc.items()
            }
        }
        saved.update((k, r[k]) for k in keys)
        write_outputs({args.out: text_writer(json.dumps(saved, indent=2))})
    return acc


def main(argv=None):
    return exit_status('knn_eval.py', run, argv)


if __name__ == '__main__':
    sys.exit(main())
