"""HPM vs mmpretrain MAE step time and memory, side by side in one run.

    python .dev_scripts/benchmark_step.py [--archs t s b] \
        [--batch 8] [--iters 5] [--warmup 1] [--img-size 224] \
        [--device cpu|cuda] [--amp [bf16|fp16]] [--mask-bench] \
        [--out bench.json]

For each ViT size the models are built from the configs, with the ViT's
width and depth set per ``--archs`` (the decoders stay MAE's 8 x 512-d):
mmpretrain's own MAE from ``mmpretrain::_base_/models/mae_vit-base-p16.py``
and HPM from ``configs/_base_/models/hpm_vit-base-p16.py`` (alpha 0.5 ->
0.5, so the teacher runs every step). Each step is the model's own
``train_step`` (data preprocessor, ``loss``, backward, AdamW step through an
optimizer wrapper), timed over the same batch: median of ``--iters`` steps
after ``--warmup`` steps, CUDA synchronised around each. A second set of
steps times
the sections of HPM's step on the real modules, through forward hooks and
method wrappers: the teacher (EMA update + scoring pass), the mask
generator, the student forward (backbone + neck), the losses (head) and the
rest (backward, optimizer step, preprocessing). Peak memory
(``torch.cuda.max_memory_allocated`` over the timed steps, reset after the
warm-up) is reported on CUDA for every row; a row that runs out of memory
is reported as OOM and the others go on. The printed
ratio HPM/MAE stands next to the FLOP model's ratio (multiply-accumulates:
forward x3 for trained parts, forward only for the teacher). Fast settings
are timed too, each a config override with its own FLOP-model ratio: teacher
in bf16, a lighter predictor (2 blocks), a half-resolution teacher
(``teacher.input_scale=0.5``), the last two combined, and alpha = 0
(no teacher).

``--mask-bench`` also times mask generation alone at ``--mask-batch``
(256) images of the ViT grid: hpm_mm's vectorised ``HPMMaskGenerator``
against the authors' per-sample loop (re-implemented here: a NumPy
``delete`` and ``shuffle`` per image, with a host round trip each), as time
per batch and as a share of the HPM step.
"""
import argparse
import copy
import json
import os.path as osp
import statistics
import time
from contextlib import contextmanager

import torch

REPO = osp.dirname(osp.dirname(osp.abspath(__file__)))
HPM_CFG = osp.join(REPO, 'configs', '_base_', 'models', 'hpm_vit-base-p16.py')
MAE_CFG = 'mmpretrain::_base_/models/mae_vit-base-p16.py'
ARCHS = {  # name: (embed_dims, depth, heads)
    't': (192, 12, 3),
    's': (384, 12, 6),
    'b': (768, 12, 12),
    'l': (1024, 24, 16),
}


def vit_macs(tokens: int, dim: int, depth: int, mlp: float = 4.) -> float:
    """Multiply-accumulates of ``depth`` transformer blocks on ``tokens``."""
    per_block = tokens * dim * dim * (4 + 2 * mlp) + 2 * tokens**2 * dim
    return depth * per_block


def flop_model(dim,
               depth,
               num_patches,
               mask_ratio=0.75,
               dec_dim=512,
               dec_depth=8,
               pred_depth=8,
               pred_dim=512,
               patch_pixels=768,
               teacher_patches=None,
               teacher=True):
    """(MAE MACs, HPM MACs) per image of one training step.

    ``teacher_patches``: patches the teacher sees (half-resolution teacher);
    ``teacher=False``: alpha = 0, no teacher pass.
    """
    vis = num_patches - round(mask_ratio * num_patches) + 1
    full = num_patches + 1

    def predictor(tokens):
        return (vit_macs(tokens, pred_dim, pred_depth) +
                tokens * pred_dim * patch_pixels +
                (tokens * dec_dim * pred_dim if pred_dim != dec_dim else 0))

    enc_vis = vit_macs(vis, dim, depth) + num_patches * patch_pixels * dim
    embed = vis * dim * dec_dim
    rec = vit_macs(full, dec_dim, dec_depth) + full * dec_dim * patch_pixels
    mae = 3 * (enc_vis + embed + rec)
    hpm = 3 * (enc_vis + embed + rec + predictor(full))
    if teacher:
        t = (teacher_patches or num_patches) + 1
        hpm += (
            vit_macs(t, dim, depth) + (t - 1) * patch_pixels * dim +
            t * dim * dec_dim + predictor(t))
    return mae, hpm


# name: (HPM model config overrides (dotted keys), FLOP-model arguments)
FAST = {
    'teacher_bf16': ({
        'teacher.dtype': 'bfloat16'
    }, {}),
    'predictor_2blocks': ({
        'neck.predictor_depth': 2
    }, dict(pred_depth=2)),
    'teacher_half_res': ({
        'teacher.input_scale': 0.5
    }, dict(teacher_scale=0.5)),
    'teacher_half_res+2blocks': ({
        'neck.predictor_depth': 2,
        'teacher.input_scale': 0.5
    }, dict(pred_depth=2, teacher_scale=0.5)),
    'alpha0_no_teacher': ({
        'mask_generator.alpha_0': 0.,
        'mask_generator.alpha_T': 0.
    }, dict(teacher=False)),
}


def fast_flops(arch, img_size, pred_depth=8, teacher_scale=1., teacher=True):
    dim, depth, _ = ARCHS[arch]
    side = img_size // 16
    t_side = max(1, int(side * teacher_scale + .5))
    return flop_model(
        dim,
        depth,
        side**2,
        pred_depth=pred_depth,
        teacher_patches=t_side**2,
        teacher=teacher)


def model_cfgs(arch, img_size, overrides=None):
    """(MAE, HPM) model configs from the configs, at this ViT size."""
    from mmengine.config import Config
    from mmengine.hub import get_config  # resolves mmpretrain::
    dim, depth, heads = ARCHS[arch]
    vit = dict(
        arch=dict(
            embed_dims=dim,
            num_layers=depth,
            num_heads=heads,
            feedforward_channels=4 * dim),
        img_size=img_size,
        patch_size=16)
    neck = dict(num_patches=(img_size // 16)**2, embed_dim=dim)
    pre = dict(
        type='SelfSupDataPreprocessor',
        mean=[123.675, 116.28, 103.53],
        std=[58.395, 57.12, 57.375],
        to_rgb=True)
    mae, hpm = get_config(MAE_CFG).model, Config.fromfile(HPM_CFG).model
    for cfg in (mae, hpm):
        cfg.backbone.update(vit)
        cfg.neck.update(neck)
        cfg.data_preprocessor = pre
    mae.head.norm_pix = False  # HPM's targets
    hpm.mask_generator.update(alpha_0=0.5, alpha_T=0.5)
    for key, value in (overrides or {}).items():
        *parents, leaf = key.split('.')
        node = hpm
        for k in parents:
            node = node[k]
        node[leaf] = value
    return mae.to_dict(), hpm.to_dict()


class DeviceOps:
    """What timing needs of a device: wait for its queued work, and reset
    and read its peak memory (CUDA; ``None`` elsewhere)."""

    def __init__(self, device):
        self.cuda = torch.device(device).type == 'cuda'
        self.device = device

    def sync(self):
        if self.cuda:
            torch.cuda.synchronize(self.device)

    def reset_peak(self):
        if self.cuda:
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats(self.device)

    def peak_gib(self):
        if self.cuda:
            return torch.cuda.max_memory_allocated(self.device) / 2**30
        return None


class Timer:
    """Wall-clock sections, the device synchronised around each one."""

    def __init__(self, ops):
        self.ops = ops
        self.times = {}
        self.open = []  # the sections being timed now, outermost first

    def sync(self):
        self.ops.sync()

    @contextmanager
    def section(self, name):
        self.sync()
        self.open.append(name)
        t = time.perf_counter()
        try:
            yield
        finally:
            self.sync()
            self.times.setdefault(name, []).append(time.perf_counter() - t)
            self.open.pop()

    def wrap(self, obj, method, name):
        """Time every call of ``obj.method`` (an instance attribute that
        shadows the method; ``unwrap`` removes it)."""
        original = getattr(obj, method)

        def timed(*args, **kwargs):
            with self.section(name):
                return original(*args, **kwargs)

        setattr(obj, method, timed)
        return lambda: delattr(obj, method)


def sections(model, timer):
    """Time HPM's (or MAE's) real modules; returns the undo callables."""
    undo = [
        timer.wrap(module, 'forward', 'student_fwd')
        for module in (model.backbone, model.neck)
    ]
    undo.append(timer.wrap(model.head, 'loss', 'losses'))
    if getattr(model, 'mask_generator', None) is not None:
        undo.append(timer.wrap(model.mask_generator, 'forward', 'mask'))
    if getattr(model, 'teacher', None) is not None:
        undo.append(timer.wrap(model.teacher, 'update', 'teacher'))
        undo.append(timer.wrap(model.teacher, 'forward', 'teacher'))
    return undo


def optim_wrapper(model, amp):
    """AdamW through the optimizer wrapper the configs use."""
    from mmengine.optim import build_optim_wrapper
    cfg = dict(
        type='GuardedOptimWrapper',
        optimizer=dict(type='AdamW', lr=1e-4, betas=(0.9, 0.95)))
    if amp == 'bf16':
        cfg.update(type='AutocastOptimWrapper', dtype='bfloat16')
    elif amp == 'fp16':
        cfg.update(
            type='GuardedAmpOptimWrapper',
            dtype='float16',
            loss_scale='dynamic')
    return build_optim_wrapper(model, cfg)


def measure(cfg, x, iters, amp=None, breakdown=False, warmup=1, ops=None):
    """Median step time, images/s (and sections, peak memory) of one
    model; ``dict(oom=True)`` when it does not fit in the device's
    memory."""
    try:
        return _measure(cfg, x, iters, amp, breakdown, warmup, ops
                        or DeviceOps(x.device))
    except torch.OutOfMemoryError:
        if x.device.type == 'cuda':
            torch.cuda.empty_cache()
        return dict(oom=True)


def _measure(cfg, x, iters, amp, breakdown, warmup, ops):
    from mmpretrain.registry import MODELS
    torch.manual_seed(0)
    model = MODELS.build(cfg).to(x.device)
    model.init_weights()
    model.train()
    if hasattr(model, 'set_progress'):
        model.set_progress(1.0)
    optim = optim_wrapper(model, amp)
    data = dict(inputs=x, data_samples=None)
    timer = Timer(ops)
    for _ in range(max(1, warmup)):
        model.train_step(copy.copy(data), optim)
    ops.sync()
    ops.reset_peak()
    for _ in range(iters):
        with timer.section('step'):
            model.train_step(copy.copy(data), optim)
    out = dict(step=statistics.median(timer.times.pop('step')))
    out['img_s'] = x.shape[0] / out['step']
    peak = ops.peak_gib()
    if peak is not None:
        out['peak_mem_gib'] = peak
    out['skipped_steps'] = int(getattr(optim, 'skipped_steps', 0))
    if breakdown:
        undo = sections(model, timer)
        for _ in range(iters):
            with timer.section('timed_step'):
                model.train_step(copy.copy(data), optim)
        for u in undo:
            u()
        steps = timer.times.pop('timed_step')
        per_step = {k: sum(v) / len(steps) for k, v in timer.times.items()}
        per_step['rest'] = statistics.median(steps) - sum(per_step.values())
        out.update(per_step)
    del model, optim
    return out


def authors_mask(scores, num_masked, num_hard):
    """The authors' ``generate_mask`` (HPM repository), re-implemented
    with its per-image loop: for every image, the ``num_hard`` highest
    scores are masked and the rest of the order is a NumPy shuffle of the
    other patches, each image copied to the host and back. (B, N) float,
    1 = masked."""
    import numpy as np
    B, N = scores.shape
    device = scores.device
    order = torch.argsort(scores, dim=1)  # ascending: hardest last
    ids_shuffle = torch.zeros_like(order)
    for i in range(B):
        hard = order[i, N - num_hard:]
        ids_shuffle[i, N - num_hard:] = hard
        rest = np.delete(np.arange(N), hard.cpu().numpy())
        np.random.shuffle(rest)
        ids_shuffle[i, :N - num_hard] = torch.from_numpy(rest).to(device)
    ids_restore = torch.argsort(ids_shuffle, dim=1)
    mask = torch.ones(B, N, device=device)
    mask[:, :N - num_masked] = 0
    return torch.gather(mask, 1, ids_restore)


def mask_bench(num_patches, batch, device, iters=20, ops=None):
    """Seconds per batch of hpm_mm's vectorised generator and of the
    authors' per-image loop, at gamma 0.75 and alpha 0.5 (medians)."""
    from hpm_mm.models import HPMMaskGenerator
    ops = ops or DeviceOps(device)
    gen = HPMMaskGenerator(mask_ratio=0.75, alpha_0=0.5, alpha_T=0.5)
    num_masked = gen.num_masked(num_patches)
    num_hard = gen.num_hard(num_patches, 1.)
    scores = torch.randn(batch, num_patches, device=device)
    runs = dict(
        vectorised=lambda: gen(scores, 1., num_patches, batch, device),
        authors_loop=lambda: authors_mask(scores, num_masked, num_hard))
    timer, out = Timer(ops), {}
    for name, fn in runs.items():
        fn()  # warm-up
        for _ in range(iters):
            with timer.section(name):
                mask = fn()
        assert torch.all(mask.sum(1) == num_masked)
        out[name] = statistics.median(timer.times[name])
    return dict(
        out,
        batch=batch,
        num_patches=num_patches,
        num_masked=num_masked,
        num_hard=num_hard)


def setup(parser, device, amps, name):
    """What both GPU tools do first: register hpm_mm, mmpretrain's scope, a
    quiet logger; the device (CUDA when there is one); fp16 refused in one
    line without CUDA. Returns the device."""
    from mmengine.logging import MMLogger
    from mmengine.registry import init_default_scope

    import hpm_mm  # noqa: F401
    init_default_scope('mmpretrain')
    # the current logger: warnings only (no per-parameter init report)
    MMLogger.get_instance(name, log_level='WARNING')
    device = torch.device(
        device or ('cuda' if torch.cuda.is_available() else 'cpu'))
    if 'fp16' in amps and device.type != 'cuda':
        parser.error('--amp fp16 (a dynamic loss scale) needs CUDA; use '
                     '--amp bf16 on this device')
    return device


def versions(device):
    """torch, CUDA and the device's name, for the record."""
    out = dict(torch=torch.__version__, cuda=torch.version.cuda)
    if device.type == 'cuda':
        out['device'] = torch.cuda.get_device_name(device)
    else:
        out['device'] = f'CPU ({torch.get_num_threads()} threads)'
    return out


def fmt_row(arch, name, row, mae):
    """One line of the all-rows table (step, images/s, x MAE, memory)."""
    if row.get('oom'):
        return f'| ViT-{arch.upper()} | {name} | OOM | | | | OOM |'
    ratio = f"{row['step'] / mae['step']:.2f}x" if not mae.get('oom') \
        else '-'
    mem = f"{row['peak_mem_gib']:.1f}" if 'peak_mem_gib' in row else '-'
    return (f"| ViT-{arch.upper()} | {name} | {row['step']:.3f} | "
            f"{row['img_s']:.0f} | {ratio} | {row['flop_ratio']:.2f}x | "
            f'{mem} |')


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        '--archs', nargs='+', default=['t', 's', 'b'], choices=list(ARCHS))
    parser.add_argument('--batch', type=int, default=8)
    parser.add_argument('--iters', type=int, default=5)
    parser.add_argument(
        '--warmup',
        type=int,
        default=1,
        help='untimed steps before timing (default 1)')
    parser.add_argument('--img-size', type=int, default=224)
    parser.add_argument('--device', default=None)
    parser.add_argument(
        '--amp',
        nargs='?',
        const='bf16',
        choices=['bf16', 'fp16'],
        help='mixed precision: bf16 autocast (default with '
        'no value; any device) or fp16 with a dynamic loss '
        'scale (CUDA)')
    parser.add_argument(
        '--no-fast', action='store_true', help='skip the fast settings')
    parser.add_argument(
        '--fast',
        nargs='+',
        default=list(FAST),
        choices=list(FAST),
        help='which fast settings to time')
    parser.add_argument(
        '--no-breakdown',
        action='store_true',
        help="skip the timed sections of HPM's step")
    parser.add_argument(
        '--mask-bench',
        action='store_true',
        help='also time mask generation: vectorised vs the '
        "authors' per-image loop")
    parser.add_argument('--mask-batch', type=int, default=256)
    parser.add_argument('--out')
    args = parser.parse_args(argv)
    device = setup(parser, args.device, [args.amp], 'benchmark_step')
    env = versions(device)
    dev_name = env['device']
    print(f"device: {dev_name}; torch {env['torch']}, CUDA {env['cuda']}; "
          f'batch {args.batch}; {args.img_size}px; '
          f"{args.amp + ' autocast' if args.amp else 'fp32'}; median of "
          f'{args.iters} steps after {max(1, args.warmup)} warm-up')
    ops = DeviceOps(device)
    rows, all_rows, results, fast_rows = [], [], {}, {}
    for arch in args.archs:
        dim, depth, _ = ARCHS[arch]
        mae_cfg, hpm_cfg = model_cfgs(arch, args.img_size)
        x = torch.randn(
            args.batch, 3, args.img_size, args.img_size, device=device)
        mae = measure(
            mae_cfg, x, args.iters, args.amp, warmup=args.warmup, ops=ops)
        hpm = measure(
            hpm_cfg,
            x,
            args.iters,
            args.amp,
            warmup=args.warmup,
            breakdown=not args.no_breakdown,
            ops=ops)
        n = (args.img_size // 16)**2
        f_mae, f_hpm = flop_model(dim, depth, n)
        mae['flop_ratio'], hpm['flop_ratio'] = 1., f_hpm / f_mae
        res = dict(
            mae=mae,
            hpm=hpm,
            flop_ratio=f_hpm / f_mae,
            gmacs_mae=f_mae / 1e9,
            gmacs_hpm=f_hpm / 1e9)
        all_rows += [
            fmt_row(arch, 'MAE (mmpretrain)', mae, mae),
            fmt_row(arch, 'HPM (faithful)', hpm, mae)
        ]
        if not args.no_fast:
            res['fast'] = {}
            for name, (overrides, flop_args) in FAST.items():
                if name not in args.fast:
                    continue
                t = measure(
                    model_cfgs(arch, args.img_size, overrides)[1],
                    x,
                    args.iters,
                    args.amp,
                    warmup=args.warmup,
                    ops=ops)
                f_m, f_h = fast_flops(arch, args.img_size, **flop_args)
                t['flop_ratio'] = f_h / f_m
                if not t.get('oom') and not mae.get('oom'):
                    t['ratio'] = t['step'] / mae['step']
                res['fast'][name] = t
                fast_rows.setdefault(name, {})[arch] = t
                all_rows.append(fmt_row(arch, name, t, mae))
        results[arch] = res
        if mae.get('oom') or hpm.get('oom') or args.no_breakdown:
            continue
        overhead = (hpm['mask'] + hpm['losses']) / hpm['step']
        rows.append(
            f"| ViT-{arch.upper()} | {mae['step']:.3f} | {hpm['step']:.3f} | "
            f"**{hpm['step'] / mae['step']:.2f}x** | "
            f"{res['flop_ratio']:.2f}x | {hpm['teacher']:.3f} | "
            f"{hpm['mask'] * 1e3:.1f} ms | {hpm['student_fwd']:.3f} | "
            f"{hpm['losses'] * 1e3:.1f} ms | {hpm['rest']:.3f} | "
            f"{100 * overhead:.1f}% |" +
            (f" {mae['peak_mem_gib']:.2f} / {hpm['peak_mem_gib']:.2f} |"
             if 'peak_mem_gib' in hpm else ''))
    if rows:
        header = (
            '| model | MAE step (s) | HPM step (s) | HPM/MAE | '
            'FLOP model | teacher (s) | mask gen | student fwd (s) | '
            'losses | bwd+step+rest (s) | mask+loss share |' +
            (' peak mem MAE / HPM (GiB) |' if device.type == 'cuda' else ''))
        print(header)
        print('|' + '---|' * (header.count('|') - 1))
        print('\n'.join(rows))
    print('\nevery row (x MAE: step time over MAE\'s; FLOP model: the same '
          'ratio by the arithmetic):')
    print('| model | setting | step (s) | images/s | x MAE | FLOP model | '
          'peak mem (GiB) |')
    print('|---|---|---|---|---|---|---|')
    print('\n'.join(all_rows))
    if fast_rows:
        print('\nfast settings, HPM step / MAE step (FLOP model):')
        print('| setting | ' + ' | '.join(f'ViT-{a.upper()}'
                                          for a in args.archs) + ' |')
        print('|---|' + '---|' * len(args.archs))
        for name, per_arch in fast_rows.items():
            print(f'| {name} | ' +
                  ' | '.join(f"{per_arch[a]['ratio']:.2f}x "
                             f"({per_arch[a]['flop_ratio']:.2f}x)"
                             if 'ratio' in per_arch[a] else 'OOM'
                             for a in args.archs) + ' |')
    masks = None
    if args.mask_bench:
        side = args.img_size // 16
        masks = mask_bench(side * side, args.mask_batch, device, ops=ops)
        print(f"\nmask generation, batch {masks['batch']}, "
              f"{masks['num_patches']} patches, {masks['num_masked']} masked "
              f"({masks['num_hard']} hardest), median of 20:")
        print('| generator | ms per batch | share of the HPM step time of '
              'as many images |')
        print('|---|---|---|')
        per_img = {
            a: r['hpm']['step'] / args.batch
            for a, r in results.items() if 'step' in r['hpm']
        }
        for name in ('vectorised', 'authors_loop'):
            t = masks[name]
            share = ', '.join(
                f'ViT-{a.upper()} {100 * t / (p * masks["batch"]):.2g}%'
                for a, p in per_img.items())
            print(f'| {name} | {t * 1e3:.2f} | {share} |')
    if args.out:
        with open(args.out, 'w') as f:
            json.dump(
                dict(
                    device=dev_name,
                    versions=env,
                    batch=args.batch,
                    img_size=args.img_size,
                    amp=args.amp,
                    iters=args.iters,
                    warmup=max(1, args.warmup),
                    results=results,
                    mask_bench=masks),
                f,
                indent=2)
    return results


if __name__ == '__main__':
    main()
