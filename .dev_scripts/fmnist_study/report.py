"""Phase 3 of the Fashion-MNIST study: tables and figure from the jsons.

    python .dev_scripts/fmnist_study/report.py

From ``docs/results/fmnist_study/*.json`` alone: the marked section of
docs/study.md and docs/images/fmnist_study.png (the plotted numbers ride in
its ``Description``); then what the plan still lacks.
"""
import json
import math
import os.path as osp
import statistics

from common import PLAN, RESULTS, ROOT, load_records, run_name

DOC = osp.join(ROOT, 'docs', 'study.md')
FIGURE = osp.join(ROOT, 'docs', 'images', 'fmnist_study.png')
MARKS = ('<!-- study report: begin -->', '<!-- study report: end -->')
PROTOCOLS = list(PLAN['protocols'].items())
TIMES = ('train_seconds', 'eval_seconds', 'finetune_seconds')


def ci(values):
    """Mean and half-width of the 95% t interval (None for one value)."""
    from scipy.stats import t
    m, n = statistics.mean(values), len(values)
    half = t.ppf(.975, n - 1) * statistics.stdev(values) / math.sqrt(n) \
        if n > 1 else None
    return m, half


def fmt(values):
    m, half = ci(values) if values else (None, None)
    return '-' if m is None else f'{m:.2f}' + (
        f' ± {half:.2f}' if half is not None else '')


def figure_data(records):
    """Per protocol: each run's [seed, value] by variant (at the plan's
    length, and scratch); each contrast's [seed, difference], mean and
    95% half-width."""
    runs, data, length = {}, {}, tuple(PLAN['length'].values())
    for r in records.values():
        if r['variant'] == 'scratch' or \
                (r['epochs'], r['images_per_epoch']) == length:
            runs.setdefault(r['variant'], {})[r['seed']] = r['metrics']
    for key, title in PROTOCOLS:
        d = data[title] = dict(runs={}, contrasts={})
        for v, seeds in runs.items():
            pts = [[s, m[key]] for s, m in sorted(seeds.items()) if key in m]
            d['runs'].update({v: pts} if pts else {})
        for a, b in PLAN['contrasts']:
            A, B = runs.get(a, {}), runs.get(b, {})
            diffs = [[s, A[s][key] - B[s][key]] for s in sorted(A)
                     if s in B and key in A[s] and key in B[s]]
            if diffs:
                m, half = ci([x for _, x in diffs])
                d['contrasts'][f'{a} - {b}'] = dict(
                    diffs=diffs, mean=m, half=half)
    return data


def draw(data, path):
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    titles = [t for t in data if data[t]['runs']]
    fig, axes = plt.subplots(2, len(titles), figsize=(2.2 * len(titles), 5.2))
    ticks, bar = dict(rotation=60, fontsize=7), dict(fmt='s', capsize=3)
    for (top, bottom), title in zip(axes.T, titles):
        runs, contrasts = data[title]['runs'], data[title]['contrasts']
        for x, v in enumerate(sorted(runs)):
            top.plot([x] * len(runs[v]), [y for _, y in runs[v]], 'o')
        top.set_xticks(range(len(runs)), sorted(runs), **ticks)
        top.set_title(title, fontsize=9)
        for x, d in enumerate(contrasts.values()):
            bottom.plot([x] * len(d['diffs']), [y for _, y in d['diffs']], '.')
            bottom.errorbar(x + .15, d['mean'], d['half'] or 0, **bar)
        bottom.axhline(0, color='k', lw=.8)
        bottom.set_xticks(range(len(contrasts)), list(contrasts), **ticks)
    axes[0][0].set_ylabel('top-1 (%), one point per run')
    axes[1][0].set_ylabel('paired difference\n(mean, 95% interval)')
    length = PLAN['length']
    fig.suptitle(f"Fashion-MNIST, {length['epochs']} epochs of "
                 f"{length['images']} images: runs and paired contrasts")
    fig.tight_layout()
    meta = dict(Description=json.dumps(data, sort_keys=True))
    fig.savefig(path, dpi=90, metadata=meta)
    plt.close(fig)


def cell(values):
    return fmt(values) + (' (' + ', '.join(f'{x:+.2f}' for x in values) +
                          ')' if values else '')


def reading(contrast, data):
    """The study's rule on one contrast: where each interval lies."""
    where = dict(above=[], below=[], containing=[])
    for _, title in PROTOCOLS:
        d = data[title]['contrasts'].get(contrast)
        if d and d['half'] is not None:
            lo, hi = d['mean'] - d['half'], d['mean'] + d['half']
            side = 'above' if lo > 0 else 'below' if hi < 0 else 'containing'
            where[side].append(f'{title} [{lo:+.2f}, {hi:+.2f}]')
    return f'- {contrast}: 95% interval ' + '; '.join(
        f"{k} 0 on {', '.join(v) or 'none'}"
        for k, v in where.items()) + '.' if any(where.values()) else None


def tables(records):
    runs = sorted(
        records.values(),
        key=lambda r:
        (r['variant'] == 'scratch', r.get('epochs', 0), r['name']))
    data = figure_data(records)
    head = '| {} | ' + ' | '.join(t for _, t in PROTOCOLS) + ' |'
    rule = '|' + '---|' * (len(PROTOCOLS) + 1)
    cpus = ', '.join(sorted({r['machine']['cpu_class'] for r in runs}))
    lines = [
        f"Per run (CPU class {cpus}, 2 cores, fp32; the predictor's rank_acc"
        " and the teacher's Spearman at the end; minutes of training / "
        'evaluation / fine-tunes):', '',
        head.format('run') + ' rank_acc | Spearman | minutes |',
        rule + '---|---|---|'
    ]
    for r in runs:
        m, p = r['metrics'], r.get('pretrain_end', {})
        cells = [f'{m[k]:.2f}' if k in m else '-' for k, _ in PROTOCOLS]
        cells += [
            f'{p[k]:.3f}' if k in p else '-' for k in ('rank_acc', 'spearman')
        ]
        cells.append(' / '.join('-' if r.get(k) is None else f'{r[k] / 60:.0f}'
                                for k in TIMES))
        lines.append(f"| {r['name']} | " + ' | '.join(cells) + ' |')
    lines += [
        '', f"At {PLAN['length']['epochs']} epochs: mean ± 95% t "
        'interval over seeds:', '',
        head.format('variant (seeds)'), rule
    ]
    for v in dict.fromkeys(v for _, t in PROTOCOLS for v in data[t]['runs']):
        runs_v = [data[t]['runs'].get(v, []) for _, t in PROTOCOLS]
        seeds = {s for pts in runs_v for s, _ in pts}
        lines.append(f'| {v} ({len(seeds)}) | ' +
                     ' | '.join(fmt([y for _, y in pts])
                                for pts in runs_v) + ' |')
    lines += [
        '', 'Paired by seed: mean ± 95% interval of the per-seed '
        'differences (each in brackets):', '',
        head.format('contrast'), rule
    ]
    contrasts = [f'{a} - {b}' for a, b in PLAN['contrasts']]
    for c in contrasts:
        lines.append(f'| {c} | ' + ' | '.join(
            cell([
                y for _, y in data[t]['contrasts'].get(c, {}).get('diffs', [])
            ]) for _, t in PROTOCOLS) + ' |')
    read = [r for r in (reading(c, data) for c in contrasts) if r]
    return '\n'.join(lines + (
        ['', 'Read by the rule (protocols with two '
         'pairs or more):', ''] + read if read else []))


def todo(records):
    """The plan's runs without a json, in the order to run them: seed by
    seed (the variants, then scratch), then the optional ones."""
    v = PLAN['variants']
    each = [n for n in v if 'optional_seeds' not in v[n]] + ['scratch']
    names = [run_name(n, s) for s in PLAN['seeds'] for n in each]
    names += [
        run_name(n, s) for n in v for s in v[n].get('optional_seeds', ())
    ]
    return [n for n in names if n not in records]


def main(results=RESULTS, doc=DOC, figure=FIGURE):
    records = load_records(results)
    head, rest = open(doc).read().split(MARKS[0], 1)
    with open(doc, 'w') as f:
        f.write(f'{head}{MARKS[0]}\n{tables(records)}\n{MARKS[1]}'
                f'{rest.split(MARKS[1], 1)[1]}')
    draw(figure_data(records), figure)
    print(f'wrote {osp.relpath(doc, ROOT)} and {osp.relpath(figure, ROOT)}')
    left = ', '.join(todo(records))
    print(f'not run yet: {left}' if left else 'the plan is complete')


if __name__ == '__main__':
    import argparse
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()
    main()
