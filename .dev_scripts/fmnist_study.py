"""The Fashion-MNIST study: MAE, HPM and their variants at a chosen length,
paired by seed, every run's results kept as a small json (issue #28).

    python .dev_scripts/fmnist_study.py run VARIANT --seed S --epochs E \
        [--images N] [--low-label 1 10] [--minutes M]
    python .dev_scripts/fmnist_study.py scratch --seed S [--low-label 1 10]
    python .dev_scripts/fmnist_study.py check-linear RESULT_JSON
    python .dev_scripts/fmnist_study.py status
    python .dev_scripts/fmnist_study.py next --minutes M
    python .dev_scripts/fmnist_study.py report [--write FILE]

A variant is a config file (``VARIANTS``: the main job's HPM config, its MAE
twin and the ablation configs beside it); only the run's length and seed
change. ``run`` scales the recipe to the length with the package's one rule
(:func:`hpm_mm.engine.schedule.scale_recipe`: 5% warm-up, cosine to the end,
the EMA teacher's lag 2.5% -> 10% of the run), dumps the run's config into
its work dir, trains it through ``tools/train.py`` in fp32 on every machine
(the study's runs must share one precision, and bf16 is fast only on CPUs
with native bf16: the study spans machines of both kinds; a run trained in
another precision is refused), resuming an interrupted run, then evaluates the
final encoder from one feature pass over the 60k training / 10k test
images: kNN (DINO protocol) and a linear probe on cached frozen features
(:func:`hpm_mm.evaluation.linear_probe`), each on the patch-token average
and on the CLS token; ``--low-label`` fine-tunes end to end on the first 1%
/ 10% of the training labels (the fine-tune config, ``tools/train.py`` +
``tools/test.py``). Its json (``docs/results/fmnist_study/``) holds the
config and its hash, seed, steps, precision, CPU class, wall times, every
metric, the predictor's ranking accuracy and the teacher's Spearman at the
end, and the exact commands. ``scratch`` fine-tunes from random init (the
baseline of the fine-tunes); ``check-linear`` runs the config-driven linear
probe on one run's encoder beside the cached one (the two are one protocol:
no augmentation, the same head and recipe; its json records the config's
training pipeline).
``status`` lists what the committed jsons hold and the commands of the rest
(after this machine's CPU class and fp32 matmul speed, also in every json);
``next --minutes M`` runs the rest in that order, each while its estimate
(the committed wall time of its variant) fits in what is left of M. A run
given ``--minutes`` (``next`` gives each the minutes left) measures its
pace once two epochs past its first checkpoint are written and stops,
removing its work dir, where training, evaluation and fine-tunes cannot
finish in time (exit 3; ``next`` passes over it): every run with its
evaluations finishes inside one session, and machines of one CPU class
differ ~2x in speed.
``report`` regenerates every table from the committed jsons alone.
"""
import argparse
import glob
import hashlib
import json
import math
import os
import os.path as osp
import shutil
import signal
import statistics
import subprocess
import sys
import time

ROOT = osp.dirname(osp.dirname(osp.abspath(__file__)))
RESULTS = osp.join(ROOT, 'docs', 'results', 'fmnist_study')
WORK = osp.join(ROOT, 'work_dirs', 'fmnist_study')
CFG = 'configs/hpm/{}_vit-mini-p4_1xb256-coslr-10e_fmnist.py'
VARIANTS = {
    'mae': ('configs/hpm/ablations/mae_vit-mini-p4_1xb256-coslr-10e_fmnist.py',
            'plain mmpretrain MAE (Tab. 1 row 1)'),
    'hpm': (CFG.format('hpm'), 'HPM, alpha 0 -> 0.5 (the paper\'s default)'),
    'random': (CFG.format('ablations/hpm-mask75-a0-0'),
               'L_pred trained, random masks (alpha 0 -> 0; Tab. 1 row 2)'),
    'all-hard': (CFG.format('ablations/hpm-mask75-a1-1'),
                 'only the predicted-hardest patches (alpha 1 -> 1; Tab. 3)'),
}
FINETUNE_CFG = ('configs/benchmarks/classification/fmnist/'
                'vit-mini-p4_1xb128-coslr-10e_fmnist.py')
LINEAR_CFGS = {
    'avg': ('configs/benchmarks/classification/fmnist/'
            'vit-mini-p4_1xb256-linear-coslr-10e_fmnist.py'),
    'cls': ('configs/benchmarks/classification/fmnist/'
            'vit-mini-p4_1xb256-linear-cls-coslr-10e_fmnist.py'),
}
# low-label fine-tuning: % of the labels -> epochs (~500 / ~1,400 steps)
LOW_LABEL_EPOCHS = {1: 100, 10: 30}
# the study at the length the rule chose (configs/hpm/README.md): each
# variant with these seeds, paired by seed, every run and scratch with both
# fine-tunes; all-hard with one seed where time allows
STUDY = dict(
    epochs=100,
    images=10000,
    seeds=(0, 1, 2),
    variants=('mae', 'hpm', 'random'),
    optional=(('all-hard', 0), ))
KNN_KS = (10, 20, 100, 200)
FEATURES = ('avg', 'cls')
# two-sided 95% t quantiles by degrees of freedom
T95 = {
    1: 12.706,
    2: 4.303,
    3: 3.182,
    4: 2.776,
    5: 2.571,
    6: 2.447,
    7: 2.365,
    8: 2.306,
    9: 2.262
}

# the exit status of a run stopped by its pace guard (``run --minutes``)
TOO_SLOW = 3
POLL_SECONDS = 20


def sh(cmd, log, check=None):
    """Run ``cmd`` from the repository root, appending to ``log``; while it
    runs, ``check()`` (when given) is polled and a message it returns stops
    the command and is raised."""
    with open(log, 'a') as f:
        f.write('$ ' + ' '.join(cmd) + '\n')
        f.flush()
        proc = subprocess.Popen(
            cmd, cwd=ROOT, stdout=f, stderr=subprocess.STDOUT)
        while check is not None:
            try:
                proc.wait(POLL_SECONDS)
                break
            except subprocess.TimeoutExpired:
                stop = check()
                if stop:
                    proc.terminate()
                    proc.wait()
                    raise TooSlow(stop)
        proc.wait()
    if proc.returncode:
        raise SystemExit(f'failed ({proc.returncode}): {" ".join(cmd)}; '
                         f'see {log}')


class TooSlow(Exception):
    """A run whose pace says it cannot finish in the time it was given."""


def epochs_done(work):
    """The epoch of the run's last checkpoint (0 before the first)."""
    last = osp.join(work, 'last_checkpoint')
    if not osp.exists(last):
        return 0
    name = osp.basename(open(last).read().strip())
    return int(name[len('epoch_'):-len('.pth')])


def pace_guard(name, work, epochs, until):
    """A ``check`` for :func:`sh` while ``name`` trains: None while the run
    can finish (training, evaluation and fine-tunes) by the time ``until``;
    once two epochs past this attempt's first checkpoint are written, a
    message where its pace says it cannot. The pace is the seconds per epoch
    between this attempt's checkpoints (their file times: no start-up, no
    polling lag); evaluation and fine-tunes are the reference run's
    (:func:`reference`), scaled by this pace over its pace."""
    variant = name.split('_')[0]
    ref = reference(variant)
    first, seen = epochs_done(work), []

    def written(epoch):
        return osp.getmtime(osp.join(work, f'epoch_{epoch}.pth'))

    def check():
        try:
            done = epochs_done(work)
            if done > first and not seen:
                seen.append((done, written(done)))
            if not seen or done - seen[0][0] < 2:
                return None
            pace = (written(done) - seen[0][1]) / (done - seen[0][0])
        except (OSError, ValueError):  # a checkpoint being written
            return None
        train = pace * (epochs - done)
        rest, basis = 0., 'training only: no committed run to scale from'
        if ref and ref.get('train_seconds'):
            same = ref['variant'] == variant
            ratio = pace * ref['epochs'] / ref['train_seconds'] if same else 1
            rest = ratio * ((ref.get('eval_seconds') or 0) +
                            (ref.get('finetune_seconds') or 0))
            how = (f'scaled by this pace over its ({ratio:.2f}x)' if same else
                   "as they were (another variant's pace says nothing of "
                   'this machine)')
            basis = (f'evaluation and fine-tunes {rest / 60:.0f} min: '
                     f"{ref['name']}'s {how}")
        left = until - time.time()
        if train + rest <= left:
            return None
        return (f'{name} cannot finish in time on this machine: at '
                f'{pace:.0f} s per epoch (epochs {seen[0][0] + 1}-{done}) it '
                f'needs {(train + rest) / 60:.0f} more min (training '
                f'{train / 60:.0f} min; {basis}), {left / 60:.0f} are left. '
                'Stopped after epoch '
                f'{done}; its work dir is removed, so that no later session '
                'resumes it (a run and its evaluations finish in one '
                'session). Fix: rerun it on a faster machine or with more '
                'minutes.')

    return check


def rel(path):
    return osp.relpath(path, ROOT)


def run_name(variant, epochs, images, seed):
    return f'{variant}_{epochs}e_{images // 1000}k_seed{seed}'


def run_command(variant, seed, epochs, images, percents):
    """The study command of one run (its json's first command)."""
    return (
        f'python .dev_scripts/fmnist_study.py run {variant} --seed '
        f'{seed} --epochs {epochs} --images {images}' +
        (' --low-label ' + ' '.join(map(str, percents)) if percents else ''))


def scratch_command(seed, percents):
    return (f'python .dev_scripts/fmnist_study.py scratch --seed {seed} '
            '--low-label ' + ' '.join(map(str, percents)))


def final_checkpoint(work, epochs):
    """The run's final checkpoint, or None when it has not finished."""
    path = osp.join(work, f'epoch_{epochs}.pth')
    return path if epochs_done(work) == epochs and osp.exists(path) else None


def train_clock(work, checkpoints):
    """Start this training attempt's clock (``train_clock.json`` in the
    work dir): its start, and the training seconds of the attempts before
    it up to the newest of ``checkpoints`` (the one it resumes from; an
    attempt's time after its last checkpoint is lost work, not
    training)."""
    path = osp.join(work, 'train_clock.json')
    before = 0.
    if checkpoints and osp.exists(path):
        last = json.load(open(path))
        resumed = max(osp.getmtime(c) for c in checkpoints)
        before = last['before'] + max(0., resumed - last['start'])
    clock = dict(before=before, start=time.time())
    with open(path, 'w') as f:
        json.dump(clock, f)
    return clock


def pretrain(variant, seed, epochs, images, work, log, check=None):
    """Scale the variant's config to the run, train it (resuming an
    interrupted run; ``check`` polled as in :func:`sh`); (config path, its
    sha256, commands, train seconds: over every attempt, by
    :func:`train_clock`; None when it had finished before)."""
    from mmengine.config import Config

    import hpm_mm  # noqa: F401
    from hpm_mm.engine.schedule import scale_recipe, steps_per_epoch
    cfg = Config.fromfile(osp.join(ROOT, VARIANTS[variant][0]))
    loader = cfg.train_dataloader
    loader.dataset.indices = images if images < 60000 else None
    steps = steps_per_epoch(images, loader.batch_size,
                            loader.get('drop_last', False))
    scale_recipe(cfg, epochs, steps)
    cfg.randomness.seed = seed
    # the study evaluates in one feature pass after training (both
    # features, kNN and linear); the pictures' hook stays (the Spearman)
    cfg.custom_hooks = [
        h for h in cfg.custom_hooks if h.get('type') != 'KNNEvalHook'
    ]
    os.makedirs(work, exist_ok=True)
    path = osp.join(work, 'config.py')
    text = cfg.pretty_text
    if not osp.exists(path) or open(path).read() != text:
        with open(path, 'w') as f:
            f.write(text)
    train = [
        sys.executable, 'tools/train.py',
        rel(path), '--work-dir',
        rel(work), '--quiet'
    ]
    seconds = None
    if final_checkpoint(work, epochs) is None:
        checkpoints = glob.glob(osp.join(work, 'epoch_*.pth'))
        resume = ['--resume'] if checkpoints else []
        clock = train_clock(work, checkpoints)
        sh(train + resume, log, check)
        seconds = clock['before'] + time.time() - clock['start']
        if final_checkpoint(work, epochs) is None:
            raise SystemExit(f'{work}: training ended before epoch {epochs}')
    sha = hashlib.sha256(text.encode()).hexdigest()
    return path, sha, [' '.join(train[1:])], seconds, epochs * steps


def evaluate(config, ckpt, seed):
    """kNN and linear probes on both features from one pass over the
    Fashion-MNIST training (memory bank / probe training) and test
    images."""
    import torch
    from mmengine.config import Config
    from mmengine.registry import init_default_scope
    from mmengine.runner import Runner

    from hpm_mm.apis import load_model
    from hpm_mm.engine.checkpoint import load_checkpoint_strict
    from hpm_mm.evaluation import extract_features, knn_classify, linear_probe
    cfg = Config.fromfile(config)
    init_default_scope('mmpretrain')
    model = load_model(cfg)
    load_checkpoint_strict(model, ckpt)
    base = Config.fromfile(osp.join(ROOT, VARIANTS['mae'][0]))
    knn_hook = [h for h in base.custom_hooks if h['type'] == 'KNNEvalHook'][0]
    feats = {}
    with torch.no_grad():
        for split in ('train', 'val'):
            loader = Runner.build_dataloader(
                knn_hook[f'{split}_dataloader'], seed=0)
            feats[split] = extract_features(
                model, loader, False, FEATURES, amp=False)
    out = {}

    # the patch average through a LayerNorm without affine, as the linear
    # configs' classifier reads it (mmpretrain's avg_featmap: ln2 at its
    # initial weight 1, bias 0, frozen; MAE's fc_norm in its linear probe):
    # the cached probe on it isolates that difference from augmentation
    def layer_norm(x):
        return torch.nn.functional.layer_norm(x, x.shape[-1:], eps=1e-6)

    out['linear_avg_ln'] = linear_probe(
        layer_norm(feats['train']['feats']['avg']),
        feats['train']['labels'],
        layer_norm(feats['val']['feats']['avg']),
        feats['val']['labels'],
        seed=seed)['top1']
    for f in FEATURES:
        tr, te = feats['train']['feats'][f], feats['val']['feats'][f]
        acc = knn_classify(tr, feats['train']['labels'], te,
                           feats['val']['labels'], KNN_KS)
        out[f'knn_{f}'] = max(acc.values())
        out[f'knn_{f}_by_k'] = {str(k): v for k, v in acc.items()}
        out[f'linear_{f}'] = linear_probe(
            tr,
            feats['train']['labels'],
            te,
            feats['val']['labels'],
            seed=seed)['top1']
    return out


def low_label_options(percent):
    epochs = LOW_LABEL_EPOCHS[percent]
    return [
        f'train_dataloader.dataset.indices={600 * percent}',
        f'train_cfg.max_epochs={epochs}', f'train_cfg.val_interval={epochs}',
        f'param_scheduler.1.T_max={epochs - 1}',
        f'param_scheduler.1.end={epochs}',
        f'default_hooks.checkpoint.interval={epochs}'
    ]


def classify(config, work, ckpt, seed, options, epochs, log):
    """Train a classifier config from ``ckpt`` (None: random init) and test
    it; (top-1, commands)."""
    init = (f'model.backbone.init_cfg.checkpoint={rel(ckpt)}'
            if ckpt else 'model.backbone.init_cfg=None')
    train = [
        sys.executable, 'tools/train.py', config, '--work-dir',
        rel(work), '--quiet', '--cfg-options', init, f'randomness.seed={seed}',
        *options
    ]
    out = osp.join(work, 'metrics.json')
    test = [
        sys.executable, 'tools/test.py', config,
        rel(osp.join(work, f'epoch_{epochs}.pth')), '--work-dir',
        rel(work), '--out',
        rel(out)
    ]
    if not osp.exists(out):
        resume = ['--resume'] if glob.glob(osp.join(work, 'epoch_*.pth')) \
            else []
        sh(train + resume, log)
        sh(test, log)
    return json.load(
        open(out))['accuracy/top1'], [' '.join(train[1:]), ' '.join(test[1:])]


def low_label(work, ckpt, seed, percents, log):
    metrics, commands = {}, []
    for p in percents:
        top1, cmds = classify(FINETUNE_CFG,
                              osp.join(work, f'lowlabel{p}'), ckpt, seed,
                              low_label_options(p), LOW_LABEL_EPOCHS[p], log)
        metrics[f'finetune_{p}pct'] = top1
        commands += cmds
    return metrics, commands


def last_scalars(work):
    """The last logged value of each scalar of the run's logs."""
    out = {}
    for path in sorted(
            glob.glob(osp.join(work, '*', 'vis_data', 'scalars.json'))):
        for line in open(path):
            out.update(json.loads(line))
    return out


def gemm_gflops(n=2048, repeats=3):
    """fp32 GFLOP/s of an ``n``-square matmul on torch's threads, best of
    ``repeats`` after a warm-up: machines of one CPU class differ ~2x (2
    AVX2 cores: 155 on the machine of docs/speed.md, 71 on another)."""
    import torch

    from hpm_mm.engine.precision import time_matmul
    seconds = time_matmul(torch.randn(n, n), torch.randn(n, n), repeats)
    return round(2 * n**3 / seconds / 1e9, 1)


def machine():
    import torch

    from hpm_mm.engine.precision import cpu_class
    return dict(
        cpu_class=cpu_class(),
        threads=torch.get_num_threads(),
        fp32_gemm_gflops=gemm_gflops(),
        torch=torch.__version__)


def git_commit():
    try:
        return subprocess.run(['git', 'rev-parse', '--short', 'HEAD'],
                              cwd=ROOT,
                              capture_output=True,
                              text=True).stdout.strip()
    except OSError:
        return None


def save(name, record):
    os.makedirs(RESULTS, exist_ok=True)
    path = osp.join(RESULTS, f'{name}.json')
    with open(path, 'w') as f:
        json.dump(record, f, indent=1)
    print(f'wrote {rel(path)}')
    return path


def cmd_run(args):
    name = run_name(args.variant, args.epochs, args.images, args.seed)
    work = osp.join(WORK, name)
    log = osp.join(work, 'study.log')
    os.makedirs(work, exist_ok=True)
    check = pace_guard(name, work, args.epochs,
                       time.time() +
                       60 * args.minutes) if args.minutes else None
    try:
        config, sha, commands, train_s, steps = pretrain(
            args.variant, args.seed, args.epochs, args.images, work, log,
            check)
    except TooSlow as stop:
        shutil.rmtree(work)
        print(stop, file=sys.stderr, flush=True)
        raise SystemExit(TOO_SLOW)
    ckpt = final_checkpoint(work, args.epochs)
    ran = json.load(open(osp.join(work, 'precision.json')))['precision']
    if ran != 'fp32':
        raise SystemExit(f'{work} was trained in {ran}; the study compares '
                         f'fp32 runs only. Fix: rm -r {work} and rerun.')
    start = time.time()
    metrics = evaluate(config, ckpt, args.seed)
    eval_s = time.time() - start
    commands.append(f'evaluate({rel(config)}, {rel(ckpt)}): one feature '
                    f'pass, kNN k={list(KNN_KS)} T=0.07 and cached linear '
                    'probes on avg/cls (.dev_scripts/fmnist_study.py)')
    start = time.time()
    ll, cmds = low_label(work, ckpt, args.seed, args.low_label, log)
    metrics.update(ll)
    commands += cmds
    scalars = last_scalars(work)
    previous = osp.join(RESULTS, f'{name}.json')
    if train_s is None and osp.exists(previous):  # trained earlier
        train_s = json.load(open(previous)).get('train_seconds')
    record = dict(
        name=name,
        variant=args.variant,
        what=VARIANTS[args.variant][1],
        config=VARIANTS[args.variant][0],
        run_config=rel(config),
        run_config_sha256=sha,
        seed=args.seed,
        epochs=args.epochs,
        images_per_epoch=args.images,
        steps=steps,
        precision=ran,
        machine=machine(),
        train_seconds=train_s,
        eval_seconds=eval_s,
        finetune_seconds=time.time() - start,
        metrics=metrics,
        pretrain_end={
            k: scalars[s]
            for k, s in (('rank_acc', 'rank_acc'), ('spearman',
                                                    'hpm/spearman'),
                         ('loss_rec', 'loss_rec')) if s in scalars
        },
        commands=[
            run_command(args.variant, args.seed, args.epochs, args.images,
                        args.low_label)
        ] + commands,
        commit=git_commit(),
        date=time.strftime('%Y-%m-%d %H:%M'))
    save(name, record)


def cmd_scratch(args):
    name = f'scratch_seed{args.seed}'
    work = osp.join(WORK, name)
    os.makedirs(work, exist_ok=True)
    start = time.time()
    metrics, commands = low_label(work, None, args.seed, args.low_label,
                                  osp.join(work, 'study.log'))
    commands = [scratch_command(args.seed, args.low_label)] + commands
    seconds = time.time() - start
    previous = osp.join(RESULTS, f'{name}.json')
    if osp.exists(previous):  # keep the fine-tunes, commands, time of before
        earlier = json.load(open(previous))
        metrics = dict(earlier['metrics'], **metrics)
        commands = earlier['commands'] + commands
        seconds += earlier.get('finetune_seconds', 0)
    save(
        name,
        dict(
            name=name,
            variant='scratch',
            seed=args.seed,
            what='random init, fine-tuned only',
            metrics=metrics,
            machine=machine(),
            finetune_seconds=seconds,
            commands=commands,
            commit=git_commit(),
            date=time.strftime('%Y-%m-%d %H:%M')))


def cmd_check_linear(args):
    """The config-driven linear probes (the frozen encoder re-run over the
    training images every epoch) on one run's encoder, beside the cached
    probes of its json; each probe records its config's training pipeline
    (the checks of mae_10e / mae_100e, before the probe configs dropped
    their augmentation, ran RandomCrop + RandomFlip)."""
    from mmengine.config import Config
    record = json.load(open(args.result))
    work = osp.join(WORK, record['name'])
    ckpt = final_checkpoint(work, record['epochs'])
    log = osp.join(work, 'study.log')
    out, commands = {}, []
    start = time.time()
    for f in args.features:
        config = LINEAR_CFGS[f]
        top1, cmds = classify(config, osp.join(work, f'linear_{f}'), ckpt,
                              record['seed'], [], 10, log)
        pipeline = Config.fromfile(osp.join(
            ROOT, config)).train_dataloader.dataset.pipeline
        out[f] = dict(
            config_driven=top1,
            cached=record['metrics'][f'linear_{f}'],
            train_pipeline=[t['type'] for t in pipeline])
        if f == 'avg' and 'linear_avg_ln' in record['metrics']:
            # the config's classifier reads LN(avg) (mmpretrain's ln2)
            out[f]['cached_ln'] = record['metrics']['linear_avg_ln']
        commands += cmds
    save(
        f'linear_check_{record["name"]}',
        dict(
            run=record['name'],
            probes=out,
            machine=machine(),
            seconds=time.time() - start,
            commands=[
                f'python .dev_scripts/fmnist_study.py check-linear '
                f'{rel(args.result)} --features {" ".join(args.features)}'
            ] + commands,
            commit=git_commit(),
            date=time.strftime('%Y-%m-%d %H:%M')))


def plan():
    """[(name, command, missing)] of the study's runs, in the order to run
    them: seed by seed (each seed's variants and scratch), then the optional
    runs; ``missing`` lists what the committed jsons lack ([] when done)."""
    low = sorted(LOW_LABEL_EPOCHS)
    wanted = [f'finetune_{p}pct' for p in low]
    rows = []

    def lacking(name, keys):
        path = osp.join(RESULTS, f'{name}.json')
        if not osp.exists(path):
            return ['all']
        return [k for k in keys if k not in json.load(open(path))['metrics']]

    def run_row(variant, seed):
        name = run_name(variant, STUDY['epochs'], STUDY['images'], seed)
        keys = ['knn_avg', 'knn_cls', 'linear_avg', 'linear_cls'] + wanted
        # a run lacking anything is rerun whole (it resumes what it has)
        cmd = run_command(variant, seed, STUDY['epochs'], STUDY['images'], low)
        return name, cmd, ['all'] if lacking(name, keys) else []

    for seed in STUDY['seeds']:
        rows += [run_row(v, seed) for v in STUDY['variants']]
        name = f'scratch_seed{seed}'
        missing = lacking(name, wanted)
        percents = low if missing == ['all'] else [
            p for p in low if f'finetune_{p}pct' in missing
        ]
        rows.append((name, scratch_command(seed, percents), missing))
    rows += [
        run_row(v, seed) + ('optional', ) for v, seed in STUDY['optional']
    ]
    return rows


def cmd_status(args):
    """What the committed jsons hold of the study, and the commands of
    what remains, in order (a session runs the first ones), after this
    machine's CPU class and fp32 matmul speed."""
    print('this machine: ' + ', '.join(f'{k} {v}'
                                       for k, v in machine().items()) + '\n')
    rows = plan()
    for name, cmd, missing, *optional in rows:
        state = 'done' if not missing else (
            'missing ' +
            ', '.join(missing) if missing != ['all'] else 'to run')
        print(f'{name:24s} {state}{" (optional)" if optional else ""}')
    todo = [cmd for _, cmd, missing, *_ in rows if missing]
    print(f'\n{len(rows) - len(todo)} of {len(rows)} done; remaining, in '
          'order:' if todo else f'\nall {len(rows)} done')
    for cmd in todo:
        print(f'  {cmd}')


# ---------------------------------------------------------------- report
METRICS = (
    ('knn_avg', 'kNN avg'),
    ('knn_cls', 'kNN CLS'),
    ('linear_avg', 'linear avg'),
    ('linear_cls', 'linear CLS'),
    ('linear_avg_ln', 'linear LN(avg)'),
    ('finetune_1pct', 'fine-tune 1%'),
    ('finetune_10pct', 'fine-tune 10%'),
)


def total_seconds(record):
    return sum(
        record.get(k) or 0
        for k in ('train_seconds', 'eval_seconds', 'finetune_seconds'))


def reference(variant):
    """The longest committed run (docs/results/fmnist_study/) of
    ``variant`` at the study's length, training + evaluation + fine-tunes
    (of any variant for one not run yet); None before the first."""
    runs, _ = load_records()
    at = [
        r for r in runs
        if (r['epochs'], r['images_per_epoch']) == (STUDY['epochs'],
                                                    STUDY['images'])
    ]
    return max(
        [r for r in at if r['variant'] == variant] or at,
        key=total_seconds,
        default=None)


def estimate(name):
    """Seconds the study run ``name`` should take: its :func:`reference`
    run's; scratch: the longest recorded scratch fine-tunes."""
    variant = name.split('_')[0]
    if variant == 'scratch':
        return max((s.get('finetune_seconds') or 0
                    for s in load_records()[1].values()),
                   default=0)
    ref = reference(variant)
    return total_seconds(ref) if ref else 0


def cmd_next(args):
    """Runs what remains of the study, in order, while each run's estimate
    (+15%) fits in the minutes left; a run that does not fit is passed over
    for a later, shorter one (a scratch run). A pretraining run gets the
    minutes left (``run --minutes``): one whose measured pace says it cannot
    finish in them stops after a few epochs and is passed over too."""
    deadline, ran, slow = time.time() + args.minutes * 60, set(), set()
    while True:
        rows = plan()
        todo = [(name, cmd) for name, cmd, missing, *_ in rows if missing]
        if not todo:
            print(f'all {len(rows)} runs of the study are done')
            return
        left = deadline - time.time()
        sized = [(name, cmd, 1.15 * estimate(name)) for name, cmd in todo]
        fits = [row for row in sized if row[2] <= left and row[0] not in slow]
        if not fits:
            print(f'nothing left fits in {left / 60:.0f} min; next: ' +
                  ', '.join(
                      f'{n} (~{e / 60:.0f} min' +
                      (', too slow on this machine)' if n in slow else ')')
                      for n, _, e in sized[:3]))
            return
        name, cmd, seconds = fits[0]
        if name in ran:
            raise SystemExit(f'{name} ran but its json still lacks results; '
                             f'see work_dirs/fmnist_study/{name}/study.log')
        ran.add(name)
        print(
            f'{time.strftime("%H:%M")} {name} (~{seconds / 60:.0f} of '
            f'{left / 60:.0f} min left): {cmd}',
            flush=True)
        argv = cmd.split()[1:]
        if argv[1] == 'run':
            argv += ['--minutes', f'{left / 60:.1f}']
        rc = subprocess.call([sys.executable] + argv, cwd=ROOT)
        if rc == TOO_SLOW:
            slow.add(name)
            continue
        if rc:
            raise SystemExit(f'{name} failed (exit {rc}); its log: '
                             f'work_dirs/fmnist_study/{name}/study.log')


def ci(values):
    """Mean and half-width of the 95% t interval (None for one value)."""
    m = statistics.mean(values)
    if len(values) < 2:
        return m, None
    return m, T95[len(values) - 1] * statistics.stdev(values) / math.sqrt(
        len(values))


def mean_ci(values):
    """'mean ± half-width of the 95% t interval' ('mean' for one value)."""
    if not values:
        return '-'
    m, half = ci(values)
    return f'{m:.2f}' if half is None else f'{m:.2f} ± {half:.2f}'


def reading(contrast, diffs):
    """The paired difference read by the rule written before seeds 1 and 2
    (configs/hpm/README.md): a protocol is above (below) 0 where its whole
    95% interval is; elsewhere the interval bounds any effect. ``diffs``
    maps a protocol's title to its per-seed differences; protocols with
    fewer than two pairs are not read."""
    above, below, bounds = [], [], []
    for title, d in diffs.items():
        if len(d) < 2:
            continue
        m, half = ci(d)
        lo, hi = m - half, m + half
        where = above if lo > 0 else below if hi < 0 else bounds
        where.append(f'{title} [{lo:+.2f}, {hi:+.2f}]')
    if not above + below + bounds:
        return None
    return (f'- {contrast}: 95% interval above 0 on '
            f'{", ".join(above) or "none"}; below 0 on '
            f'{", ".join(below) or "none"}; containing 0 on '
            f'{", ".join(bounds) or "none"}.')


def load_records():
    runs, scratch = [], {}
    for path in sorted(glob.glob(osp.join(RESULTS, '*.json'))):
        record = json.load(open(path))
        if record.get('variant') == 'scratch':
            scratch[record['seed']] = record
        elif 'variant' in record:
            runs.append(record)
    return runs, scratch


def fmt_value(value):
    """'-' for a run that has no such value (MAE has no predictor)."""
    return '-' if value is None else f'{value:.3f}'


def fmt_minutes(seconds):
    return '-' if seconds is None else f'{seconds / 60:.0f}'


def report(runs, scratch):
    lines = []
    lengths = sorted({(r['epochs'], r['images_per_epoch']) for r in runs})
    cpu = sorted({r['machine']['cpu_class'] for r in runs})
    lines.append('Per run (seed; CPU class '
                 f'{", ".join(cpu) or "-"}, 2 cores; minutes of training / '
                 'evaluation / fine-tuning):\n')
    head = '| run | steps | ' + ' | '.join(t for _, t in METRICS) + \
        ' | rank_acc | Spearman | minutes |'
    lines += [head, '|' + '---|' * (head.count('|') - 1)]
    for r in sorted(
            runs, key=lambda r: (r['epochs'], r['variant'], r['seed'])):
        m, p = r['metrics'], r.get('pretrain_end', {})
        cells = [f'{m[k]:.2f}' if k in m else '-' for k, _ in METRICS]
        lines.append(f"| {r['name']} | {r['steps']} | " + ' | '.join(cells) +
                     f" | {fmt_value(p.get('rank_acc'))} | "
                     f"{fmt_value(p.get('spearman'))} | "
                     f"{fmt_minutes(r.get('train_seconds'))} / "
                     f"{fmt_minutes(r.get('eval_seconds'))} / "
                     f"{fmt_minutes(r.get('finetune_seconds'))} |")
    for seed, s in sorted(scratch.items()):
        cells = [
            f"{s['metrics'][k]:.2f}" if k in s['metrics'] else '-'
            for k, _ in METRICS
        ]
        lines.append(f'| scratch_seed{seed} | 0 | ' + ' | '.join(cells) +
                     ' | - | - | - |')
    for epochs, images in lengths:
        at = [
            r for r in runs
            if (r['epochs'], r['images_per_epoch']) == (epochs, images)
        ]
        by = {}
        for r in at:
            by.setdefault(r['variant'], {})[r['seed']] = r['metrics']
        lines.append(f'\n{epochs} epochs of {images} images: mean ± 95% '
                     'interval over seeds (t distribution):\n')
        head = '| variant | seeds | ' + ' | '.join(t for _, t in METRICS) + \
            ' |'
        lines += [head, '|' + '---|' * (head.count('|') - 1)]
        for variant, seeds in by.items():
            lines.append(f'| {variant} | {len(seeds)} | ' + ' | '.join(
                mean_ci([m[k] for m in seeds.values() if k in m])
                for k, _ in METRICS) + ' |')
        if scratch:
            # scratch has only the fine-tunes: '-' in every other column
            lines.append(f'| scratch | {len(scratch)} | ' + ' | '.join(
                mean_ci([
                    s['metrics'][k]
                    for s in scratch.values() if k in s['metrics']
                ]) if k.startswith('finetune') else '-'
                for k, _ in METRICS) + ' |')
        # each variant against MAE; HPM against random + L_pred, which has
        # the same predictor and loss and differs only in the hard masks
        contrasts = [(v, 'mae') for v in by if v != 'mae' and 'mae' in by]
        if 'hpm' in by and 'random' in by:
            contrasts.append(('hpm', 'random'))
        if contrasts:
            lines.append(f'\nPaired by seed at {epochs} epochs: mean ± 95% '
                         'interval of the per-seed differences (each '
                         'difference in brackets):\n')
            lines += [
                head.replace('| variant | seeds |', '| difference | pairs |'),
                '|' + '---|' * (head.count('|') - 1)
            ]
            read = []
            for a, b in contrasts:
                cells, diffs = [], {}
                for k, title in METRICS:
                    d = diffs[title] = [
                        by[a][s][k] - by[b][s][k] for s in by[a]
                        if s in by[b] and k in by[a][s] and k in by[b][s]
                    ]
                    cells.append(
                        mean_ci(d) +
                        (' (' + ', '.join(f'{x:+.2f}'
                                          for x in d) + ')' if d else ''))
                n = max(len(d) for d in diffs.values())
                lines.append(f'| {a} - {b} | {n} | ' + ' | '.join(cells) +
                             ' |')
                read.append(reading(f'{a} - {b}', diffs))
            if any(read):
                lines.append('\nRead by the rule written before seeds 1 '
                             'and 2 (points, 95% t interval of the paired '
                             'differences):\n')
                lines += [r for r in read if r]
    return '\n'.join(lines)


def cmd_report(args):
    runs, scratch = load_records()
    text = report(runs, scratch)
    print(text)
    if args.write:
        begin, end = ('<!-- fmnist_study report: begin -->',
                      '<!-- fmnist_study report: end -->')
        doc = open(args.write).read()
        if begin not in doc or end not in doc:
            raise SystemExit(f'{args.write} has no {begin} ... {end} section')
        head, rest = doc.split(begin, 1)
        tail = rest.split(end, 1)[1]
        with open(args.write, 'w') as f:
            f.write(f'{head}{begin}\n{text}\n{end}{tail}')
        print(f'wrote the tables into {args.write}')


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest='cmd', required=True)
    r = sub.add_parser('run', help='pretrain + evaluate one run')
    r.add_argument('variant', choices=list(VARIANTS))
    r.add_argument('--seed', type=int, required=True)
    r.add_argument('--epochs', type=int, required=True)
    r.add_argument(
        '--images',
        type=int,
        default=10000,
        help='images per epoch (the first N; 60000: all)')
    r.add_argument(
        '--low-label',
        type=int,
        nargs='*',
        default=[],
        choices=sorted(LOW_LABEL_EPOCHS))
    r.add_argument(
        '--minutes',
        type=float,
        help='time the run has: once its pace is measured (two epochs), '
        'it stops, and its work dir is removed, where training + '
        'evaluation + fine-tunes cannot finish in it (exit 3)')
    s = sub.add_parser('scratch', help='fine-tune from random init')
    s.add_argument('--seed', type=int, required=True)
    s.add_argument(
        '--low-label',
        type=int,
        nargs='+',
        default=[1, 10],
        choices=sorted(LOW_LABEL_EPOCHS))
    c = sub.add_parser(
        'check-linear',
        help='config-driven linear probes '
        'beside the cached ones, on one run')
    c.add_argument('result', help="a run's json")
    c.add_argument(
        '--features',
        nargs='+',
        default=['avg'],
        choices=list(LINEAR_CFGS),
        help='each probe re-runs the encoder over the 60k images '
        'for 10 epochs (~20 min on 2 cores)')
    sub.add_parser(
        'status',
        help="the study's runs done (committed jsons) and the commands of "
        'those that remain')
    n = sub.add_parser(
        'next',
        help="run what remains of the study, in order, while each run's "
        'estimate (its variant\'s committed wall time) fits')
    n.add_argument(
        '--minutes',
        type=float,
        required=True,
        help='time this machine has left for the study')
    p = sub.add_parser('report', help='the tables, from the jsons alone')
    p.add_argument('--write', help='replace the marked section of this file')
    args = parser.parse_args(argv)
    {
        'run': cmd_run,
        'scratch': cmd_scratch,
        'check-linear': cmd_check_linear,
        'status': cmd_status,
        'next': cmd_next,
        'report': cmd_report
    }[args.cmd](
        args)


if __name__ == '__main__':
    # `status | head -1` ends quietly when head has read its line
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    main()
