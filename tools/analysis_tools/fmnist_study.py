"""The small-scale study: MAE vs HPM and the paper's Tab. 3/4 variants on
Fashion-MNIST, equal epochs, several seeds, kNN (and optionally linear
probing) of every run.

    python tools/analysis_tools/fmnist_study.py [--seeds 0 1 2] [--linear]
        [--cls] [--variants mae hpm random ...] [--out work_dirs/fmnist_study]
        [--report-only]

Each run is ``tools/train.py`` on the small config with the variant's
``--cfg-options`` and ``randomness.seed``, then
``tools/analysis_tools/knn_eval.py`` on its last checkpoint (and, with
``--linear``, the linear-probe benchmark config). kNN and the linear probe
read the average of the patch tokens (the paper's text); ``--cls`` adds both
on the CLS token (what the authors' scripts read). Finished runs are reused
and an interrupted one resumes from its last checkpoint (``--resume``): a
run counts as finished only when its ``last_checkpoint`` is the config's
final epoch. ``--report-only`` tabulates the finished runs without
training. Writes ``study.md`` and ``study.json`` (mean and std
over seeds, plus the exact commands).

Cost on 2 CPU cores (measured): ~13 min per HPM run and ~10 min per MAE
run (10 epochs of 10k images) plus ~3.5 min of kNN (60k + 10k images), i.e.
about 5 hours for the 6 paper variants x 3 seeds (more than one working
session here: finished runs are reused); ``--linear`` adds a linear probe
per run (10 epochs over the 60k training images: ~29 min, measured).
"""
import argparse
import functools
import json
import os
import os.path as osp
import statistics
import subprocess
import sys

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
HPM_CFG = 'configs/hpm/hpm_vit-mini-p4_1xb256-coslr-10e_fmnist.py'
MAE_CFG = 'configs/hpm/ablations/mae_vit-mini-p4_1xb256-coslr-10e_fmnist.py'
LINEAR_CFG = ('configs/benchmarks/classification/fmnist/'
              'vit-mini-p4_1xb256-linear-coslr-10e_fmnist.py')
LINEAR_CLS_CFG = ('configs/benchmarks/classification/fmnist/'
                  'vit-mini-p4_1xb256-linear-cls-coslr-10e_fmnist.py')


def mask(alpha_0, alpha_T, mode='argmax'):
    return [
        f'model.mask_generator.alpha_0={alpha_0}',
        f'model.mask_generator.alpha_T={alpha_T}',
        f'model.mask_generator.mode={mode}'
    ]


# name -> (config, cfg-options, what it is)
VARIANTS = {
    'mae': (MAE_CFG, [], 'plain mmpretrain MAE (Tab. 1 row 1)'),
    'random': (HPM_CFG, mask(0., 0.),
               'L_pred trained, random masks, alpha 0->0 (Tab. 1 row 2 / '
               'Tab. 3)'),
    'hpm': (HPM_CFG, mask(0., 0.5), 'HPM, alpha 0->0.5 (default)'),
    'all-hard': (HPM_CFG, mask(1., 1.), 'alpha 1->1 (Tab. 3)'),
    'argmin': (HPM_CFG, mask(0., 0.5, 'argmin'),
               'mask the predicted-easy patches (Tab. 4)'),
    'hard2easy': (HPM_CFG, mask(0.5, 0.), 'alpha 0.5->0 (Tab. 4)'),
    # fast settings (docs/speed.md): their effect on the representation
    'hpm-halfres': (HPM_CFG, ['model.teacher.input_scale=0.5'],
                    'HPM, teacher on the half-resolution image (4x4 patches)'),
    'hpm-fast': (HPM_CFG, ['model.teacher.input_scale=0.5',
                           'model.neck.predictor_depth=1'],
                 'HPM, half-resolution teacher + 1-block loss predictor'),
}


def run(cmd, log):
    print('$ ' + ' '.join(cmd), flush=True)
    with open(log, 'a') as f:
        proc = subprocess.run(cmd, cwd=ROOT, stdout=f, stderr=subprocess.STDOUT)
    if proc.returncode != 0:
        raise SystemExit(f'failed ({proc.returncode}); see {log}')


@functools.lru_cache
def max_epochs(config):
    """The config's ``train_cfg.max_epochs`` (parsed once per config: it is
    asked for every run's finished check)."""
    from mmengine.config import Config
    return Config.fromfile(osp.join(ROOT, config)).train_cfg.max_epochs


def final_checkpoint(work, config):
    """The final-epoch checkpoint of the run in ``work``, or None when it
    has not run or was interrupted (its ``last_checkpoint`` names an earlier
    epoch; mmengine writes it only after the checkpoint itself is saved)."""
    last = osp.join(work, 'last_checkpoint')
    if not osp.exists(last):
        return None
    with open(last) as f:
        ckpt = f.read().strip()
    final = f'epoch_{max_epochs(config)}.pth'
    return ckpt if osp.basename(ckpt) == final else None


def train_until_done(cmd, work, config, log):
    """Train, resuming an interrupted run; return its final checkpoint."""
    ckpt = final_checkpoint(work, config)
    if ckpt is None:
        resume = osp.exists(osp.join(work, 'last_checkpoint'))
        run(cmd + (['--resume'] if resume else []), log)
        ckpt = final_checkpoint(work, config)
        if ckpt is None:
            raise SystemExit(f'{work}: training ended before its final '
                             f'epoch; see {log}')
    return ckpt


def linear_probe(config, lin_work, ckpt, seed, log, commands):
    """Train and test one linear probe (or reuse it); its top-1."""
    py = sys.executable
    lin = [py, 'tools/train.py', config, '--work-dir', lin_work,
           '--cfg-options', f'model.backbone.init_cfg.checkpoint={ckpt}',
           f'randomness.seed={seed}']
    commands.append(' '.join(lin[1:]))
    done = osp.join(lin_work, 'metrics.json')
    final = f'epoch_{max_epochs(config)}.pth'
    test = [py, 'tools/test.py', config, osp.join(lin_work, final),
            '--work-dir', lin_work, '--out', done]
    commands.append(' '.join(test[1:]))
    if not osp.exists(done):
        train_until_done(lin, lin_work, config, log)
        run(test, log)
    with open(done) as f:
        return json.load(f)['accuracy/top1']


def one_run(name, seed, out, linear, cls=False):
    config, options, _ = VARIANTS[name]
    work = osp.join(out, f'{name}_seed{seed}')
    os.makedirs(work, exist_ok=True)
    log = osp.join(work, 'study.log')
    py = sys.executable
    train = [py, 'tools/train.py', config, '--work-dir', work,
             '--cfg-options', f'randomness.seed={seed}', *options]
    knn_json = osp.join(work, 'knn.json')
    cls_json = osp.join(work, 'knn_cls.json')
    commands = [' '.join(train[1:])]
    if final_checkpoint(work, config) is None:
        for stale in (knn_json, cls_json):  # they evaluated an unfinished run
            if osp.exists(stale):
                os.remove(stale)
    ckpt = train_until_done(train, work, config, log)
    result = {}
    for key, path, extra in (('knn', knn_json, []),
                             ('knn_cls', cls_json, ['--feature', 'cls'])):
        if key == 'knn_cls' and not (cls or osp.exists(path)):
            continue
        knn = [py, 'tools/analysis_tools/knn_eval.py', config, ckpt, *extra,
               '--out', path]
        commands.append(' '.join(knn[1:]))
        if not osp.exists(path):
            run(knn, log)
        with open(path) as f:
            result[key] = json.load(f)['best']
    for key, lin_cfg, sub in (('linear', LINEAR_CFG, 'linear'),
                              ('linear_cls', LINEAR_CLS_CFG, 'linear_cls')):
        lin_work = osp.join(work, sub)
        wanted = linear and (key == 'linear' or cls)
        if wanted or osp.exists(osp.join(lin_work, 'metrics.json')):
            result[key] = linear_probe(lin_cfg, lin_work, ckpt, seed, log,
                                       commands)
    result['commands'] = commands
    return result


def fmt(runs, key):
    """Mean ± sample std of ``key`` over the runs that have it; when only
    some of the row's seeds have it (the linear probe is optional), the
    seeds it covers are named so the column is not read as the row's."""
    have = {seed: r[key] for seed, r in runs.items() if r.get(key) is not None}
    if not have:
        return '-'
    values = list(have.values())
    text = (f'{values[0]:.2f}' if len(values) == 1 else
            f'{statistics.mean(values):.2f} ± {statistics.stdev(values):.2f}')
    if len(have) < len(runs):
        text += f" (seed{'s' if len(have) > 1 else ''} " \
            f"{', '.join(map(str, have))})"
    return text


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--variants', nargs='+', default=list(VARIANTS),
                        choices=list(VARIANTS))
    parser.add_argument('--seeds', type=int, nargs='+', default=[0, 1, 2])
    parser.add_argument('--linear', action='store_true')
    parser.add_argument('--cls', action='store_true',
                        help='also kNN (and with --linear, a linear probe) '
                        'on the CLS token')
    parser.add_argument('--out', default='work_dirs/fmnist_study')
    parser.add_argument(
        '--report-only', action='store_true',
        help='train nothing: tabulate the runs under --out that finished '
        '(a partial study, or one run across several sessions)')
    args = parser.parse_args(argv)
    results = {}
    for name in args.variants:
        for seed in args.seeds:
            work = osp.join(args.out, f'{name}_seed{seed}')
            if args.report_only and not (
                    osp.exists(osp.join(work, 'knn.json')) and
                    final_checkpoint(work, VARIANTS[name][0])):
                continue
            results.setdefault(name, {})[seed] = one_run(
                name, seed, args.out, args.linear and not args.report_only,
                args.cls and not args.report_only)
    rows = ['| variant | what | kNN top-1 (best k), patch avg | kNN, CLS '
            '| linear top-1, patch avg | linear, CLS | seeds |',
            '|---|---|---|---|---|---|---|']
    for name, runs in results.items():
        rows.append(
            f'| {name} | {VARIANTS[name][2]} | '
            f"{fmt(runs, 'knn')} | {fmt(runs, 'knn_cls')} | "
            f"{fmt(runs, 'linear')} | {fmt(runs, 'linear_cls')} | "
            f"{', '.join(map(str, runs))} |")
    table = '\n'.join(rows)
    print(table)
    with open(osp.join(args.out, 'study.md'), 'w') as f:
        f.write(f'Command: python tools/analysis_tools/fmnist_study.py '
                f"{' '.join(argv or sys.argv[1:])}\n\n{table}\n")
    with open(osp.join(args.out, 'study.json'), 'w') as f:
        json.dump(results, f, indent=2)


if __name__ == '__main__':
    main()
