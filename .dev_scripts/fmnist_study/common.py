"""What the study's phases share: the plan, the paths, the records."""
import glob
import json
import os
import os.path as osp
import subprocess
import sys
import time

import yaml

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
RESULTS = osp.join(ROOT, 'docs', 'results', 'fmnist_study')
WORK = osp.join(ROOT, 'work_dirs', 'fmnist_study')
PLAN = yaml.safe_load(open(osp.join(osp.dirname(__file__), 'plan.yml')))
sys.path.insert(0, osp.dirname(osp.dirname(osp.abspath(__file__))))
from machine import record as machine  # noqa: E402, F401  (the phases')


def run_name(variant, seed, epochs=None, images=None):
    """``hpm_100e_10k_seed0``; ``scratch_seed0`` (fine-tunes only)."""
    if variant == 'scratch':
        return f'scratch_seed{seed}'
    epochs, images = epochs or PLAN['length']['epochs'], \
        images or PLAN['length']['images']
    return f'{variant}_{epochs}e_{images // 1000}k_seed{seed}'


def save(path, record):
    commit = subprocess.run(['git', 'rev-parse', '--short', 'HEAD'],
                            cwd=ROOT,
                            capture_output=True,
                            text=True).stdout.strip()
    record.update(commit=commit or None, date=time.strftime('%Y-%m-%d %H:%M'))
    os.makedirs(osp.dirname(path), exist_ok=True)
    with open(path, 'w') as f:
        json.dump(record, f, indent=1)
    print(f'wrote {osp.relpath(path, ROOT)}')


def load_records(results=RESULTS):
    """The committed runs by name (not the linear_check_* side records)."""
    records = [
        json.load(open(p))
        for p in sorted(glob.glob(osp.join(results, '*.json')))
    ]
    return {r['name']: r for r in records if 'variant' in r}
