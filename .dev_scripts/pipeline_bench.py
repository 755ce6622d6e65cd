"""The ImageNet pretraining input pipeline, mmpretrain's against hpm_mm's:
images/s per core, the transforms' shares, and the real dataloader.

    python .dev_scripts/pipeline_bench.py [--images 300] [--workers 1 2] \
        [--config CONFIG] [--data DIR] [--device-decode [--device cuda]] \
        [--step mae fast [--step-arch b] [--step-batch 256] \
         [--step-workers 8]] [--out FILE.json]
    python .dev_scripts/pipeline_bench.py --own-loader CONFIG \
        [--workers 1 2] [--cfg-options KEY=VALUE ...]

Over generated ImageNet-like JPEGs (:func:`make_images`, kept in
``--data``): each transform timed alone, the dataloader per ``--workers``,
the cores one GPU needs at the H200's step rates; ``--step``: bench_step's
bf16 steps fed by each real dataloader beside the same step on tensors;
``--own-loader``: a config's own ``train_dataloader``, timed alike."""
import argparse
import copy
import json
import os
import os.path as osp
import statistics
import sys
import time

import numpy as np

ROOT = osp.dirname(osp.dirname(osp.abspath(__file__)))
CONFIG = 'configs/hpm/hpm_vit-base-p16_8xb512-amp-coslr-200e_in1k.py'
#: mmpretrain's MAE ImageNet data (its train pipeline is the baseline)
MMPRETRAIN = 'mmpretrain::_base_/datasets/imagenet_bs512_mae.py'
#: the GPU-decode data (its worker half: bytes, header, box and flip)
DEVICE_DECODE = 'configs/_base_/datasets/imagenet_bs512_mae_gpu_decode.py'
GPU_RATES = {
    'HPM faithful, H200 bf16 b256': 1598,
    'HPM fast, H200 bf16 b256': 2587,
    'MAE, H200 bf16 b256': 3274,
    'target (#56)': 3500,
}


def make_images(root, n, seed=0):
    """``n`` ImageNet-like JPEGs in ``root`` (made once, then reused): 85%
    of 300-520 px, 15% of 800-2,100 px, quality 75-95, 2% grayscale, 1%
    CMYK; a photo's bits per pixel."""
    from PIL import Image
    os.makedirs(root, exist_ok=True)
    have = sorted(f for f in os.listdir(root) if f.endswith('.JPEG'))
    if len(have) >= n:
        return have[:n]
    rng = np.random.default_rng(seed)
    aspects = [(4, 3), (3, 4), (1, 1), (16, 9), (3, 2)]
    names = []
    for i in range(n):
        long_side = int(
            rng.integers(300, 521) if rng.random() <
            .85 else rng.integers(800, 2101))
        a, b = aspects[rng.choice(5, p=[.5, .2, .15, .1, .05])]
        w, h = (long_side, long_side * b // a) if a >= b else \
            (long_side * a // b, long_side)
        # a smooth field (low-res noise upsampled), edges, grain
        low = rng.random((max(2, h // 40), max(2, w // 40), 3)) * 255
        img = Image.fromarray(low.astype(np.uint8)).resize((w, h),
                                                           Image.BICUBIC)
        arr = np.asarray(img).astype(np.int16)
        for _ in range(6):
            y0, x0 = rng.integers(0, h), rng.integers(0, w)
            arr[y0:y0 + h // 4, x0:x0 + w // 5] += rng.integers(-60, 60, 3)
        arr += rng.normal(0, 4, arr.shape).astype(np.int16)
        img = Image.fromarray(arr.clip(0, 255).astype(np.uint8))
        kind = rng.random()
        if kind < .02:
            img = img.convert('L')
        elif kind < .03:
            img = img.convert('CMYK')
        name = f'img_{i:05d}.JPEG'
        img.save(osp.join(root, name), quality=int(rng.integers(75, 96)))
        names.append(name)
    return names


def per_transform(pipeline, files, passes=2):
    """Seconds per image of each transform, in one process."""
    from mmengine.registry import TRANSFORMS
    steps = [TRANSFORMS.build(copy.deepcopy(t)) for t in pipeline]
    times = [0.] * len(steps)
    n = 0
    for p in range(passes):
        np.random.seed(p)
        for f in files:
            results = dict(img_path=f, sample_idx=0)
            for i, step in enumerate(steps):
                t = time.perf_counter()
                results = step(results)
                times[i] += time.perf_counter() - t
            n += 1
    return {f"{i}:{t['type']}": times[i] / n for i, t in enumerate(pipeline)}


def jpeg_loader(cfg, pipeline, root, batch=64):
    """The config's train dataloader over the JPEGs of ``root`` through
    ``pipeline``."""
    loader = copy.deepcopy(cfg.train_dataloader)
    if pipeline[0]['type'] == 'LoadBytesAndCropBox':  # bytes of any length
        loader['collate_fn'] = dict(type='pseudo_collate')
    loader.update(
        batch_size=batch, sampler=dict(type='DefaultSampler', shuffle=True))
    loader['dataset'] = dict(  # replaced, not merged into the config's
        type='CustomDataset',
        data_root=root,
        with_label=False,
        pipeline=copy.deepcopy(pipeline))
    return loader


def loader_rate(loader, workers, each=None, sync=None):
    """Images/s of a dataloader config with ``workers`` workers, its dataset
    repeated to six batches per worker, the first wave (a batch per worker:
    their start) not counted; ``each(batch)`` run on every batch, ``sync()``
    before the clock starts and stops. (Each worker makes whole batches: an
    epoch of fewer batches than workers would leave workers idle.)"""
    from mmengine.dataset import RepeatDataset
    from mmengine.registry import DATASETS
    from mmengine.runner import Runner
    waves = max(1, workers)
    dataset = DATASETS.build(loader['dataset'])
    times = -(-6 * waves * loader['batch_size'] // len(dataset))
    loader = dict(
        loader,
        num_workers=workers,
        persistent_workers=False,
        drop_last=True,  # one batch shape, as a run's
        dataset=RepeatDataset(dataset, times))
    sync = sync or (lambda: None)
    n, start = 0, None
    for i, data in enumerate(Runner.build_dataloader(loader, seed=0)):
        if i == waves:
            sync()
            start = time.perf_counter()
        if each is not None:
            each(data)
        if i >= waves:
            n += len(data['inputs'])
    sync()
    return n / (time.perf_counter() - start)


def device_decode_rate(pipeline, files, device, batch=64, reps=3):
    """Images/s of the data preprocessor's decode, crop and resize on
    ``device`` (batches made by the worker half beforehand)."""
    import torch
    from mmengine.dataset import Compose, pseudo_collate

    from hpm_mm.models.data_preprocessor import DeviceDecodeDataPreprocessor
    steps = Compose(copy.deepcopy(pipeline))
    np.random.seed(0)
    items = [steps(dict(img_path=f, sample_idx=0)) for f in files[:batch]]
    data = pseudo_collate(items)
    pre = DeviceDecodeDataPreprocessor().to(device)
    sync = torch.cuda.synchronize if device.type == 'cuda' else (lambda: None)
    pre(data)  # warm-up
    sync()
    t = time.perf_counter()
    for _ in range(reps):
        pre(data)
    sync()
    return reps * len(items) / (time.perf_counter() - t)


def failure(e: BaseException) -> str:
    """One line for a part that failed."""
    first = (str(e).splitlines() or [''])[0]
    return f'failed: {type(e).__name__}: {first[:200]}'


def fed_step(cfg, pipelines, root, setting, arch, batch, workers, device):
    """Images/s of a setting's bf16 training step (fused AdamW on CUDA) fed
    by each pipeline's dataloader with ``workers`` workers, and on random
    tensors already on ``device`` (``synthetic``); ``fed``: the slowest
    pipeline's share of the synthetic rate (a pipeline that fails: its
    one-line error instead of a rate)."""
    import torch
    from bench_step import SETTINGS, DeviceOps, model_cfgs, trainer
    ops = DeviceOps(device)
    overrides = SETTINGS[setting][0]
    model_cfg = model_cfgs(arch, 224, overrides)[overrides is not None]
    model_cfg['data_preprocessor']['type'] = \
        'DeviceDecodeDataPreprocessor'  # decodes device_decode batches
    _, optim, step = trainer(model_cfg, device, 'bf16',
                             'fused' if ops.cuda else 'default')
    x = torch.randint(0, 256, (batch, 3, 224, 224), device=device).float()
    rates = {}
    for i in range(3 + 4):  # 3 warm-up steps, then 4 timed
        if i == 3:
            ops.sync()
            t = time.perf_counter()
        step(dict(inputs=x, data_samples=None))
    ops.sync()
    rates['synthetic'] = 4 * batch / (time.perf_counter() - t)
    skipped = {'synthetic': int(optim.skipped_steps)}
    for name, pipeline in pipelines.items():
        before = int(optim.skipped_steps)  # non-finite steps each loader fed
        try:
            rates[name] = loader_rate(
                jpeg_loader(cfg, pipeline, root, batch),
                workers,
                each=step,
                sync=ops.sync)
        except Exception as e:  # e.g. a GPU decode this card lacks
            rates[name] = failure(e)
        skipped[name] = int(optim.skipped_steps) - before
    fed = min((v for k, v in rates.items()
               if k != 'synthetic' and isinstance(v, float)),
              default=0.) / rates['synthetic']
    print(
        f'{setting} step, {arch} b{batch}, {workers} workers: ' + ', '.join(
            f'{k} {v:.0f} images/s' if isinstance(v, float) else f'{k} {v}'
            for k, v in rates.items()) + f' (fed {fed:.0%}; non-finite '
        f'steps skipped: {skipped})',
        flush=True)
    return dict(rates, fed=fed, skipped_steps=skipped)


def own_loader(config, workers, options):
    """Images/s of ``config``'s own train dataloader with each worker count
    (:func:`loader_rate`)."""
    from hpm_mm.apis.config import load_config
    cfg = load_config(config, options)
    out = {}
    for w in workers:
        out[f'{w}w'] = rate = loader_rate(cfg.train_dataloader, w)
        print(f'{config}, {w} workers: {rate:.0f} images/s', flush=True)
    return out


def main(argv=None):
    from mmengine.config import DictAction
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--images', type=int, default=300)
    parser.add_argument('--workers', type=int, nargs='+', default=[1, 2])
    parser.add_argument('--config', default=CONFIG)
    parser.add_argument(
        '--data',
        help='the JPEGs\' folder (the dataloaders read all of it; default: '
        'work_dirs/pipeline_bench_N for --images N)')
    parser.add_argument('--passes', type=int, default=2)
    parser.add_argument(
        '--device-decode',
        action='store_true',
        help='also the GPU-decode pipeline (its worker half per core, its '
        'dataloader, the decode on --device)')
    parser.add_argument('--device')
    parser.add_argument(
        '--step',
        nargs='+',
        default=[],
        help="bench_step settings (mae, fast, ...) trained on each "
        "pipeline's dataloader")
    parser.add_argument('--step-arch', default='b')
    parser.add_argument('--step-batch', type=int, default=256)
    parser.add_argument('--step-workers', type=int, default=8)
    parser.add_argument('--own-loader', metavar='CONFIG')
    parser.add_argument('--cfg-options', nargs='+', action=DictAction)
    parser.add_argument('--out')
    args = parser.parse_args(argv)
    import torch
    from machine import cpu_class, cpu_name
    from mmengine.logging import MMLogger
    from mmengine.registry import init_default_scope

    import hpm_mm  # noqa: F401
    from hpm_mm.apis.config import load_config
    init_default_scope('mmpretrain')
    MMLogger.get_instance('pipeline_bench', log_level='WARNING')
    torch.set_num_threads(1)
    if args.own_loader:
        return own_loader(args.own_loader, args.workers, args.cfg_options)
    cfg = load_config(osp.join(ROOT, args.config))
    args.data = args.data or osp.join(ROOT, 'work_dirs',
                                      f'pipeline_bench_{args.images}')
    names = make_images(args.data, args.images)
    files = [osp.join(args.data, n) for n in names]
    sizes = [os.path.getsize(f) for f in files]
    from mmengine.hub import get_config
    pipelines = dict(
        mmpretrain=list(get_config(MMPRETRAIN).train_pipeline),
        hpm_mm=list(cfg.train_dataloader.dataset.pipeline))
    if args.device_decode:
        pipelines['device_decode'] = list(
            load_config(osp.join(ROOT, DEVICE_DECODE)).train_pipeline)
    out = dict(
        machine=dict(
            cpu=cpu_name(), cpu_class=cpu_class(), cores=os.cpu_count()),
        images=len(files),
        mean_kb=round(statistics.mean(sizes) / 1024, 1),
        config=args.config,
        pipelines={
            k: [t['type'] for t in v]
            for k, v in pipelines.items()
        },
        per_core={},
        loader={},
        command='python .dev_scripts/pipeline_bench.py ' +
        ' '.join(sys.argv[1:] if argv is None else argv))
    for name, pipeline in pipelines.items():
        shares = per_transform(pipeline, files, args.passes)
        total = sum(shares.values())
        out['per_core'][name] = dict(
            images_s=1 / total,
            ms_per_image={
                k: round(v * 1e3, 3)
                for k, v in shares.items()
            })
        print(
            f'{name}: {1 / total:.0f} images/s per core; ' +
            ', '.join(f'{k} {v * 1e3:.2f} ms' for k, v in shares.items()),
            flush=True)
        for w in args.workers:
            rate = loader_rate(jpeg_loader(cfg, pipeline, args.data), w)
            out['loader'][f'{name}_{w}w'] = rate
            print(
                f'  dataloader, {w} workers: {rate:.0f} images/s', flush=True)
    device = torch.device(
        args.device or ('cuda' if torch.cuda.is_available() else 'cpu'))
    if args.device_decode:
        name = torch.cuda.get_device_name() if device.type == 'cuda' \
            else cpu_name()
        out['device_decode'] = dict(device=name)
        try:
            rate = device_decode_rate(pipelines['device_decode'], files,
                                      device)
        except Exception as e:  # a part that fails leaves the others
            out['device_decode']['error'] = failure(e)
        else:
            out['device_decode']['images_s'] = rate
        got = out['device_decode']
        print(
            f'device decode, crop, resize on {device}: ' +
            (got['error']
             if 'error' in got else f"{got['images_s']:.0f} images/s"),
            flush=True)
    base, new = (
        out['per_core'][k]['images_s'] for k in ('mmpretrain', 'hpm_mm'))
    out['speedup_per_core'] = new / base
    out['cores_per_gpu'] = {
        what: dict(mmpretrain=rate / base, hpm_mm=rate / new)
        for what, rate in GPU_RATES.items()
    }
    print(f'per core: hpm_mm {new:.0f} vs mmpretrain {base:.0f} images/s '
          f'({new / base:.2f}x)')
    for what, c in out['cores_per_gpu'].items():
        print(f"  cores to feed {what} ({GPU_RATES[what]} images/s): "
              f"{c['mmpretrain']:.1f} -> {c['hpm_mm']:.1f}")

    def save():  # after each part: a call cut short keeps what it measured
        if args.out:
            os.makedirs(osp.dirname(osp.abspath(args.out)), exist_ok=True)
            with open(args.out, 'w') as f:
                json.dump(out, f, indent=1)

    save()
    if args.step:
        fed = {k: v for k, v in pipelines.items() if k != 'mmpretrain'}
        out['step'] = dict(
            arch=args.step_arch,
            batch=args.step_batch,
            workers=args.step_workers,
            device=str(device))
        for setting in args.step:
            try:
                out['step'][setting] = fed_step(cfg, fed, args.data, setting,
                                                args.step_arch,
                                                args.step_batch,
                                                args.step_workers, device)
            except Exception as e:
                out['step'][setting] = dict(error=failure(e))
                print(f'{setting} step: {failure(e)}', flush=True)
            save()
    return out


if __name__ == '__main__':
    main()
