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

Longer schedules (a GPU; issue #21):

    python tools/analysis_tools/fmnist_study.py --epochs 100 \
        --train-images 60000 --variants mae hpm random --seeds 0 1 2 \
        --parallel 9 --workers 1 --amp --cls --out work_dirs/study_100e \
        --pack work_dirs/study_100e_pack

``--epochs`` / ``--train-images`` change the schedule (cfg-options only) and
scale what is tuned to its length in steps S = epochs x ceil(images / 256):
the warm-up is 5% of the epochs (at least 1: the main job's 1 of 10), and
the EMA teacher lags 2.5% -> 10% of the run (momentum 1 / (0.025 S) ->
1 / (0.1 S) over the whole run: the main job's 0.1 -> 0.025 at S = 400;
S = 23,500 gives 1.7e-3 -> 4.3e-4, near the authors' ImageNet 1e-3 ->
1e-4). ``--parallel`` runs that many trainings (then evaluations) at once,
e.g. several per GPU. ``--pack DIR`` then writes every run's encoder (fp16)
and results into files of at most 16 MiB, which ``--unpack FILE...`` turns
back into runs elsewhere (a CPU) for the evaluations that need no GPU:
``--linear`` and ``--low-label 1 10`` (fine-tuning on the first 1% / 10% of
the training labels, roughly balanced, from each encoder and from random
init: training from scratch). ``--compare OTHER/study.json`` sets the paired
gaps to MAE beside another study's (e.g. the 10-epoch one).
"""
import argparse
import functools
import glob
import json
import math
import os
import os.path as osp
import statistics
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
HPM_CFG = 'configs/hpm/hpm_vit-mini-p4_1xb256-coslr-10e_fmnist.py'
MAE_CFG = 'configs/hpm/ablations/mae_vit-mini-p4_1xb256-coslr-10e_fmnist.py'
LINEAR_CFG = ('configs/benchmarks/classification/fmnist/'
              'vit-mini-p4_1xb256-linear-coslr-10e_fmnist.py')
LINEAR_CLS_CFG = ('configs/benchmarks/classification/fmnist/'
                  'vit-mini-p4_1xb256-linear-cls-coslr-10e_fmnist.py')
FINETUNE_CFG = ('configs/benchmarks/classification/fmnist/'
                'vit-mini-p4_1xb128-coslr-10e_fmnist.py')
BATCH = 256  # the pretraining configs' batch size
# low-label fine-tuning: % of the labels -> epochs (~500 / ~1,400 steps)
LOW_LABEL_EPOCHS = {1: 100, 10: 30}
PACK_LIMIT = 16 * 2**20  # bytes per pack file (what a GPU machine returns)


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


_PARSE = threading.Lock()  # mmengine's config parser is not thread-safe


@functools.lru_cache
def load(config):
    """The parsed config (once per config, one thread at a time)."""
    from mmengine.config import Config
    with _PARSE:
        return Config.fromfile(osp.join(ROOT, config))


def max_epochs(config):
    """The config's ``train_cfg.max_epochs``."""
    return load(config).train_cfg.max_epochs


def knn_hook_index(config):
    """Where the config's KNNEvalHook sits in ``custom_hooks``."""
    return [h['type'] for h in load(config).custom_hooks].index('KNNEvalHook')


class Schedule:
    """A pretraining schedule (epochs x images per epoch) and the
    cfg-options that give it, with the warm-up and the EMA teacher's
    momentum ramp scaled to its length in steps (see the module's doc).
    ``Schedule()`` is the configs' own (10 epochs of 10k images: no
    options)."""

    def __init__(self, epochs=None, images=None):
        self.epochs, self.images = epochs, images

    @property
    def default(self):
        return self.epochs is None and self.images is None

    def num_epochs(self, config):
        return self.epochs or max_epochs(config)

    def steps(self, config):
        """Optimizer steps of the run (images per epoch: ours, else the
        config's subset, else all 60k)."""
        images = self.images or load(
            config).train_dataloader.dataset.get('indices') or 60000
        return self.num_epochs(config) * math.ceil(images / BATCH)

    def warmup(self, config):
        return max(1, round(0.05 * self.num_epochs(config)))

    def momentum(self, config):
        """(start, end) teacher momentum: lag 2.5% -> 10% of the steps (at
        most 0.5, a lag of 2 steps, in runs of under 80 steps)."""
        steps = self.steps(config)
        return min(.5, 1 / (0.025 * steps)), min(.5, 1 / (0.1 * steps))

    def options(self, config, teacher=True):
        if self.default:
            return []
        epochs, warm = self.num_epochs(config), self.warmup(config)
        opts = [f'train_cfg.max_epochs={epochs}',
                f'param_scheduler.0.end={warm}',
                f'param_scheduler.1.begin={warm}',
                f'param_scheduler.1.T_max={epochs - warm}',
                f'param_scheduler.1.end={epochs}']
        if self.images:
            opts.append('train_dataloader.dataset.indices='
                        f"{self.images if self.images < 60000 else None}")
        if teacher:
            m0, m1 = self.momentum(config)
            opts += [f'model.teacher.momentum={m0:.4g}',
                     f'model.teacher.end_momentum={m1:.4g}',
                     f'model.teacher.momentum_epochs={epochs}']
        return opts

    def tag(self):
        return {} if self.default else dict(epochs=self.epochs,
                                            images=self.images)


def final_checkpoint(work, config, epochs=None):
    """The final-epoch checkpoint of the run in ``work``, or None when it
    has not run or was interrupted (its ``last_checkpoint`` names an earlier
    epoch; mmengine writes it only after the checkpoint itself is saved);
    else an unpacked encoder (``--unpack``) of that schedule."""
    last = osp.join(work, 'last_checkpoint')
    final = f'epoch_{epochs or max_epochs(config)}.pth'
    if osp.exists(last):
        with open(last) as f:
            ckpt = f.read().strip()
        if osp.basename(ckpt) == final:
            return ckpt
    encoder = osp.join(work, 'encoder.pth')
    if osp.exists(osp.join(work, 'pretrain.json')) and osp.exists(encoder):
        with open(osp.join(work, 'pretrain.json')) as f:
            if json.load(f).get('epochs') == (epochs or max_epochs(config)):
                return encoder
    return None


def train_until_done(cmd, work, config, log, epochs=None):
    """Train, resuming an interrupted run; return its final checkpoint."""
    ckpt = final_checkpoint(work, config, epochs)
    if ckpt is None:
        resume = osp.exists(osp.join(work, 'last_checkpoint'))
        run(cmd + (['--resume'] if resume else []), log)
        ckpt = final_checkpoint(work, config, epochs)
        if ckpt is None:
            raise SystemExit(f'{work}: training ended before its final '
                             f'epoch; see {log}')
    return ckpt


def last_scalars(work):
    """The last logged value of each scalar of the run's newest log
    (``rank_acc``, ``hpm/spearman``, ...), or {}."""
    files = sorted(glob.glob(osp.join(work, '*', 'vis_data', 'scalars.json')))
    out = {}
    for path in files:  # older runs first: a resumed run's values win
        with open(path) as f:
            for line in f:
                out.update(json.loads(line))
    return out


def linear_probe(config, lin_work, ckpt, seed, log, commands, options=(),
                 epochs=None):
    """Train and test one linear probe (or reuse it); its top-1. ``ckpt``
    None: the encoder starts from random init (training from scratch);
    ``epochs``: what ``options`` set (default: the config's)."""
    py = sys.executable
    init = (f'model.backbone.init_cfg.checkpoint={ckpt}' if ckpt else
            'model.backbone.init_cfg=None')
    lin = [py, 'tools/train.py', config, '--work-dir', lin_work,
           '--cfg-options', init, f'randomness.seed={seed}', *options]
    commands.append(' '.join(lin[1:]))
    done = osp.join(lin_work, 'metrics.json')
    epochs = epochs or max_epochs(config)
    test = [py, 'tools/test.py', config,
            osp.join(lin_work, f'epoch_{epochs}.pth'), '--work-dir', lin_work,
            '--out', done]
    commands.append(' '.join(test[1:]))
    if not osp.exists(done):
        train_until_done(lin, lin_work, config, log, epochs)
        run(test, log)
    with open(done) as f:
        return json.load(f)['accuracy/top1']


def low_label_options(percent):
    """cfg-options of the fine-tuning config for ``percent`` of the labels:
    the first N training images (roughly balanced), LOW_LABEL_EPOCHS."""
    epochs = LOW_LABEL_EPOCHS[percent]
    return [f'train_dataloader.dataset.indices={600 * percent}',
            f'train_cfg.max_epochs={epochs}',
            f'train_cfg.val_interval={epochs}',
            f'param_scheduler.1.T_max={epochs - 1}',
            f'param_scheduler.1.end={epochs}',
            f'default_hooks.checkpoint.interval={epochs}']


def low_label(work, ckpt, seed, log, commands, percents):
    """Fine-tune with each % of the labels asked for (and report those
    already done); {'ll1': top-1, ...}."""
    done = [p for p in LOW_LABEL_EPOCHS if osp.exists(
        osp.join(work, f'lowlabel{p}', 'metrics.json'))]
    return {f'll{p}': linear_probe(
        FINETUNE_CFG, osp.join(work, f'lowlabel{p}'), ckpt, seed, log,
        commands, low_label_options(p), LOW_LABEL_EPOCHS[p])
        for p in sorted(set(percents) | set(done))}


def one_run(name, seed, out, linear, cls=False, schedule=None, amp=False,
            workers=None, knn_images=None, low_labels=()):
    schedule = schedule or Schedule()
    config, options, _ = VARIANTS[name]
    work = osp.join(out, f'{name}_seed{seed}')
    os.makedirs(work, exist_ok=True)
    log = osp.join(work, 'study.log')
    py = sys.executable
    knn_opts = [] if knn_images is None else [
        f'custom_hooks.{knn_hook_index(config)}.{split}_dataloader.dataset.'
        f'indices={n}' for split, n in zip(('train', 'val'), knn_images)]
    extra = schedule.options(config, teacher=name != 'mae') + knn_opts
    if workers is not None:
        extra.append(f'train_dataloader.num_workers={workers}')
    train = [py, 'tools/train.py', config, '--work-dir', work,
             *(['--amp'] if amp else []), '--cfg-options',
             f'randomness.seed={seed}', *options, *extra]
    knn_json = osp.join(work, 'knn.json')
    cls_json = osp.join(work, 'knn_cls.json')
    commands = [' '.join(train[1:])]
    epochs = schedule.num_epochs(config)
    if final_checkpoint(work, config, epochs) is None:
        for stale in (knn_json, cls_json):  # they evaluated an unfinished run
            if osp.exists(stale):
                os.remove(stale)
    ckpt = train_until_done(train, work, config, log, epochs)
    result = dict(schedule.tag())
    for key, path, feat in (('knn', knn_json, []),
                            ('knn_cls', cls_json, ['--feature', 'cls'])):
        if key == 'knn_cls' and not (cls or osp.exists(path)):
            continue
        knn = [py, 'tools/analysis_tools/knn_eval.py', config, ckpt, *feat,
               *(['--amp'] if amp else []), '--out', path,
               *(['--cfg-options', *knn_opts] if knn_opts else [])]
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
    result.update(low_label(work, ckpt, seed, log, commands, low_labels))
    result.update(pretrain_record(work, name, epochs))
    result['commands'] = commands
    return result


def pretrain_record(work, name, epochs):
    """The run's end of pretraining: ``rank_acc`` (the student's predictor
    ranking the masked patches of the last logged step) and ``spearman``
    (the teacher's ranking against the true per-patch losses on test
    images, HardPatchVisHook), kept in ``pretrain.json``."""
    path = osp.join(work, 'pretrain.json')
    record = {}
    if osp.exists(path):
        with open(path) as f:
            record = json.load(f)
    scalars = last_scalars(work)
    for key, src in (('rank_acc', 'rank_acc'), ('spearman', 'hpm/spearman')):
        if src in scalars:
            record[key] = scalars[src]
    record.update(variant=name, epochs=epochs)
    with open(path, 'w') as f:
        json.dump(record, f)
    return {k: record[k] for k in ('rank_acc', 'spearman') if k in record}


def scratch_run(seed, out, low_labels):
    """Low-label fine-tuning from random init: training from scratch."""
    work = osp.join(out, f'scratch_seed{seed}')
    os.makedirs(work, exist_ok=True)
    commands = []
    result = low_label(work, None, seed, osp.join(work, 'study.log'),
                       commands, low_labels)
    result['commands'] = commands
    return result


def pack(out, runs, dest):
    """Every finished run's encoder (backbone, fp16) and result files into
    ``dest/encoders_<i>.pth`` of at most PACK_LIMIT bytes each."""
    import torch

    import hpm_mm  # noqa: F401  (a checkpoint's types, for torch.load)
    os.makedirs(dest, exist_ok=True)
    files, part, size = [], {}, 0

    def flush():
        nonlocal part, size
        if part:
            path = osp.join(dest, f'encoders_{len(files)}.pth')
            torch.save(part, path)
            files.append(path)
        part, size = {}, 0

    for run_name in runs:
        work = osp.join(out, run_name)
        ckpt = osp.join(work, 'encoder.pth')
        if not osp.exists(ckpt):
            with open(osp.join(work, 'last_checkpoint')) as f:
                ckpt = f.read().strip()
        state = torch.load(ckpt, map_location='cpu')['state_dict']
        encoder = {k: v.half() if v.is_floating_point() else v
                   for k, v in state.items() if k.startswith('backbone.')}
        files_of_run = {}
        for name in os.listdir(work):
            if name.endswith('.json'):
                with open(osp.join(work, name)) as f:
                    files_of_run[name] = f.read()
        entry = dict(encoder=encoder, files=files_of_run)
        nbytes = sum(v.numel() * v.element_size() for v in encoder.values()
                     ) + sum(len(t) for t in files_of_run.values())
        if size and size + nbytes > PACK_LIMIT - 2**16:  # 64 KiB: pickling
            flush()
        part[run_name] = entry
        size += nbytes
    flush()
    for path in files:
        print(f'packed {path} ({osp.getsize(path) / 2**20:.1f} MiB)')
    return files


def unpack(files, out):
    """Runs from :func:`pack` files: ``out/<run>/encoder.pth`` (fp32, a
    checkpoint the evaluation configs load) and the run's result files."""
    import torch
    names = []
    for path in files:
        for run_name, entry in torch.load(path, map_location='cpu').items():
            work = osp.join(out, run_name)
            os.makedirs(work, exist_ok=True)
            state = {k: v.float() if v.is_floating_point() else v
                     for k, v in entry['encoder'].items()}
            torch.save(dict(state_dict=state), osp.join(work, 'encoder.pth'))
            for name, text in entry['files'].items():
                with open(osp.join(work, name), 'w') as f:
                    f.write(text)
            names.append(run_name)
    print(f'unpacked {len(names)} runs into {out}: {", ".join(names)}')
    return names


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


METRICS = (('knn', 'kNN, patch avg'), ('knn_cls', 'kNN, CLS'),
           ('linear', 'linear, patch avg'), ('linear_cls', 'linear, CLS'),
           ('ll1', 'fine-tune, 1% labels'), ('ll10', 'fine-tune, 10% labels'))


def paired(results, name, key, base='mae'):
    """Per-seed differences ``name - base`` of ``key`` (seeds both have)."""
    a, b = results.get(name, {}), results.get(base, {})
    return {seed: a[seed][key] - b[seed][key] for seed in a
            if seed in b and a[seed].get(key) is not None
            and b[seed].get(key) is not None}


def fmt_diffs(diffs):
    if not diffs:
        return '-'
    values = list(diffs.values())
    spread = f' ± {statistics.stdev(values):.2f}' if len(values) > 1 else ''
    return (f'{statistics.mean(values):+.2f}{spread} '
            f"({', '.join(f'{v:+.2f}' for v in values)})")


def report(results, compare=None):
    """The study's tables (markdown): metrics per variant, the end of
    pretraining, paired gaps to MAE (and to another study's)."""
    rows = ['| variant | what | ' + ' | '.join(t for _, t in METRICS) +
            ' | seeds |', '|---|---|' + '---|' * len(METRICS) + '---|']
    for name, runs in results.items():
        what = VARIANTS[name][2] if name in VARIANTS else \
            'random init, fine-tuned only'
        rows.append(f'| {name} | {what} | ' + ' | '.join(
            fmt(runs, k) for k, _ in METRICS) +
            f" | {', '.join(map(str, runs))} |")
    out = ['\n'.join(rows)]
    pre = [f'| {name} | {fmt(runs, "rank_acc")} | {fmt(runs, "spearman")} |'
           for name, runs in results.items()
           if any(r.get('rank_acc') is not None for r in runs.values())]
    if pre:
        out.append('End of pretraining: the predictor\'s ranking accuracy '
                   '(last logged step) and the Spearman correlation of the '
                   'predicted (the teacher\'s; without a teacher, the '
                   'student\'s) with the true per-patch losses on test '
                   'images:\n\n'
                   '| variant | rank_acc | Spearman |\n|---|---|---|\n' +
                   '\n'.join(pre))
    gaps = []
    for name in results:
        if name == 'mae':
            continue
        for key, title in METRICS:
            diffs = paired(results, name, key)
            if not diffs:
                continue
            line = f'| {name} - mae | {title} | {fmt_diffs(diffs)} |'
            if compare is not None:
                line += f' {fmt_diffs(paired(compare, name, key))} |'
            gaps.append(line)
    if gaps:
        head = '| pair | metric | mean ± std (per seed) |'
        sep = '|---|---|---|'
        if compare is not None:
            head += ' the compared study |'
            sep += '---|'
        out.append('Paired by seed (same seed = same initialisation and '
                   'data order):\n\n' + '\n'.join([head, sep] + gaps))
    return '\n\n'.join(out)


def load_results(path):
    """A study.json, seeds as ints."""
    with open(path) as f:
        raw = json.load(f)
    return {name: {int(s): r for s, r in runs.items()}
            for name, runs in raw.items()}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--variants', nargs='+', default=list(VARIANTS),
                        choices=list(VARIANTS))
    parser.add_argument('--seeds', type=int, nargs='+', default=[0, 1, 2])
    parser.add_argument('--linear', action='store_true')
    parser.add_argument('--cls', action='store_true',
                        help='also kNN (and with --linear, a linear probe) '
                        'on the CLS token')
    parser.add_argument('--epochs', type=int,
                        help="pretraining epochs (default: the configs' 10)")
    parser.add_argument('--train-images', type=int,
                        help='images per pretraining epoch (default: the '
                        "configs' first 10000; 60000: all)")
    parser.add_argument('--parallel', type=int, default=1,
                        help='runs trained and evaluated at once')
    parser.add_argument('--workers', type=int,
                        help='dataloader workers per training')
    parser.add_argument('--amp', action='store_true',
                        help='train (and extract kNN features) with --amp')
    parser.add_argument('--knn-images', type=int, nargs=2,
                        metavar=('TRAIN', 'TEST'),
                        help='kNN on the first TRAIN / TEST images only (a '
                        'dry run)')
    parser.add_argument('--low-label', type=int, nargs='+', default=[],
                        choices=sorted(LOW_LABEL_EPOCHS),
                        help='fine-tune with this %% of the labels, from '
                        'every encoder and from scratch')
    parser.add_argument('--pack', metavar='DIR',
                        help='after the study: encoders + results of its '
                        'runs into DIR/encoders_<i>.pth (<= 16 MiB each)')
    parser.add_argument('--unpack', nargs='+', metavar='FILE',
                        help='make runs under --out from pack files first')
    parser.add_argument('--compare', metavar='STUDY_JSON',
                        help="another study's study.json: its paired gaps "
                        'beside these')
    parser.add_argument('--out', default='work_dirs/fmnist_study')
    parser.add_argument(
        '--report-only', action='store_true',
        help='train nothing: tabulate the runs under --out that finished '
        '(a partial study, or one run across several sessions)')
    args = parser.parse_args(argv)
    if args.unpack:
        unpack(args.unpack, args.out)
    schedule = Schedule(args.epochs, args.train_images)
    todo = []
    for name in args.variants:
        for seed in args.seeds:
            work = osp.join(args.out, f'{name}_seed{seed}')
            config = VARIANTS[name][0]
            if args.report_only and not (
                    osp.exists(osp.join(work, 'knn.json')) and
                    final_checkpoint(work, config,
                                     schedule.num_epochs(config))):
                continue
            todo.append((name, seed))

    def go(item):
        """One run; a failed one is reported at the end, the others go on."""
        name, seed = item
        try:
            if name == 'scratch':
                return scratch_run(seed, args.out, args.low_label)
            return one_run(
                name, seed, args.out, args.linear and not args.report_only,
                args.cls and not args.report_only, schedule, args.amp,
                args.workers, args.knn_images,
                () if args.report_only else args.low_label)
        except SystemExit as e:
            return dict(error=f'{name} seed {seed}: {e}')

    todo += [('scratch', seed) for seed in args.seeds if (
        args.low_label and not args.report_only) or glob.glob(osp.join(
            args.out, f'scratch_seed{seed}', 'lowlabel*', 'metrics.json'))]
    with ThreadPoolExecutor(max(1, args.parallel)) as pool:
        done = list(pool.map(go, todo))
    results, failed = {}, []
    for (name, seed), result in zip(todo, done):
        if 'error' in result:
            failed.append(result['error'])
        else:
            results.setdefault(name, {})[seed] = result
    compare = load_results(args.compare) if args.compare else None
    table = report(results, compare)
    print(table)
    with open(osp.join(args.out, 'study.md'), 'w') as f:
        f.write(f'Command: python tools/analysis_tools/fmnist_study.py '
                f"{' '.join(argv or sys.argv[1:])}\n\n{table}\n")
    with open(osp.join(args.out, 'study.json'), 'w') as f:
        json.dump(results, f, indent=2)
    if failed:
        raise SystemExit(f'{len(failed)} run(s) failed (the table holds the '
                         'others): ' + '; '.join(failed))
    if args.pack:
        pack(args.out, [f'{n}_seed{s}' for n, s in todo if n != 'scratch'],
             args.pack)
    return results


if __name__ == '__main__':
    main()
