"""The docs' measured tables, generated from the records in docs/results/
(as mmpretrain's .dev_scripts generate its READMEs).

    python .dev_scripts/generate_readme.py          # rewrite every block
    python .dev_scripts/generate_readme.py --check  # exit 1: a stale block

A record is one json per run (docs/speed.md#records): ``what``,
``command`` (or ``commands``), ``commit``, ``date``, ``machine``
(``cpu_class`` and ``fp32_gemm_gflops``, or ``gpu`` and ``bf16_tflops``)
and its values (a tool's own keys beside them). A machine that stands in
for another says so (``code_paths``, ``load``); a figure computed from
records, not measured, is printed as an estimate. Each table is a builder
registered in ``BLOCKS`` with its page; the page holds it between its two
marks, and no figure is written by hand outside them
(tests/test_docs_figures.py). A new run: its json, then this script.
"""
import glob
import json
import os
import os.path as osp
import re
import statistics
import sys

import yaml

ROOT = osp.dirname(osp.dirname(osp.abspath(__file__)))
RESULTS = osp.join(ROOT, 'docs', 'results')
METAFILE = osp.join(ROOT, 'configs', 'hpm', 'metafile.yml')
sys.path[:0] = [osp.dirname(osp.abspath(__file__))]
BLOCKS = {}  # name -> (page relative to ROOT, builder, (begin, end) marks)
CLASSES = ('AVX2', 'AVX512-BF16', 'AMX')  # the CPU classes, slowest first


def marks(name):
    return (f'<!-- generated: {name} (python .dev_scripts/generate_readme.py)'
            ' -->', f'<!-- end generated: {name} -->')


def block(name, page, own_marks=None):
    """Register ``build() -> list of lines`` as block ``name`` of ``page``."""

    def add(build):
        BLOCKS[name] = (page, build, own_marks or marks(name))
        return build

    return add


# records -------------------------------------------------------------------


def problem(r):
    """What a record lacks of the schema (None when whole)."""
    m = r.get('machine')
    for key, ok in (('command',
                     isinstance(
                         r.get('command') or r.get('commands'),
                         (str, list))), ('commit',
                                         re.fullmatch(r'[0-9a-f]{7,40}',
                                                      str(r.get('commit')))),
                    ('date', re.match(r'\d{4}-\d\d-\d\d', str(r.get('date')))),
                    ('machine.cpu_class or machine.gpu', isinstance(m, dict)
                     and (m.get('cpu_class') or m.get('gpu')))):
        if not ok:
            return f'no {key}'
    return None


def records(pattern):
    """[(name under docs/results, record)] of the jsons ``pattern`` matches,
    each checked against the schema."""
    out = []
    for path in sorted(glob.glob(osp.join(RESULTS, pattern))):
        name = osp.relpath(path, RESULTS)
        try:
            r = json.load(open(path))
        except ValueError as e:
            raise ValueError(f'docs/results/{name} is not json ({e})')
        if not isinstance(r, dict) or problem(r):
            raise ValueError(
                f'docs/results/{name}: '
                f'{problem(r) if isinstance(r, dict) else "no object"}'
                ' (the record schema: docs/speed.md#records)')
        out.append((name, r))
    if not out:
        raise ValueError(f'no record matches docs/results/{pattern}')
    return out


def one(name):
    return dict(records(name))[name]


# formats -------------------------------------------------------------------


def dur(s):
    """Seconds as '9 min 3 s', '52 s', '1.36 s', '0.968 s', '0.77 ms'; '-'
    for None."""
    if s is None:
        return '-'
    if s >= 59.5:
        m, s = divmod(round(s), 60)
        return f'{m} min {s} s'
    for top, fmt in ((0.1, '{:.2g} ms'), (1, '{:.3f} s'), (10, '{:.2f} s')):
        if s < top:
            return fmt.format(s * 1e3 if top == 0.1 else s)
    return f'{s:.0f} s'


def mins(lo, hi=None):
    """'7.0 min', or '4.5-7.3 min' for a range."""
    hi = lo if hi is None else hi
    return f'{lo / 60:.1f} min' if round(lo / 6) == round(hi / 6) else \
        f'{lo / 60:.1f}-{hi / 60:.1f} min'


def machine(m):
    """'AVX512-BF16 (208 GFLOP/s)', 'NVIDIA H200 (749 TFLOP/s bf16)', with
    what a stand-in is held to."""
    if m.get('gpu'):
        return f"{m['gpu']} ({m['bf16_tflops']:.0f} TFLOP/s bf16)"
    rate = m.get('fp32_gemm_gflops')
    held = ', '.join(
        x for x in (m.get('code_paths') and f"{m['code_paths']} code paths",
                    m.get('load')) if x)
    return m['cpu_class'] + (f' ({rate:.0f} GFLOP/s)'
                             if rate else '') + (f', {held}' if held else '')


def table(head, rows):
    return ['| ' + ' | '.join(head) + ' |', '|' + '---|' * len(head)] + [
        '| ' + ' | '.join(str(c) for c in row) + ' |' for row in rows
    ]


def rec(name):
    return f'`{name}`'


def n(x, fmt='{:,.0f}'):
    return '-' if x is None else fmt.format(x)


# configs/hpm/README.md -----------------------------------------------------

HPM_README = 'configs/hpm/README.md'


@block('models', HPM_README)
def models_table():
    meta = yaml.safe_load(open(METAFILE))
    rows = []
    for m in meta['Models']:
        md = m.get('Metadata', {})
        measured = '; '.join(f'{k} {v}' for r in (m.get('Results') or [])
                             for k, v in r['Metrics'].items()) or '-'
        rows.append([
            m['Name'],
            md.get('Training Data', 'ImageNet-1k'),
            md.get('Epochs', '-'),
            md.get('Batch Size', '-'),
            md.get('Paper Fine-tune Top-1', '-'), measured,
            f"[config](../../{m['Config']})"
        ])
    return table([
        'model', 'data', 'epochs', 'batch', 'paper fine-tune top-1',
        'measured here', 'config'
    ], rows)


def main_job_label(r):
    v, m = r['values'], r['machine']
    return f"{machine(m)}, {v['precision']}" + (', CUDA graphs'
                                                if v.get('compile') else '')


@block('knn', HPM_README)
def knn_table():
    mains = records('main_job/*.json')
    raw_name, raw = 'knn_raw_pixels_28px.json', one('knn_raw_pixels_28px.json')
    ks = sorted({int(k)
                 for _, r in mains
                 for k in r['values']['knn']} | {int(k)
                                                 for k in raw['acc']})
    rows = [[f"the main job's encoder: {main_job_label(r)}", r['commit']] +
            [n(r['values']['knn'].get(str(k)), '{:.2f}')
             for k in ks] + [rec(name)] for name, r in mains]
    rows.append(['raw pixels, 28 px (baseline)', raw['commit']] +
                [n(raw['acc'].get(str(k)), '{:.2f}')
                 for k in ks] + [rec(raw_name)])
    return table(['features (kNN, T = 0.07, 60k train / 10k test)', 'commit'] +
                 [f'k={k}' for k in ks] + ['record'], rows) + [
                     '', 'Seed 0; each command in its record '
                     '(docs/results/); the baseline: '
                     f"`{raw['command']}`."
                 ]


@block('precision-study', HPM_README)
def precision_table():
    """The study's runs by CPU class, precision and length: seeds, mean
    kNN (k=10) and linear top-1 with the seeds' range, mean training time;
    then the paired bf16 - fp32 kNN difference with its 95% interval."""
    from precision_study import interval, paired
    groups = {}
    for name, r in records('precision/*_seed*.json'):
        key = (r['machine']['cpu_class'], r['precision'], r['epochs'])
        groups.setdefault(key, []).append((name, r))

    def spread(rs, key):
        v = [r['metrics'][key] for _, r in rs]
        return f'{statistics.mean(v):.2f} ({min(v):.2f}-{max(v):.2f})'

    rows = []
    for (cpu, prec, epochs), rs in sorted(groups.items()):
        secs = statistics.mean(r['train_seconds'] for _, r in rs)
        seeds = ','.join(str(r['seed']) for _, r in rs)
        rows.append([
            cpu, prec, epochs,
            len(rs),
            spread(rs, 'knn_k10'),
            spread(rs, 'linear'),
            mins(secs),
            rec(f'precision/{prec}_{epochs}e_seed{{{seeds}}}.json')
        ])
    lines = table([
        'CPU', 'precision', 'epochs', 'seeds', 'kNN k=10 (min-max)',
        'linear (min-max)', 'training per run', 'records'
    ], rows)
    diffs = paired([r for rs in groups.values() for _, r in rs], 'knn_k10')
    if len(diffs) > 1:
        mean, half = interval(diffs)
        lines += [
            '', f'Paired bf16 - fp32 kNN (k=10) over {len(diffs)} seeds: '
            f'{mean:+.2f}, 95% interval [{mean - half:+.2f}, '
            f'{mean + half:+.2f}]. Commands: `python .dev_scripts/'
            'precision_study.py run --seeds 0 1 2 --epochs 2`; the reading '
            'in [docs/speed.md](../../docs/speed.md#bf16-and-accuracy). '
            'Wall times: each json\'s own, with other work on the 2 cores '
            'at times (a ratio, not a benchmark).'
        ]
    return lines


@block('hard-patches', HPM_README)
def hard_patches():
    name = 'hard_patches_fmnist.json'
    r = one(name)
    rows = [[
        x['run'], x['predictor'], f"{x['spearman']:.3f}", f"{x['iou']:.3f}",
        f"{x['iou_random']:.3f}"
    ] for x in r['values']['rows']]
    return table([
        'run', 'predictor', 'Spearman (predicted vs true loss)',
        'IoU (predicted loss > median vs foreground)', 'IoU of a random mask'
    ], rows) + ['', f"{machine(r['machine'])}, {r['commit']}, `{name}`."]


# README.md: what to expect of the two commands ------------------------------


def by_class(rs, value):
    """{class: (low, high, runs)} of ``value(record)`` over the records
    measured on a plain machine of each CPU class."""
    out = {}
    for _, r in rs:
        m, v = r['machine'], value(r)
        if v is None or m.get('gpu') or m.get('code_paths') or m.get('load'):
            continue
        lo, hi, k = out.get(m['cpu_class'], (v, v, 0))
        out[m['cpu_class']] = (min(lo, v), max(hi, v), k + 1)
    return out


def per_class(ranges, missing='no run recorded yet'):
    said = [
        f'{c} {mins(lo, hi)} ({k} run{"s" * (k > 1)})'
        for c in reversed(CLASSES) if c in ranges for lo, hi, k in [ranges[c]]
    ]
    none = [c for c in reversed(CLASSES) if c not in ranges]
    return ', '.join(said) + (f'; {" and ".join(none)}: {missing}'
                              if none else '')


def avx2_estimate():
    """(low, high) seconds of pytest on a 2-core AVX2 machine: the stand-in
    runs times the calibration's ratios, an estimate."""
    lo, hi = calibration()
    t = [r['values']['pytest_s'] for _, r in records('suite/standin_*.json')]
    return min(t) * lo, max(t) * hi


def calibration():
    pairs = one('suite/calibration_standin_8f59d0e.json')['values']['pairs']
    ratios = [p['avx2_s'] / p['stand_in_s'] for p in pairs]
    return min(ratios), max(ratios)


@block('expectations', 'README.md')
def expectations():
    mains = records('main_job/*.json')
    gpu = [
        r for _, r in mains if r['machine'].get('gpu')
        and not r['values'].get('compile') and r['values'].get('total_s')
    ]
    suites = [(k, r) for k, r in records('suite/*.json')
              if r['values'].get('how') in ('plain', '.ci/run, clean clone')]
    lo, hi = avx2_estimate()
    return [
        '- `bash tools/main_job.sh` on 2 cores: ' +
        per_class(by_class(mains, lambda r: r['values'].get('total_s'))) +
        (f"; on an {gpu[-1]['machine']['gpu']} (`tools/train.py` with "
         f"`--amp`) {dur(gpu[-1]['values']['total_s'])}" if gpu else '') +
        ' ([docs/speed.md](docs/speed.md#the-main-job)).',
        '- `bash tools/run_tests.sh` on 2 cores: the first full install '
        '(mostly mmcv\'s build, once per machine) ' + per_class(
            by_class(
                records('install/*.json'),
                lambda r: r['values'].get('total_s'))) +
        ' ([docs/install.md](docs/install.md#the-first-install)); then the '
        'suite ' + per_class(
            by_class(suites, lambda r: r['values'].get('pytest_s')),
            f'estimated {mins(lo, hi)} from the stand-in runs, not measured') +
        ' ([docs/speed.md](docs/speed.md#the-tests)).'
    ]


# docs/speed.md ---------------------------------------------------------------

SPEED = 'docs/speed.md'


@block('main-job', SPEED)
def main_job_times():
    rows = []
    for name, r in records('main_job/*.json'):
        v = r['values']
        if not any(
                v.get(k) for k in ('train_s', 'train_and_knn_s', 'total_s')):
            continue
        rows.append([
            main_job_label(r), r['commit'], r['date'],
            dur(v.get('train_s')),
            dur(v.get('train_and_knn_s')),
            dur(v.get('total_s')),
            rec(name)
        ])
    return table([
        'machine', 'commit', 'date', 'training', 'training and kNN', 'in all',
        'record'
    ], sorted(rows))


@block('suite', SPEED)
def suite_table():
    """Every suite record: plain runs, clean-clone CI, the stand-ins (with
    their AVX2 estimate) and the runs that show the verdicts hold alike."""
    lo, hi = calibration()
    rows = []
    for name, r in records('suite/*.json'):
        v = r['values']
        if 'pytest_s' not in v:
            continue
        est = f"{mins(v['pytest_s'] * lo, v['pytest_s'] * hi)} (estimate)" \
            if v['how'] == 'stand-in' else '-'
        rows.append([
            v['how'],
            machine(r['machine']), r['commit'], r['date'],
            dur(v['pytest_s']),
            dur(v.get('total_s')),
            n(v.get('passed')), est,
            rec(name)
        ])
    order = ['plain', '.ci/run, clean clone', 'stand-in']
    rows.sort(key=lambda x: (order.index(x[0]) if x[0] in order else 3, x))
    return table([
        'how', 'machine (2 cores)', 'commit', 'date', 'pytest', 'with a new '
        'venv', 'passed', 'on 2-core AVX2', 'record'
    ], rows)


@block('stand-in-calibration', SPEED)
def stand_in_calibration():
    name = 'suite/calibration_standin_8f59d0e.json'
    r = one(name)
    lo, hi = calibration()
    return [
        f"An AVX2 machine took {lo:.1f}-{hi:.1f}x the stand-in's time (" +
        ', '.join(f"{p['test']} {p['avx2_s'] / p['stand_in_s']:.2f}"
                  for p in r['values']['pairs']) +
        f"; {rec(name)}: {r['note']})."
    ]


@block('bf16-step', SPEED)
def bf16_step():
    label = dict(mae='MAE', hpm='faithful HPM', fast="the main job's fast HPM")
    rows = []
    for name, r in records('precision/step_mini_*.json'):
        step = {(x['setting'], x['precision']): x['step'] for x in r['rows']}
        rows += [[
            machine(r['machine']), label[s],
            dur(step[s, 'fp32']),
            dur(step[s, 'bf16']), f"{step[s, 'fp32'] / step[s, 'bf16']:.2f}x",
            r['commit'],
            rec(name)
        ] for s in label if (s, 'bf16') in step and (s, 'fp32') in step]
    return table([
        'machine (2 cores)', 'row', 'fp32 step', 'bf16 step', 'bf16 speed-up',
        'commit', 'record'
    ], rows)


@block('numerics', SPEED)
def numerics():
    name = 'precision/numerics.json'
    r = one(name)
    t, s = r['teacher'], r['student']
    rows = [
        [
            "teacher scores: Spearman with fp32's, per image (mean / min)", 1,
            f"{t['spearman']:.5f} / {t['spearman_min']:.5f}"
        ],
        [
            f"the K = {r['k_hard']} hardest patches, share picked as in fp32",
            1, f"{t['topk_same']:.4f}"
        ],
        [
            'student on the same mask: loss_rec',
            f"{s['fp32']['loss_rec']:.6f}", f"{s['bf16']['loss_rec']:.6f}"
        ],
        [
            'loss_pred (relative BCE)', f"{s['fp32']['loss_pred']:.5f}",
            f"{s['bf16']['loss_pred']:.5f}"
        ],
        [
            'rank_acc', f"{s['fp32']['rank_acc']:.5f}",
            f"{s['bf16']['rank_acc']:.5f}"
        ],
    ]
    return table([
        f"part ({r['images']} images; {machine(r['machine'])}, "
        f"{r['commit']}, {rec(name)})", 'fp32', 'bf16 autocast'
    ], rows)


@block('sections', SPEED)
def sections():
    name = 'step_mini_sections_avx512-bf16.json'
    r = one(name)
    rows = {x['setting']: x for x in r['rows']}
    mae = rows['mae']['step']
    parts = ('teacher', 'mask', 'student_fwd', 'losses', 'rest')
    label = dict(
        hpm='faithful HPM, 28 px',
        fast='the main job: half-resolution teacher + 1-block loss '
        'predictor',
        mae='the MAE twin')
    out = [[label[s], dur(x['step']), f"{x['step'] / mae:.2f}x"] +
           [dur(x[p]) if p in x else '-' for p in parts]
           for s, x in rows.items()]
    return table([
        f"{machine(r['machine'])}, {r['commit']}, {rec(name)}", 'step',
        'x MAE', 'teacher (update + pass)', 'mask', 'student forward',
        'losses', 'rest (backward, optimizer)'
    ], out)


@block('vit-sizes', SPEED)
def vit_sizes():
    name = 'benchmark_step_cpu_tsb.json'
    r = one(name)
    step = {(x['setting'], x['arch']): x for x in r['rows']}
    archs = [a for a in 'tsb' if ('mae', a) in step]
    label = {
        'hpm': 'faithful HPM',
        '2blocks': '2-block loss predictor (`model.neck.predictor_depth=2`)',
        'half_res':
        'half-resolution teacher (`model.teacher.input_scale=0.5`)',
        'fast': '**both** (`configs/hpm/fast/`)',
        'alpha0': 'alpha = 0 steps (no teacher)',
        'teacher_bf16': "teacher in bf16 (`model.teacher.dtype='bfloat16'`)"
    }
    rows = [["MAE's step"] + [dur(step['mae', a]['step']) for a in archs]]
    rows += [[label[s]] + [
        f"{step[s, a]['step'] / step['mae', a]['step']:.2f}x "
        f"({step[s, a]['flop_ratio']:.2f}x)" for a in archs
    ] for s in label]
    return table([
        f"step x MAE's (FLOP model); {machine(r['machine'])}, "
        f"{r['commit']}, {rec(name)}"
    ] + [f'ViT-{a.upper()}' for a in archs], rows)


@block('pipeline', SPEED)
def pipeline():
    rs = records('pipeline/*.json') + [
        ('gpu/decode_h200.json', one('gpu/decode_h200.json'))
    ]
    rows = []
    for name, r in rs:
        pc = r['per_core']
        rows.append([
            machine(r['machine']) + f", {r['machine']['cores']} cores",
            n(pc['mmpretrain']['images_s']),
            n(pc['hpm_mm']['images_s']),
            n(pc.get('device_decode', {}).get('images_s')),
            n(r.get('device_decode', {}).get('images_s')), ', '.join(
                re.sub(r'_(\d+)w$', r' (\1)', k) + f': {v:,.0f}'
                for k, v in r['loader'].items()),
            rec(name)
        ])
    return table([
        'host', 'mmpretrain, per core', 'hpm_mm, per core',
        'GPU decode: the worker half, per core',
        'GPU decode: decode, crop, resize', 'loaders (workers)', 'record'
    ], rows) + [''] + fed_steps()


def fed_steps():
    name = 'gpu/decode_h200.json'
    r = one(name)
    st = r['step']
    label = dict(mae='MAE', fast='HPM fast')
    rows = [[
        label[k],
        n(st[k]['synthetic']),
        n(st[k]['hpm_mm']),
        n(st[k]['device_decode']),
        sum(st[k]['skipped_steps'].values())
    ] for k in label if k in st]
    return table([
        f"ViT-B step fed, batch {st['batch']}, {st['workers']} workers",
        "tensors on the card", "hpm_mm's CPU pipeline", 'GPU decode',
        'non-finite steps', 'record'
    ], [row + [rec(name)] for row in rows])


def gpu_mode(r, x):
    if not x['compile']:
        return 'eager'
    if x['compile'] == 'reduce-overhead':
        return 'CUDA graphs'
    return 'compiled' + (', static shapes'
                         if r.get('dynamic_shapes') is False else '')


@block('gpu-steps', SPEED)
def gpu_steps():
    """One row per batch, model and mode, each record's figure in it (the
    attention kernels' rows in one); rows that measured their company
    left out."""
    label = dict(mae='MAE', hpm='HPM faithful', fast='HPM fast')
    rows = {}
    for name, r in records('gpu/pace_*.json'):
        rate = r['matmul_tflops'] * 1e12
        mae = {
            (x['batch'], gpu_mode(r, x), x['sdpa']): x['step']
            for x in r['rows'] if x['setting'] == 'mae'
        }
        for x in r['rows']:
            if x.get('company'):
                continue
            mode = gpu_mode(r, x)
            base = mae.get((x['batch'], mode, x['sdpa']))
            key = (-x['batch'], list(label).index(x['setting']), mode,
                   x['sdpa'] != 'default')
            row = rows.setdefault(key, dict(cells=[], names=[]))
            row['cells'].append([
                n(x['img_s'])
                if x['sdpa'] == 'default' else f"{x['sdpa']} {n(x['img_s'])}",
                f"{x['step'] / base:.2f}x" if base else '-',
                f"{x['img_s'] * 2 * x['macs'] / rate:.1%}",
                n(x.get('ops_per_step')),
                dur(x['first_steps_s']) if x['compile'] else '-'
            ])
            row['flops'], row['syncs'] = x['flop_ratio'], x['syncs']
            if name not in row['names']:
                row['names'].append(name)
    out = []
    for (batch, setting, mode, sdpa), row in sorted(rows.items()):
        one, cols = lambda c: c[0] if len(set(c)) == 1 else ' / '.join(c), \
            list(zip(*row['cells']))
        out.append([
            -batch,
            list(label.values())[setting],
            mode + (', each attention kernel' if sdpa else ''),
            one(cols[0]),
            one(cols[1]), f"{row['flops']:.2f}x",
            one(cols[2]), row['syncs'],
            one(cols[3]),
            one(cols[4]), ', '.join(rec(x) for x in row['names'])
        ])
    return table([
        'batch', 'row', 'mode', 'images/s', 'x MAE', 'FLOP model', 'MFU',
        'syncs', 'ops', 'compiling', 'records'
    ], out)


@block('fused', SPEED)
def fused():
    from precision_study import interval, paired
    rs = records('fused/*.json')
    rows = []
    for metric, label, f in (('knn_k10', 'kNN k=10', '{:+.2f}'),
                             ('linear', 'linear probe',
                              '{:+.2f}'), ('loss_rec', 'loss_rec', '{:+.4f}'),
                             ('rank_acc', 'rank_acc', '{:+.3f}')):
        d = paired([r for _, r in rs], metric, variant='fused')
        mean, half = interval(d)
        rows.append([
            label,
            len(d),
            f.format(mean), f'[{f.format(mean - half)}, '
            f'{f.format(mean + half)}]'
        ])
    return table([
        f"fused - default AdamW ({machine(rs[0][1]['machine'])})", 'seeds',
        'mean', '95% interval', 'records'
    ], [row + [rec('fused/*.json')] for row in rows])


@block('checkpoint-check', SPEED)
def checkpoint_check():
    name = 'checkpoint_check.json'
    r = one(name)
    b = r['load_bench']
    return [
        f"The bytes check of a {b['gb']:.1f} GB checkpoint: "
        f"{dur(b['crc_check'])} ({b['crc_s_per_gb']:.2f} s per GB) against "
        f"{dur(b['torch_load'])} for its weights-only `torch.load` "
        f"({machine(r['machine'])}, {r['commit']}, `{name}`)."
    ]


# docs/install.md, docs/gpu.md, docs/targets.md, docs/study.md -------------


@block('install-time', 'docs/install.md')
def install_time():
    rs = records('install/*.json')
    rows = [[
        machine(r['machine']), r['commit'], r['date'],
        dur(r['values']['total_s']),
        dur(r['values'].get('mmcv_build_s')),
        rec(name)
    ] for name, r in rs]
    return table([
        'machine (2 cores)', 'commit', 'date', 'in all', 'the mmcv build',
        'record'
    ], rows)


@block('cuda-tests', 'docs/gpu.md')
def cuda_tests():
    rows = [[
        machine(r['machine']), r['commit'], r['date'], r['values']['passed'],
        r['values']['failed'], r['values']['skipped'],
        dur(r['values']['seconds']),
        rec(name)
    ] for name, r in records('gpu/cuda_tests_*.json')]
    return table([
        'card', 'commit', 'date', 'passed', 'failed', 'skipped', 'time',
        'record'
    ], rows)


@block('frameworks-check', 'docs/targets.md')
def frameworks_check():
    name = 'frameworks_fmnist_32px.json'
    r = one(name)
    rows = [[
        x['run'], x['loss_rec'], ' / '.join(f'{a:.2f}' for a in x['rank_acc']),
        n(x['knn_k10'], '{:.2f}')
    ] for x in r['values']['runs']]
    return table([
        'run', 'loss_rec epoch 1 -> 10', 'rank_acc epoch 1 / 5 / 10 '
        '(chance 0.5)', 'kNN k=10 (avg)'
    ], rows) + ['', f"{machine(r['machine'])}, {r['commit']}, `{name}`."]


def _study():
    sys.path[:0] = [
        osp.join(osp.dirname(osp.abspath(__file__)), 'fmnist_study')
    ]
    import report
    return report


def study_tables():
    report = _study()
    assert report.MARKS == BLOCKS['study'][2], 'report.py moved its marks'
    loaded = report.load_records()
    for name, r in loaded.items():
        if problem(r):
            raise ValueError(f'docs/results/fmnist_study/{name}.json: '
                             f'{problem(r)}')
    return report.tables(loaded).split('\n')


BLOCKS['study'] = ('docs/study.md', study_tables,
                   ('<!-- study report: begin -->',
                    '<!-- study report: end -->'))

# docs/own_data.md: what --from buys (.dev_scripts/own_data_study) ---------


def t_interval(values):
    """(mean, low, high) of the 95% t interval; low = high = mean for one
    value."""
    from scipy.stats import t
    m = statistics.mean(values)
    half = t.ppf(.975,
                 len(values) - 1) * statistics.stdev(values) / len(
                     values)**.5 if len(values) > 1 else 0.
    return m, m - half, m + half


@block('own-data', 'docs/own_data.md')
def own_data():
    """kNN (k=10) on the target's held-out fifth per condition and budget:
    mean and 95% t interval over the seeds, and the paired adapted -
    scratch difference, whatever its sign."""
    runs = [r for _, r in records('own_data/*.json')]
    source = next(r for r in runs if r['condition'] == 'source')
    adapted = next(r for r in runs if r['condition'] == 'adapted')
    by = {
        (r['condition'], r['epochs'], r['seed']): r['metrics']['knn_k10']
        for r in runs if r['condition'] != 'source'
    }

    def cell(values, sign=''):
        m, lo, hi = t_interval(values)
        return f'{m:{sign}.2f} [{lo:{sign}.2f}, {hi:{sign}.2f}]' if len(
            values) > 1 else f'{m:{sign}.2f}'

    rows = []
    for epochs in sorted({e for _, e, _ in by}):
        seeds = sorted(
            s for c, e, s in by
            if c == 'adapted' and e == epochs and ('scratch', e, s) in by)
        if not seeds:
            continue
        a = [by['adapted', epochs, s] for s in seeds]
        c = [by['scratch', epochs, s] for s in seeds]
        line = next(r['settings'] for r in runs if r['epochs'] == epochs)
        steps = epochs * int(line.split(' epochs of ')[1].split()[0])
        rows.append((f'{epochs} ({steps} steps)', len(seeds),
                     f"{source['metrics']['knn_k10']:.2f}", cell(a), cell(c),
                     cell([x - y for x, y in zip(a, c)], '+')))
    return table(
        ('budget: epochs', 'paired seeds', 'source as it is',
         'adapted (--from)', 'scratch', 'adapted - scratch'),
        rows) + [
            '', f"kNN top-1 (%, k = 10) of the {source['num_val']:,} held-out "
            f"digits against the other {source['num_bank']:,}; mean [95% t "
            'interval] over the seeds. Raw pixels: '
            f"{source['raw_pixels']['10']:.2f}. Source: `{source['source']}`. "
            f"Commands: `{adapted['command']}` "
            "and the same without `--from` (each record's own); "
            f"the source as it is: `{source['commands'][2]}`; the source: "
            f"`{source['commands'][0]}`. "
            f"Machine: {machine(source['machine'])}, shared, commit "
            f"{source['commit']}."
        ]


# the command ----------------------------------------------------------------


def render(name):
    """(page, its text now, its text with block ``name`` generated)."""
    page, build, (begin, end) = BLOCKS[name]
    text = open(osp.join(ROOT, page)).read()
    if text.count(begin) != 1 or text.count(end) != 1:
        raise ValueError(f'{page} holds no single block {name} ({begin})')
    head, rest = text.split(begin, 1)
    if end not in rest:
        raise ValueError(f'{page}: block {name} ends before it begins')
    try:
        body = '\n'.join(build())
    except (KeyError, IndexError, TypeError) as e:
        raise ValueError(f'block {name} ({page}): a record lacks {e!r} '
                         '(the record schema: docs/speed.md#records)')
    return page, text, f'{head}{begin}\n{body}\n{end}{rest.split(end, 1)[1]}'


def stale():
    """The blocks whose page text differs from their records', by name."""
    return [name for name in BLOCKS if render(name)[1] != render(name)[2]]


def main(argv=None):
    import argparse
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        '--check',
        action='store_true',
        help='write nothing; exit 1 naming each stale block')
    args = parser.parse_args(argv)
    try:
        if args.check:
            names = stale()
            for name in names:
                print(f'stale: {BLOCKS[name][0]}, block {name} '
                      '(python .dev_scripts/generate_readme.py)')
            return 1 if names else 0
        for name in BLOCKS:
            page, old, new = render(name)
            if new != old:  # whole or not at all: beside it, then renamed
                path = osp.join(ROOT, page)
                try:
                    with open(path + '.part', 'w') as f:
                        f.write(new)
                    os.replace(path + '.part', path)
                finally:
                    if osp.exists(path + '.part'):
                        os.remove(path + '.part')
                print(f'wrote {page}: {name}')
    except (ValueError, OSError) as e:
        print(f'generate_readme.py: {e}', file=sys.stderr)
        return 2
    return 0


if __name__ == '__main__':
    sys.exit(main())
