"""Job 3: one condition of the study on the target folder, its record in
docs/results/own_data/NAME.json (plan.yml: the conditions).

    python .dev_scripts/own_data_study/run.py source
    python .dev_scripts/own_data_study/run.py adapted --epochs E --seed S
    python .dev_scripts/own_data_study/run.py scratch --epochs E --seed S

``source``: the source checkpoint's encoder as it is, kNN on the target's
held-out fifth (the data of the config ``pretrain_folder --from --dry-run``
writes), raw pixels beside it. ``adapted`` / ``scratch``: the user's
command, tools/pretrain_folder.py TARGET [--from SOURCE], at E epochs with
seed S; its kNN (knn.json) after training.
"""
import argparse
import json
import os.path as osp
import shutil
import subprocess
import time

from common import (PLAN, PY, ROOT, TARGET, WORK, machine, save,
                    source_checkpoint)


def name_of(condition, epochs=None, seed=None):
    return 'source' if condition == 'source' else \
        f'{condition}_{epochs}e_seed{seed}'


def rel(path):
    return osp.relpath(path, ROOT) if path.startswith(ROOT) else path


def tool(args):
    """Run tools/pretrain_folder.py ``args``: (its stdout, seconds)."""
    start = time.time()
    proc = subprocess.run([PY, 'tools/pretrain_folder.py', *args],
                          cwd=ROOT,
                          capture_output=True,
                          text=True)
    if proc.returncode:
        raise SystemExit(f'pretrain_folder.py {" ".join(args)} failed:\n'
                         f'{proc.stderr[-3000:]}')
    return proc.stdout, time.time() - start


def settings_line(out):
    return next(x for x in out.splitlines() if ' images, ' in x)


def run(condition, epochs=None, seed=None):
    src = source_checkpoint()
    assert src or condition == 'scratch', \
        'the source is not trained yet: run source.py first'
    name = name_of(condition, epochs, seed)
    work = osp.join(WORK, 'runs', name)  # (never the source's own)
    shutil.rmtree(work, ignore_errors=True)  # a stopped run starts again
    record = dict(
        name=name,
        condition=condition,
        what=PLAN['conditions'][condition],
        target=f"{PLAN['target']['package']} (npm), the first "
        f"{PLAN['target']['per_class']} of each digit",
        source=src and rel(src),
        epochs=epochs,
        seed=seed,
        machine=machine())
    if condition == 'source':
        from hpm_mm.apis import knn_eval
        args = [TARGET, '--from', src, '--work-dir', work, '--dry-run']
        out, _ = tool(args)
        config = osp.join(work, 'hpm_folder.py')
        start = time.time()
        knn = knn_eval(config, src)
        from source import command  # the source's training
        record.update(
            commands=[
                ' '.join(map(rel, ['python'] + command()[1:])),
                'python tools/pretrain_folder.py ' + ' '.join(map(rel, args)),
                f'python tools/analysis_tools/knn_eval.py {rel(config)} '
                f'{rel(src)}'
            ],
            settings=settings_line(out),
            knn={
                str(k): v
                for k, v in knn['acc'].items()
            },
            raw_pixels={
                str(k): v
                for k, v in knn_eval(config, raw_pixels=True)['acc'].items()
            },
            eval_seconds=time.time() - start)
    else:
        args = [TARGET, '--work-dir', work, '--epochs',
                str(epochs)
                ] + (['--from', src] if condition == 'adapted' else
                     []) + ['--cfg-options', f'randomness.seed={seed}']
        out, seconds = tool(args)
        knn = json.load(open(osp.join(work, 'knn.json')))
        record.update(
            command='python tools/pretrain_folder.py ' +
            ' '.join(map(rel, args)),
            settings=settings_line(out),
            knn={
                str(k): v
                for k, v in knn['acc'].items()
            },
            seconds=seconds)
    record.update(
        num_bank=knn['num_train'],
        num_val=knn['num_val'],
        metrics=dict(knn_k10=record['knn']['10']))
    save(name, record)
    return record


if __name__ == '__main__':
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('condition', choices=list(PLAN['conditions']))
    parser.add_argument('--epochs', type=int)
    parser.add_argument('--seed', type=int)
    args = parser.parse_args()
    run(args.condition, args.epochs, args.seed)
