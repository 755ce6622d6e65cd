"""The whole study, job by job, each skipped once its record exists:
prepare the target, train the source, then every condition of plan.yml
(budgets x seeds, paired), niced where it is run.

    nohup nice -n 10 python .dev_scripts/own_data_study/study.py [COND ...] &

``COND ...``: only those conditions' jobs (``scratch`` needs no source).
"""
import os.path as osp

from common import PLAN, RESULTS
from prepare import prepare
from run import name_of, run
from source import train_source


def jobs():
    yield 'source', None, None
    for epochs in PLAN['budgets']:
        for seed in PLAN['seeds']:
            for condition in ('adapted', 'scratch'):
                yield condition, epochs, seed


if __name__ == '__main__':
    import argparse
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        'only',
        nargs='*',
        help=f"only these of {', '.join(PLAN['conditions'])} now (scratch "
        'needs no source)')
    only = parser.parse_args().only
    if set(only) - set(PLAN['conditions']):
        parser.error(f'{only}: conditions are {list(PLAN["conditions"])}')
    prepare()
    if not only:
        train_source()
    for condition, epochs, seed in jobs():
        if only and condition not in only:
            continue
        if not osp.exists(
                osp.join(RESULTS, f'{name_of(condition, epochs, seed)}.json')):
            run(condition, epochs, seed)
