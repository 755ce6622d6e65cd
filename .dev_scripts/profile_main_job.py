"""Where the main job's time goes, and what each speed lever buys, side by
side in one process on this machine.

    python .dev_scripts/profile_main_job.py [--steps 4] [--rounds 2]
        [--no-compile] [--out docs/results/profile_main_job_<cpu>.json]

Everything is the training step of faithful HPM on Fashion-MNIST (its
config, 28 px, batch 256, the teacher scoring as in epochs 2-10)
built with the same seed and timed on the same batch: the median of
``--steps`` steps after a warm-up step, each variant measured in each of
``--rounds`` rounds (interleaved, so a slow spell of the machine hits all
of them) and the median of the rounds kept. Printed and written:

- **sections** of the fp32 step (hooks on the real modules): the data
  preprocessor, the EMA teacher (update + its one scoring pass), the mask,
  the student encoder, the reconstructor and the loss-predictor trunks, the
  head (losses), the backward and the optimizer step (clipping + AdamW);
- **levers** that keep the arithmetic (fp32), each against that step:
  attention by mmpretrain's matmul fallback instead of fused SDPA; q/k/v
  by indexing (mmpretrain's own forward) instead of ``unbind``
  (:class:`hpm_mm.models.utils.UnbindQKVAttention`); AdamW ``fused=True``; one
  torch thread instead of two; regional ``torch.compile`` of every
  transformer block (its compile time too);
- **precision**: the step under bf16 autocast (the runner's rule times the
  same comparison on the run's own step: :mod:`hpm_mm.engine.precision`);
- **design options** (they change what is computed): the main job's fast
  settings (half-resolution teacher + 1-block loss predictor) and each
  alone, the 32 px inputs of the design before (8 x 8 patches of resized
  images), and the MAE twin at 28 and 32 px;
- **dataloader workers**: steps fed by the config's real dataloader
  (Fashion-MNIST, its augmentation) with 2, 1 and 0 worker processes beside
  the step's two torch threads (on 2 cores, workers and threads share them);
- the data pipeline of one training batch and the kNN encoder forward of
  500 images.

The estimate at the end multiplies the main job's step counts out.
"""
import argparse
import copy
import json
import os.path as osp
import statistics
import sys
import time
from contextlib import contextmanager

import torch

sys.path.insert(0, osp.dirname(osp.abspath(__file__)))  # benchmark_step

CONFIG = 'configs/hpm/hpm_vit-mini-p4_1xb256-coslr-10e_fmnist.py'
FAST_CONFIG = ('configs/hpm/fast/'
               'hpm-fast_vit-mini-p4_1xb256-coslr-10e_fmnist.py')
MAE_CONFIG = 'configs/hpm/ablations/mae_vit-mini-p4_1xb256-coslr-10e_fmnist.py'
BATCH = 256


def resize(cfg, size):
    """The config's model for ``size``-px inputs (patch 4)."""
    cfg.model.backbone.img_size = size
    cfg.model.neck.num_patches = (size // 4)**2


# name -> (what, config changes); all fp32
LEVERS = {
    'attention_matmul': 'attention by matmul + softmax (mmpretrain\'s '
    'fallback) instead of fused SDPA',
    'qkv_indexed': "q, k, v indexed (mmpretrain's forward) instead of "
    'unbound',
    'adamw_fused': 'AdamW fused=True',
    'threads_1': 'one torch thread instead of two',
    'compile_blocks': 'torch.compile of every transformer block',
    'bf16_autocast': 'bf16 autocast (the --amp of native-bf16 CPUs)',
}
DESIGNS = {
    'main_job_fast':
    (FAST_CONFIG, {}, 'the main job: half-resolution teacher + 1-block loss '
     'predictor'),
    'halfres_teacher':
    (CONFIG, dict(input_scale=0.5), 'teacher on the half-resolution image'),
    'predictor_1block':
    (CONFIG, dict(predictor_depth=1), '1-block loss predictor'),
    '32px': (CONFIG, dict(size=32), '32 px inputs (8 x 8 patches, the '
             'design before: 28 px resized)'),
    'mae': (MAE_CONFIG, {}, 'the MAE twin'),
    'mae_32px': (MAE_CONFIG, dict(size=32), 'the MAE twin at 32 px'),
}


@contextmanager
def lever(name, model):
    """Apply one lever for the duration of the block."""
    from mmpretrain.models.utils import attention
    mha = attention.MultiheadAttention
    saved_threads = torch.get_num_threads()
    undo = []
    if name == 'attention_matmul':
        for m in model.modules():
            if isinstance(m, mha):
                undo.append((m, m.scaled_dot_product_attention))
                m.scaled_dot_product_attention = \
                    attention.scaled_dot_product_attention_pyimpl
    elif name == 'qkv_indexed':  # hpm_mm's attention back to mmpretrain's
        from hpm_mm.models.utils import UnbindQKVAttention
        swapped = [m for m in model.modules() if type(m) is UnbindQKVAttention]
        for m in swapped:
            m.__class__ = mha
    elif name == 'threads_1':
        torch.set_num_threads(1)
    try:
        yield
    finally:
        for m, fn in undo:
            m.scaled_dot_product_attention = fn
        if name == 'qkv_indexed':
            for m in swapped:
                m.__class__ = UnbindQKVAttention
        torch.set_num_threads(saved_threads)


def build(config,
          size=None,
          input_scale=None,
          predictor_depth=None,
          fused=False,
          amp=False):
    """(model, optimizer wrapper, batch) of the config, seed 0."""
    from mmengine.config import Config
    from mmengine.optim import build_optim_wrapper
    from mmpretrain.structures import DataSample

    from hpm_mm.apis import load_model
    from hpm_mm.engine.precision import Precision, optim_wrapper_cfg
    cfg = Config.fromfile(config)
    if size is not None:
        resize(cfg, size)
    size = cfg.model.backbone.img_size
    if input_scale is not None:
        cfg.model.teacher.input_scale = input_scale
    if predictor_depth is not None:
        cfg.model.neck.predictor_depth = predictor_depth
    if fused:
        cfg.optim_wrapper.optimizer.fused = True
    torch.manual_seed(0)
    model = load_model(cfg).train()  # a training step
    if hasattr(model, 'set_progress'):
        # alpha 0.25: the teacher scores; no optimizer-step count, so the
        # teacher follows the student every step, as in training
        model.set_progress(0.5, 5, max_epochs=10)
    optim = cfg.optim_wrapper
    if amp:
        optim = optim_wrapper_cfg(
            optim, Precision('bf16', torch.bfloat16, 'cpu', '-', 'bench'))
    wrapper = build_optim_wrapper(model, optim)
    batch = dict(
        inputs=torch.randint(
            0, 255, (BATCH, 1, size, size), dtype=torch.uint8),
        data_samples=[DataSample() for _ in range(BATCH)])
    return model, wrapper, batch


def median_step(model, wrapper, batch, steps):
    model.train_step(copy.copy(batch), wrapper)  # warm-up
    times = []
    for _ in range(steps):
        t = time.perf_counter()
        model.train_step(copy.copy(batch), wrapper)
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def hpm_sections(model, wrapper, timer):
    """Time the named sections of an HPM step on the real modules (method
    wrappers of ``benchmark_step.Timer``); returns the undo callables."""
    undo = [
        timer.wrap(model.data_preprocessor, 'forward', 'data_preprocessor')
    ]
    if model.teacher is not None:
        undo += [
            timer.wrap(model.teacher, 'update', 'teacher_update'),
            timer.wrap(model.teacher, 'forward', 'teacher_pass')
        ]
    undo += [
        timer.wrap(model.mask_generator, 'forward', 'mask'),
        timer.wrap(model.backbone, 'forward', 'student_encoder'),
        timer.wrap(model.neck, 'reconstruct', 'reconstructor')
    ]
    if model.neck.with_predictor:
        undo.append(
            timer.wrap(model.neck.predictor, 'forward', 'loss_predictor'))
    undo += [
        timer.wrap(model.head, 'loss', 'head_losses'),
        timer.wrap(wrapper, 'backward', 'backward'),
        timer.wrap(wrapper, 'step', 'optimizer_step')
    ]
    return undo


def profile_sections(steps):
    """Median seconds per step of each section, the step and the rest."""
    from benchmark_step import DeviceOps, Timer
    model, wrapper, batch = build(CONFIG)
    model.train_step(copy.copy(batch), wrapper)
    timer = Timer(DeviceOps('cpu'))
    undo = hpm_sections(model, wrapper, timer)
    for _ in range(steps):
        with timer.section('step'):
            model.train_step(copy.copy(batch), wrapper)
    for u in undo:
        u()
    out = {k: statistics.median(v) for k, v in timer.times.items()}
    out['rest'] = out['step'] - sum(v for k, v in out.items() if k != 'step')
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--steps', type=int, default=4)
    parser.add_argument('--rounds', type=int, default=2)
    parser.add_argument(
        '--no-compile',
        action='store_true',
        help='skip the torch.compile lever (~1 min compile)')
    parser.add_argument('--out')
    args = parser.parse_args(argv)
    from mmengine.logging import MMLogger
    from mmengine.registry import init_default_scope

    import hpm_mm  # noqa: F401
    from hpm_mm.engine.precision import cpu_class
    init_default_scope('mmpretrain')
    MMLogger.get_instance('profile_main_job', log_level='WARNING')
    res = dict(
        cpu_class=cpu_class(),
        threads=torch.get_num_threads(),
        torch=torch.__version__,
        batch=BATCH,
        steps=args.steps,
        rounds=args.rounds)
    print(f'CPU {res["cpu_class"]}, torch {torch.__version__}, '
          f'{res["threads"]} threads; batch {BATCH}; median of '
          f'{args.steps} steps, median of {args.rounds} rounds')

    res['sections'] = profile_sections(args.steps)

    runs = ['baseline'] + [
        n for n in LEVERS if not (n == 'compile_blocks' and args.no_compile)
    ]
    runs += list(DESIGNS)
    times = {name: [] for name in runs}
    compile_s = None
    for _ in range(args.rounds):
        for name in runs:
            if name in DESIGNS:
                config, kwargs, _ = DESIGNS[name]
                model, wrapper, batch = build(config, **kwargs)
            else:
                model, wrapper, batch = build(
                    CONFIG,
                    fused=name == 'adamw_fused',
                    amp=name == 'bf16_autocast')
            if name == 'compile_blocks':
                blocks = [
                    m for m in model.modules()
                    if type(m).__name__ == 'TransformerEncoderLayer'
                ]
                for m in blocks:
                    m.compile(dynamic=False)
                t = time.perf_counter()
                model.train_step(copy.copy(batch), wrapper)
                if compile_s is None:  # later rounds hit the cache
                    compile_s = time.perf_counter() - t
            # bf16 on a CPU without it is an order of magnitude slower:
            # one timed step tells
            steps = 1 if name == 'bf16_autocast' and cpu_class() not in (
                'AVX512-BF16', 'AMX') else args.steps
            with lever(name, model):
                times[name].append(median_step(model, wrapper, batch, steps))
            del model, wrapper
    base = statistics.median(times['baseline'])
    res['baseline_step'] = base
    res['levers'] = {
        n:
        dict(
            what=LEVERS[n],
            step=statistics.median(times[n]),
            ratio=statistics.median(times[n]) / base)
        for n in LEVERS if n in times
    }
    if compile_s is not None:
        res['levers']['compile_blocks']['first_step_with_compile_s'] = \
            compile_s
    res['designs'] = {
        n:
        dict(
            what=DESIGNS[n][2],
            step=statistics.median(times[n]),
            ratio=statistics.median(times[n]) / base)
        for n in DESIGNS
    }

    # data pipeline, dataloader workers and kNN forward
    from mmengine.config import Config
    from mmengine.runner import Runner
    res['workers'] = {}
    for _ in range(args.rounds):
        for workers in (2, 1, 0):
            model, wrapper, _ = build(CONFIG)
            loader = Runner.build_dataloader(
                dict(
                    Config.fromfile(CONFIG).train_dataloader,
                    num_workers=workers,
                    persistent_workers=workers > 0),
                seed=0)
            it = iter(loader)
            # warm-up: past the batches the workers prefetched at the start
            # (prefetch_factor 2 each), so the timed steps wait for workers
            # that run beside them, as in a run
            for _ in range(2 * workers + 1):
                model.train_step(next(it), wrapper)
            t = time.perf_counter()
            for _ in range(args.steps):
                model.train_step(next(it), wrapper)
            res['workers'].setdefault(str(workers), []).append(
                (time.perf_counter() - t) / args.steps)
            del it, loader, model, wrapper
    res['workers'] = {
        k: statistics.median(v)
        for k, v in res['workers'].items()
    }

    from hpm_mm.apis import load_model
    cfg = Config.fromfile(CONFIG)
    loader = Runner.build_dataloader(
        dict(cfg.train_dataloader, num_workers=0, persistent_workers=False),
        seed=0)
    it = iter(loader)
    next(it)
    t = time.perf_counter()
    for _ in range(args.steps):
        next(it)
    res['pipeline_train_batch'] = (time.perf_counter() - t) / args.steps
    for size in (28, 32):
        c = Config.fromfile(CONFIG)
        resize(c, size)
        model = load_model(c).eval()
        x = torch.randn(500, 1, size, size)
        with torch.no_grad():
            model.extract_feat(x)
            t = time.perf_counter()
            for _ in range(args.steps):
                model.extract_feat(x)
        res[f'knn_forward_500_{size}px'] = (time.perf_counter() - t) / \
            args.steps

    print('\nsections of the fp32 step (s):')
    for k, v in res['sections'].items():
        print(f'  {k:20s} {v:7.3f}')
    print(f'\nlevers (fp32 unless named), step / the main job\'s step '
          f'({base:.3f} s):')
    for n, r in res['levers'].items():
        first = r.get('first_step_with_compile_s')
        extra = f'  (first step incl. compile {first:.0f} s)' if first else ''
        print(f'  {n:20s} {r["step"]:7.3f} s  {r["ratio"]:.2f}x  '
              f'{r["what"]}{extra}')
    print('\ndesign options (change what is computed):')
    for n, r in res['designs'].items():
        print(f'  {n:20s} {r["step"]:7.3f} s  {r["ratio"]:.2f}x  '
              f'{r["what"]}')
    print('\ndataloader workers beside the step (steps fed by the real '
          'loader): ' + ', '.join(f'{k}: {v:.3f} s'
                                  for k, v in res['workers'].items()))
    print(f'\ndata pipeline, one batch (main process): '
          f'{res["pipeline_train_batch"]:.3f} s; kNN forward of 500 images: '
          f'{res["knn_forward_500_28px"]:.3f} s (28 px), '
          f'{res["knn_forward_500_32px"]:.3f} s (32 px)')
    # 400 steps (40 per epoch), the teacher counted in every step (an upper
    # bound: epoch 1 has none), kNN over 70k images
    for name, step, px in (('faithful HPM (28 px)', base,
                            28), ('the main job (fast settings, 28 px)',
                                  res['designs']['main_job_fast']['step'], 28),
                           ('faithful HPM at 32 px',
                            res['designs']['32px']['step'], 32)):
        knn = 140 * res[f'knn_forward_500_{px}px']
        print(f'estimate, {name}: 400 steps ~{400 * step / 60:.1f} min + '
              f'kNN forward ~{knn / 60:.1f} min')
    if args.out:
        with open(args.out, 'w') as f:
            json.dump(res, f, indent=2)
    return res


if __name__ == '__main__':
    main()
