"""What the study's jobs share: the plan, the paths, the machine, a record."""
import json
import os
import os.path as osp
import subprocess
import sys
import time

import yaml

ROOT = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
PLAN = yaml.safe_load(open(osp.join(osp.dirname(__file__), 'plan.yml')))
RESULTS = osp.join(ROOT, 'docs', 'results', 'own_data')
#: work dirs and the target folder (never committed); OWN_DATA_WORK moves them
WORK = os.environ.get('OWN_DATA_WORK') or osp.join(ROOT, 'work_dirs',
                                                   'own_data_study')
TARGET = osp.join(WORK, PLAN['target']['folder'])
SOURCE = osp.join(WORK, 'source')
PY = sys.executable
sys.path.insert(0, osp.dirname(osp.dirname(osp.abspath(__file__))))
from machine import cpu_class, gemm_gflops, record  # noqa: E402


def source_checkpoint():
    """The source run's checkpoint of plan.yml ``source.epoch``, or its last
    one (None before it is written)."""
    if PLAN['source'].get('epoch'):
        path = osp.join(SOURCE, f"epoch_{PLAN['source']['epoch']}.pth")
        return path if osp.exists(path) else None
    pointer = osp.join(SOURCE, 'last_checkpoint')
    if not osp.exists(osp.join(SOURCE, 'knn.json')) or not osp.exists(pointer):
        return None
    return open(pointer).read().strip()


def machine():
    """The CPU class (torch's and lscpu's flags), threads, fp32 GFLOP/s."""
    try:
        flags = subprocess.run(['lscpu'], capture_output=True,
                               text=True).stdout.split('Flags:')[-1].split()
    except OSError:
        flags = []
    return dict(
        record(),
        cpu_flags=[
            f for f in ('avx2', 'avx512f', 'avx512_bf16', 'amx_tile')
            if f in flags
        ],
        fp32_gemm_gflops=gemm_gflops(),
        load=f'load average {os.getloadavg()[0]:.1f} at the start',  # shared
        cpu_class=cpu_class())


def save(name, record):
    """``docs/results/own_data/NAME.json`` with the commit and date."""
    commit = subprocess.run(['git', 'rev-parse', '--short', 'HEAD'],
                            cwd=ROOT,
                            capture_output=True,
                            text=True).stdout.strip()
    record.update(commit=commit, date=time.strftime('%Y-%m-%d %H:%M'))
    os.makedirs(RESULTS, exist_ok=True)
    path = osp.join(RESULTS, f'{name}.json')
    with open(path, 'w') as f:
        json.dump(record, f, indent=1)
    print(f'wrote {osp.relpath(path, ROOT)}', flush=True)
