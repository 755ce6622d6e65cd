"""Phase 1 of the Fashion-MNIST study: pretrain one run.

    python .dev_scripts/fmnist_study/pretrain.py VARIANT --seed S \
        [--epochs E] [--images N] [--minutes M]

The variant's config (plan.yml) scaled to the run by the package's one rule
(``scale_recipe``), trained through :func:`hpm_mm.apis.train` in fp32; the
same command continues it. ``--minutes``: a ``TimeLimitHook`` stops it after
the last checkpointed epoch that fits (exit 3). Record: ``RUN/pretrain.json``.
"""
import argparse
import glob
import hashlib
import json
import os
import os.path as osp
import time

from common import PLAN, ROOT, WORK, machine, run_name, save

STOPPED = 3  # the exit status of a run stopped by its time limit


def run_config(variant, seed, epochs, images):
    """The run's config and its steps."""
    from mmengine.config import Config

    from hpm_mm.engine.schedule import scale_recipe, steps_per_epoch
    cfg = Config.fromfile(osp.join(ROOT, PLAN['variants'][variant]['config']))
    loader = cfg.train_dataloader
    loader.dataset.indices = images if images < 60000 else None
    steps = steps_per_epoch(images, loader.batch_size,
                            loader.get('drop_last', False))
    scale_recipe(cfg, epochs, steps)
    cfg.randomness.seed = seed
    return cfg, epochs * steps


def pretrain(variant, seed, epochs, images, minutes=None):
    """Train (or continue) the run; its pretrain.json record."""
    from hpm_mm.apis import train
    name = run_name(variant, seed, epochs, images)
    work = osp.join(WORK, name)
    cfg, steps = run_config(variant, seed, epochs, images)
    os.makedirs(work, exist_ok=True)
    path, text = osp.join(work, 'config.py'), cfg.pretty_text
    with open(path, 'w') as f:
        f.write(text)
    record_path = osp.join(work, 'pretrain.json')
    record = json.load(open(record_path)) if osp.exists(record_path) else \
        dict(name=name, variant=variant, seed=seed, epochs=epochs,
             images_per_epoch=images, steps=steps, attempts=[])
    record['config_sha256'] = hashlib.sha256(text.encode()).hexdigest()
    if record.get('finished'):
        return record
    # evaluate.py evaluates after training: the kNN hook stays in config.py
    # (its data) but does not run
    hooks = [h for h in cfg.custom_hooks if h['type'] != 'KNNEvalHook'] + (
        [dict(type='TimeLimitHook', minutes=minutes)] if minutes else [])
    start, resume = time.time(), bool(glob.glob(osp.join(work, '*.pth')))
    runner = train(path, work, resume=resume, quiet=True, custom_hooks=hooks)
    done = runner.train_loop.epoch
    record['attempts'].append(
        dict(until_epoch=done, seconds=time.time() - start, **machine()))
    record.update(precision=runner.precision.name, finished=done == epochs)
    save(record_path, record)
    return record


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('variant', choices=list(PLAN['variants']))
    parser.add_argument('--seed', type=int, required=True)
    parser.add_argument('--epochs', type=int, default=PLAN['length']['epochs'])
    parser.add_argument('--images', type=int, default=PLAN['length']['images'])
    parser.add_argument('--minutes', type=float)
    r = pretrain(**vars(parser.parse_args(argv)))
    if r['precision'] != 'fp32':
        raise SystemExit(f"{r['name']} trained in {r['precision']}: the "
                         'study compares fp32 runs. Fix: remove its work dir '
                         'and train it from a config without an AMP wrapper.')
    if not r['finished']:
        print(f"{r['name']}: stopped for time after epoch "
              f"{r['attempts'][-1]['until_epoch']}; the same command goes on")
        raise SystemExit(STOPPED)
    print(f"{r['name']} is trained; next: python .dev_scripts/fmnist_study/"
          f"evaluate.py {r['name']}")


if __name__ == '__main__':
    main()
