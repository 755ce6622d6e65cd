"""bf16 autocast and the fused AdamW kernel against fp32 on the main job,
paired by seed.

    python .dev_scripts/precision_study.py run [--seeds 0 1 2] [--epochs 2] \
        [--precisions fp32 bf16 fused] [--results DIR]
    python .dev_scripts/precision_study.py report [--results DIR]

``run``: per seed, the main job's config scaled to ``--epochs``
(``scale_recipe``) trained in each precision from the same seed (fixed by
the config), then evaluated alike in fp32 (kNN and the cached linear
probe); one json per run in ``--results`` (default
``docs/results/precision``); a run whose json exists is skipped.
``report``: each variant minus fp32 per metric: mean and 95% t interval."""
import argparse
import glob
import json
import os
import os.path as osp
import sys
import time

ROOT = osp.dirname(osp.dirname(osp.abspath(__file__)))
sys.path.insert(0, osp.join(ROOT, '.dev_scripts', 'fmnist_study'))
from common import machine  # noqa: E402  (the study's record of a machine)
from evaluate import pretrain_end  # noqa: E402  (a run's last scalars)
from report import ci as interval  # noqa: E402  (mean, 95% t half width)

CONFIG = 'configs/hpm/fast/hpm-fast_vit-mini-p4_1xb256-coslr-10e_fmnist.py'
RESULTS = osp.join(ROOT, 'docs', 'results', 'precision')
WORK = osp.join(ROOT, 'work_dirs', 'precision_study')
IMAGES = 10000  # the main job's images per epoch
WRAPPERS = dict(
    fp32=dict(type='GuardedOptimWrapper'),
    bf16=dict(type='AutocastOptimWrapper', dtype='bfloat16'),
    fused=dict(type='GuardedOptimWrapper', optimizer=dict(fused=True)))
METRICS = ('knn_k10', 'knn_best', 'linear', 'loss_rec', 'rank_acc')


def run_config(precision, seed, epochs):
    from mmengine.config import Config

    from hpm_mm.engine.schedule import scale_recipe, steps_per_epoch
    cfg = Config.fromfile(osp.join(ROOT, CONFIG))
    scale_recipe(cfg, epochs,
                 steps_per_epoch(IMAGES, cfg.train_dataloader.batch_size))
    cfg.randomness.seed = seed
    wrapper = dict(cfg.optim_wrapper)
    for key in ('loss_scale', 'dtype'):
        wrapper.pop(key, None)
    variant = dict(WRAPPERS[precision])
    optimizer = dict(wrapper['optimizer'], **variant.pop('optimizer', {}))
    cfg.optim_wrapper = dict(wrapper, **variant, optimizer=optimizer)
    return cfg


def run_one(precision, seed, epochs, results=RESULTS):
    from hpm_mm.apis import frozen_eval, train
    name = f'{precision}_{epochs}e_seed{seed}'
    out = osp.join(results, name + '.json')
    if osp.exists(out):
        return
    work = osp.join(WORK, name)
    cfg = run_config(precision, seed, epochs)
    os.makedirs(work, exist_ok=True)
    config = osp.join(work, 'config.py')
    cfg.dump(config)
    # the evaluation is the same fp32 pass for both: the hook's data stays in
    # the config, the hook itself does not run during training
    hooks = [h for h in cfg.custom_hooks if h['type'] != 'KNNEvalHook']
    start = time.time()
    train(
        config,
        work,
        resume=bool(glob.glob(osp.join(work, '*.pth'))),
        quiet=True,
        custom_hooks=hooks)
    train_s = time.time() - start
    ckpt = osp.join(work, f'epoch_{epochs}.pth')
    start = time.time()
    r = frozen_eval(config, ckpt, features=('avg', ), linear=True, seed=seed)
    eval_s = time.time() - start
    scalars = pretrain_end(work)
    knn = r['knn']['avg']
    record = dict(
        name=name,
        precision=precision,
        trained_in=json.load(open(osp.join(work,
                                           'precision.json')))['precision'],
        seed=seed,
        epochs=epochs,
        images_per_epoch=IMAGES,
        config=CONFIG,
        metrics=dict(
            knn_k10=knn[10],
            knn_best=max(knn.values()),
            knn_by_k={
                str(k): v
                for k, v in knn.items()
            },
            linear=r['linear']['avg'],
            loss_rec=scalars.get('loss_rec'),
            rank_acc=scalars.get('rank_acc')),
        evaluation='fp32 features, kNN T=0.07 + cached linear probe (avg)',
        machine=machine(),
        train_seconds=round(train_s, 1),
        eval_seconds=round(eval_s, 1),
        command=f'python .dev_scripts/precision_study.py run --seeds {seed} '
        f'--epochs {epochs} --precisions {precision} --results '
        f'{osp.relpath(results, ROOT)}',
        date=time.strftime('%Y-%m-%d %H:%M'))
    os.makedirs(results, exist_ok=True)
    with open(out, 'w') as f:
        json.dump(record, f, indent=1)
    print(
        f'wrote {osp.relpath(out, ROOT)}: kNN k=10 {knn[10]:.2f}, '
        f'train {train_s:.0f} s',
        flush=True)


def paired(records, metric, variant='bf16'):
    """``variant`` - fp32 per seed both finished (same epochs)."""
    by = {(r['precision'], r['epochs'], r['seed']): r for r in records}
    diffs = []
    for (prec, epochs, seed), r in sorted(by.items()):
        other = by.get(('fp32', epochs, seed))
        if prec == variant and other is not None:
            a, b = r['metrics'].get(metric), other['metrics'].get(metric)
            if a is not None and b is not None:
                diffs.append(a - b)
    return diffs


def report(results=RESULTS):
    records = [
        json.load(open(p))
        for p in sorted(glob.glob(osp.join(results, '*_seed*.json')))
    ]
    lines = [
        '| run | kNN k=10 | linear | loss_rec | rank_acc | train s |',
        '|---|---|---|---|---|---|'
    ]
    for r in records:
        m = r['metrics']
        lines.append(f"| {r['name']} | {m['knn_k10']:.2f} | "
                     f"{m['linear']:.2f} | {m['loss_rec']:.4f} | "
                     f"{m['rank_acc']:.4f} | {r['train_seconds']:.0f} |")
    for variant in [v for v in WRAPPERS if v != 'fp32']:
        rows = []
        for metric in METRICS:
            diffs = paired(records, metric, variant)
            if not diffs:
                continue
            mean, half = interval(diffs)
            ci = '-' if half is None else \
                f'[{mean - half:+.4g}, {mean + half:+.4g}]'
            rows.append(f'| {metric} | {len(diffs)} | {mean:+.4g} | {ci} |')
        if rows:
            lines += [
                '', f'| {variant} - fp32 | seeds | mean | 95% interval |',
                '|---|---|---|---|'
            ] + rows
    text = '\n'.join(lines)
    print(text)
    return text


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest='cmd', required=True)
    run = sub.add_parser('run', help='train and evaluate the runs')
    run.add_argument('--seeds', type=int, nargs='+', default=[0, 1, 2])
    run.add_argument('--epochs', type=int, default=2)
    run.add_argument(
        '--precisions',
        nargs='+',
        default=['fp32', 'bf16'],
        choices=list(WRAPPERS))
    run.add_argument('--results', default=RESULTS)
    rep = sub.add_parser('report', help='the paired differences')
    rep.add_argument('--results', default=RESULTS)
    args = parser.parse_args(argv)
    if args.cmd == 'report':
        report(args.results)
        return
    for seed in args.seeds:
        for precision in args.precisions:
            run_one(precision, seed, args.epochs, args.results)


if __name__ == '__main__':
    main()
