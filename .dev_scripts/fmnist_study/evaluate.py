"""Phase 2 of the Fashion-MNIST study: evaluate one run, write its json.

    python .dev_scripts/fmnist_study/evaluate.py RUN [--finetune 1 10]

RUN: a run pretrain.py finished, or ``scratch_seedS`` (fine-tunes from random
init). kNN and cached linear probes of the frozen encoder on both features
(:func:`hpm_mm.apis.frozen_eval`), fine-tunes on 1% / 10% of the labels
(``apis.train`` + ``apis.test``) -> ``docs/results/fmnist_study/RUN.json``.
"""
import argparse
import glob
import json
import os.path as osp
import time

from common import PLAN, RESULTS, ROOT, WORK, machine, save

PERCENTS = sorted(PLAN['finetune']['epochs_by_percent'])


def finetune(work, ckpt, seed, percent):
    """Top-1 of the fine-tune config from ``ckpt`` (None: random init) on
    the first ``percent``% of the training labels."""
    from hpm_mm import apis
    config = osp.join(ROOT, PLAN['finetune']['config'])
    epochs = PLAN['finetune']['epochs_by_percent'][percent]
    out = osp.join(work, f'lowlabel{percent}')
    metrics = osp.join(out, 'metrics.json')
    if not osp.exists(metrics):
        init = {'model.backbone.init_cfg.checkpoint': ckpt} if ckpt else \
            {'model.backbone.init_cfg': None}
        apis.train(
            config,
            out,
            resume=bool(glob.glob(osp.join(out, 'epoch_*.pth'))),
            quiet=True,
            cfg_options={
                **init, 'randomness.seed': seed,
                'train_dataloader.dataset.indices': 600 * percent,
                'train_cfg.max_epochs': epochs,
                'train_cfg.val_interval': epochs,
                'param_scheduler.1.T_max': epochs - 1,
                'param_scheduler.1.end': epochs,
                'default_hooks.checkpoint.interval': epochs
            })
        apis.test(
            config, osp.join(out, f'epoch_{epochs}.pth'), out, out=metrics)
    return json.load(open(metrics))['accuracy/top1']


def frozen(work, ckpt, seed):
    """kNN and cached linear probes on both features (the run's config
    keeps its KNNEvalHook's data; pretrain.py trains without the hook)."""
    from hpm_mm.apis import frozen_eval
    config = osp.join(work, 'config.py')
    r, out = frozen_eval(config, ckpt, seed=seed, **PLAN['evaluation']), {}
    for f, acc in r['knn'].items():
        out[f'knn_{f}'] = max(acc.values())
        out[f'knn_{f}_by_k'] = {str(k): v for k, v in acc.items()}
        out[f'linear_{f}'] = r['linear'][f]
    return out


def pretrain_end(work):
    """The last logged rank_acc, teacher Spearman and loss_rec."""
    scalars = {}
    for path in sorted(
            glob.glob(osp.join(work, '*', 'vis_data', 'scalars.json'))):
        for line in open(path):
            scalars.update(json.loads(line))
    keys = dict(
        rank_acc='rank_acc', spearman='hpm/spearman', loss_rec='loss_rec')
    return {k: scalars[s] for k, s in keys.items() if s in scalars}


def evaluate(name, percents=PERCENTS):
    work, ckpt, cmd = osp.join(WORK, name), None, \
        'python .dev_scripts/fmnist_study/'
    if name.startswith('scratch_seed'):
        seed = int(name[len('scratch_seed'):])
        record = dict(name=name, variant='scratch', seed=seed, metrics={})
        record['commands'] = []
    else:
        path = osp.join(work, 'pretrain.json')
        if not osp.exists(path) or not json.load(open(path)).get('finished'):
            raise SystemExit(f'{name} has not finished pretraining ({path}).'
                             ' Fix: run pretrain.py for it first.')
        record = json.load(open(path))
        variant, seed = record['variant'], record['seed']
        ckpt = osp.join(work, f"epoch_{record['epochs']}.pth")
        record.update(
            PLAN['variants'][variant],
            train_seconds=sum(a['seconds'] for a in record['attempts']),
            commands=[
                f"{cmd}pretrain.py {variant} --seed {seed} --epochs "
                f"{record['epochs']} --images {record['images_per_epoch']}"
            ])
        start = time.time()
        record['metrics'] = frozen(work, ckpt, seed)
        record.update(
            eval_seconds=time.time() - start, pretrain_end=pretrain_end(work))
    start = time.time()
    for p in percents:
        record['metrics'][f'finetune_{p}pct'] = finetune(work, ckpt, seed, p)
    record.update(finetune_seconds=time.time() - start, machine=machine())
    record['commands'].append(f'{cmd}evaluate.py {name} --finetune ' +
                              ' '.join(map(str, percents)))
    save(osp.join(RESULTS, f'{name}.json'), record)
    return record


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('run', help='a trained run, or scratch_seedS')
    parser.add_argument('--finetune', type=int, nargs='*', default=PERCENTS)
    args = parser.parse_args(argv)
    if set(args.finetune) - set(PERCENTS):
        parser.error(f'--finetune: the plan has {PERCENTS} only')
    evaluate(args.run, args.finetune)


if __name__ == '__main__':
    main()
