"""Job 2: the source model, the main job's run on Fashion-MNIST (plan.yml
``source``: its config and arguments), into WORK/source, until the
checkpoint the study uses exists; the same command continues a stopped run.

    python .dev_scripts/own_data_study/source.py
"""
import os
import subprocess
import time

from common import PLAN, PY, ROOT, SOURCE, source_checkpoint


def command(resume=False):
    return [
        PY, 'tools/train.py', PLAN['source']['config'], '--work-dir', SOURCE,
        *PLAN['source']['args']
    ] + (['--resume'] if resume else [])


def train_source():
    if source_checkpoint() is None:  # (a stopped run goes on)
        resume = os.path.isdir(SOURCE) and bool(os.listdir(SOURCE))
        proc = subprocess.Popen(command(resume), cwd=ROOT)
        while proc.poll() is None and source_checkpoint() is None:
            time.sleep(10)
        if proc.poll() is None:  # the study's checkpoint is written
            proc.terminate()
            proc.wait()
        elif source_checkpoint() is None:
            raise SystemExit(f'the source run failed ({proc.returncode})')
    return source_checkpoint()


if __name__ == '__main__':
    import argparse
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()
    print(train_source())
