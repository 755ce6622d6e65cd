"""kNN evaluation of a pretrained checkpoint (DINO protocol).

    python tools/analysis_tools/knn_eval.py CONFIG CHECKPOINT \
        [--ks 10 20 100 200] [--temperature 0.07] [--teacher] [--amp]
        [--out res.json]

The memory bank and evaluated data come from the config's ``KNNEvalHook``
(in ``custom_hooks``), so this tool and the periodic evaluation agree.
"""
import argparse
import json

import torch
from mmengine.registry import init_default_scope
from mmengine.runner import Runner

from hpm_mm.utils.cli import CfgOptionsAction, load_config, merge_cfg_options


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description='kNN evaluation')
    parser.add_argument('config')
    parser.add_argument('checkpoint')
    parser.add_argument('--ks', type=int, nargs='+', default=None)
    parser.add_argument('--temperature', type=float, default=None)
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
        help='mixed precision where the hardware computes it '
        'faster (as tools/train.py --amp: fp16 on CUDA, bf16 '
        'on a CPU with native bf16, else fp32), as the '
        'KNNEvalHook of a run trained with --amp')
    parser.add_argument(
        '--teacher',
        action='store_true',
        help="evaluate the EMA teacher's encoder")
    parser.add_argument(
        '--raw-pixels',
        action='store_true',
        help='baseline: kNN on the normalised pixels (the '
        'checkpoint argument is ignored)')
    parser.add_argument('--out', help='write the accuracies to this json')
    parser.add_argument('--cfg-options', nargs='+', action=CfgOptionsAction)
    return parser.parse_args(argv)


def load_model(cfg, checkpoint: str, teacher: bool = False):
    """Build ``cfg.model`` and load ``checkpoint`` with a strict key report."""
    from hpm_mm.utils import build_model, load_checkpoint_strict
    model = build_model(cfg)
    load_checkpoint_strict(model, checkpoint, teacher=teacher)
    return model


class PixelFeatures(torch.nn.Module):
    """Stand-in model whose features are the normalised pixels."""

    def __init__(self, data_preprocessor):
        super().__init__()
        self.data_preprocessor = data_preprocessor

    def extract_feat(self, inputs):
        return inputs.flatten(1)


def main(argv=None):
    args = parse_args(argv)
    import hpm_mm  # noqa: F401
    from hpm_mm.evaluation import extract_features, knn_classify
    cfg = load_config(args.config, 'knn_eval.py')
    if args.cfg_options:
        merge_cfg_options(cfg, args.cfg_options)
    init_default_scope(cfg.get('default_scope', 'mmpretrain'))
    hooks = [
        h for h in cfg.get('custom_hooks', [])
        if h.get('type') == 'KNNEvalHook'
    ]
    if not hooks:
        raise SystemExit(
            f'{args.config} has no KNNEvalHook in custom_hooks, so it does '
            'not say which labelled data to use. Add dict(type="KNNEvalHook", '
            'train_dataloader=..., val_dataloader=...) to custom_hooks.')
    hook = hooks[0]
    ks = args.ks or hook.get('ks', (10, 20, 100, 200))
    temperature = args.temperature or hook.get('temperature', 0.07)
    feature = args.feature or hook.get('feature', 'avg')
    if args.raw_pixels:
        from hpm_mm.utils import build_model
        model = PixelFeatures(build_model(cfg).data_preprocessor)
    else:
        model = load_model(cfg, args.checkpoint, args.teacher)
    from hpm_mm.utils.precision import choose_precision
    precision = choose_precision(
        args.amp,
        next(model.parameters(), torch.empty(0)).device.type)
    print(precision.line())
    feats = {}
    for split in ('train', 'val'):
        loader = Runner.build_dataloader(hook[f'{split}_dataloader'], seed=0)
        print(f'extracting {split} features '
              f'({len(loader.dataset)} images)')
        feats[split] = extract_features(
            model,
            loader,
            feature='avg' if args.raw_pixels else feature,
            amp=args.amp)
    acc = knn_classify(feats['train']['feats'], feats['train']['labels'],
                       feats['val']['feats'], feats['val']['labels'], ks,
                       temperature)
    print(f'\nkNN top-1 (T={temperature}, {feature} features, '
          f'{precision.name}), '
          f"{len(feats['train']['labels'])} train / "
          f"{len(feats['val']['labels'])} test images")
    print('| k | top-1 (%) |\n|---|---|')
    for k, v in acc.items():
        print(f'| {k} | {v:.2f} |')
    best = max(acc, key=acc.get)
    print(f'best: k={best}, {acc[best]:.2f}%')
    if args.out:
        with open(args.out, 'w') as f:
            json.dump(
                dict(
                    acc={
                        str(k): v
                        for k, v in acc.items()
                    },
                    best_k=best,
                    best=acc[best],
                    feature=feature,
                    precision=precision.name),
                f,
                indent=2)
    return acc


if __name__ == '__main__':
    torch.set_grad_enabled(False)
    main()
