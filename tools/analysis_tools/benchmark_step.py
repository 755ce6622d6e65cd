"""HPM vs mmpretrain MAE step time and memory, side by side in one run.

    python tools/analysis_tools/benchmark_step.py [--archs t s b] \
        [--batch 8] [--iters 5] [--img-size 224] [--device cpu|cuda] \
        [--amp] [--out bench.json]

For each ViT size, the same encoder / decoder shapes (MAE's recipe: patch
16, decoder 8 x 512-d; HPM adds an equal loss-predictor trunk and the EMA
teacher) are built as mmpretrain ``MAE`` and as ``HPM`` (alpha = 0.5, so the
teacher runs), and timed over the same batch: forward + backward + AdamW
step, median of ``--iters`` after a warm-up. HPM's step is broken down into
teacher update + pass, mask generation, student forward + backward + step
and losses (each the median over steps). Peak memory is reported on CUDA
only. The printed ratio HPM/MAE stands next to the FLOP model's
ratio (multiply-accumulates: forward x3 for trained parts, forward only for
the teacher). Fast settings are timed too, each with its own FLOP-model
ratio: teacher in bf16, a lighter predictor (2 blocks), a half-resolution
teacher (``teacher_input_scale=0.5``), the last two combined, and alpha = 0
(teacher skipped).
"""
import argparse
import json
import statistics
import time
from contextlib import contextmanager

import torch

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


def flop_model(dim, depth, num_patches, mask_ratio=0.75, dec_dim=512,
               dec_depth=8, pred_depth=8, pred_dim=512, patch_pixels=768,
               teacher_patches=None, teacher=True):
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
        hpm += (vit_macs(t, dim, depth) + (t - 1) * patch_pixels * dim +
                t * dim * dec_dim + predictor(t))
    return mae, hpm


# name: (HPM config overrides, FLOP-model arguments)
FAST = {
    'teacher_bf16': (dict(teacher_dtype='bfloat16'), {}),
    'predictor_2blocks': (dict(pred_depth=2), dict(pred_depth=2)),
    'teacher_half_res': (dict(teacher_input_scale=0.5),
                         dict(teacher_scale=0.5)),
    'teacher_half_res+2blocks': (dict(pred_depth=2, teacher_input_scale=0.5),
                                 dict(pred_depth=2, teacher_scale=0.5)),
    'alpha0_no_teacher': (dict(alpha=0.), dict(teacher=False)),
}


def fast_cfg(arch, img_size, pred_depth=8, alpha=0.5, **model):
    cfg = model_cfgs(arch, img_size, pred_depth=pred_depth)[1]
    cfg['mask_generator'].update(alpha_0=alpha, alpha_T=alpha)
    cfg.update(model)
    return cfg


def fast_flops(arch, img_size, pred_depth=8, teacher_scale=1., teacher=True):
    dim, depth, _ = ARCHS[arch]
    side = img_size // 16
    t_side = max(1, int(side * teacher_scale + .5))
    return flop_model(dim, depth, side**2, pred_depth=pred_depth,
                      teacher_patches=t_side**2, teacher=teacher)


def model_cfgs(arch, img_size, pred_depth=8, pred_dim=None):
    dim, depth, heads = ARCHS[arch]
    n = (img_size // 16)**2
    backbone = dict(arch=dict(embed_dims=dim, num_layers=depth,
                              num_heads=heads, feedforward_channels=4 * dim),
                    img_size=img_size, patch_size=16)
    neck = dict(num_patches=n, patch_size=16, in_chans=3, embed_dim=dim,
                decoder_embed_dim=512, decoder_depth=8,
                decoder_num_heads=16, mlp_ratio=4.)
    pre = dict(type='SelfSupDataPreprocessor', mean=[123.675, 116.28, 103.53],
               std=[58.395, 57.12, 57.375], to_rgb=True)
    mae = dict(type='MAE', backbone=dict(type='MAEViT', mask_ratio=0.75,
                                         **backbone),
               neck=dict(type='MAEPretrainDecoder', **neck),
               head=dict(type='MAEPretrainHead', norm_pix=False,
                         patch_size=16,
                         loss=dict(type='PixelReconstructionLoss',
                                   criterion='L2')),
               data_preprocessor=pre)
    hpm = dict(type='HPM', backbone=dict(type='HPMViT', **backbone),
               neck=dict(type='HPMPretrainDecoder', predictor_depth=pred_depth,
                         predictor_embed_dim=pred_dim,
                         predictor_num_heads=8 if pred_dim else None,
                         **neck),
               head=dict(type='HPMPretrainHead', patch_size=16),
               mask_generator=dict(type='HPMMaskGenerator', alpha_0=0.5,
                                   alpha_T=0.5),
               data_preprocessor=pre)
    return mae, hpm


class Timer:
    """Wall-clock sections, synchronising CUDA around each one."""

    def __init__(self, device):
        self.device = device
        self.times = {}

    def sync(self):
        if self.device.type == 'cuda':
            torch.cuda.synchronize()

    @contextmanager
    def section(self, name):
        self.sync()
        t = time.perf_counter()
        yield
        self.sync()
        self.times.setdefault(name, []).append(time.perf_counter() - t)


def step_fn(model, optim, x, amp, timer=None, breakdown=False):
    ctx = torch.autocast(x.device.type, dtype=torch.bfloat16, enabled=amp)
    if not breakdown:
        with ctx:
            losses = model.loss(x, [])
        loss = sum(v for k, v in losses.items() if 'loss' in k)
        loss.backward()
        optim.step()
        optim.zero_grad(set_to_none=True)
        return
    # HPM, section by section (same work as HPM.loss + backward + step)
    gen, N, B = model.mask_generator, model.backbone.num_patches, x.shape[0]
    with ctx:
        with timer.section('teacher'):
            model._update_teacher()
            scores = model.teacher_scores(x)
        with timer.section('mask'):
            mask = gen(scores, model.progress)
        with timer.section('student_fwd'):
            latent, ids = model.backbone(x, mask, N - gen.num_masked(N))
            pred, pred_scores = model.neck(latent, ids)
        with timer.section('losses'):
            losses = model.head.loss(pred, pred_scores, x, mask)
    with timer.section('student_bwd'):
        (losses['loss_rec'] + losses['loss_pred']).backward()
        optim.step()
        optim.zero_grad(set_to_none=True)
    del B


def measure(cfg, x, iters, amp, breakdown=False):
    from mmpretrain.registry import MODELS
    torch.manual_seed(0)
    model = MODELS.build(cfg).to(x.device)
    model.init_weights()
    model.train()
    if hasattr(model, 'set_progress'):
        model.set_progress(1.0)
    optim = torch.optim.AdamW(
        [p for p in model.parameters() if p.requires_grad], lr=1e-4)
    timer = Timer(x.device)
    step_fn(model, optim, x, amp)  # warm-up
    if x.device.type == 'cuda':
        torch.cuda.reset_peak_memory_stats()
    times = []
    for _ in range(iters):
        with timer.section('step'):
            step_fn(model, optim, x, amp, timer, breakdown)
        times.append(timer.times['step'][-1])
    out = dict(step=statistics.median(times))
    for k, v in timer.times.items():
        if k != 'step':
            out[k] = statistics.median(v)
    if 'student_fwd' in out:
        out['student'] = out.pop('student_fwd') + out.pop('student_bwd')
    if x.device.type == 'cuda':
        out['peak_mem_gib'] = torch.cuda.max_memory_allocated() / 2**30
    del model, optim
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--archs', nargs='+', default=['t', 's', 'b'],
                        choices=list(ARCHS))
    parser.add_argument('--batch', type=int, default=8)
    parser.add_argument('--iters', type=int, default=5)
    parser.add_argument('--img-size', type=int, default=224)
    parser.add_argument('--device', default=None)
    parser.add_argument('--amp', action='store_true', help='bf16 autocast')
    parser.add_argument('--no-fast', action='store_true',
                        help='skip the fast settings')
    parser.add_argument('--fast', nargs='+', default=list(FAST),
                        choices=list(FAST),
                        help='which fast settings to time')
    parser.add_argument('--out')
    args = parser.parse_args(argv)
    import hpm_mm  # noqa: F401
    from mmengine.logging import MMLogger
    from mmengine.registry import init_default_scope
    init_default_scope('mmpretrain')
    # the current logger: warnings only (no per-parameter init report)
    MMLogger.get_instance('benchmark_step', log_level='WARNING')
    device = torch.device(args.device or (
        'cuda' if torch.cuda.is_available() else 'cpu'))
    dev_name = torch.cuda.get_device_name(device) if device.type == 'cuda' \
        else f'CPU ({torch.get_num_threads()} threads)'
    print(f'device: {dev_name}; batch {args.batch}; {args.img_size}px; '
          f"{'bf16 autocast' if args.amp else 'fp32'}; median of "
          f'{args.iters} steps')
    rows, results, fast_rows = [], {}, {}
    for arch in args.archs:
        dim, depth, _ = ARCHS[arch]
        mae_cfg, hpm_cfg = model_cfgs(arch, args.img_size)
        x = torch.randn(args.batch, 3, args.img_size, args.img_size,
                        device=device)
        mae = measure(mae_cfg, x, args.iters, args.amp)
        hpm = measure(hpm_cfg, x, args.iters, args.amp, breakdown=True)
        n = (args.img_size // 16)**2
        f_mae, f_hpm = flop_model(dim, depth, n)
        res = dict(mae=mae, hpm=hpm, flop_ratio=f_hpm / f_mae,
                   gmacs_mae=f_mae / 1e9, gmacs_hpm=f_hpm / 1e9)
        if not args.no_fast:
            res['fast'] = {}
            for name, (overrides, flop_args) in FAST.items():
                if name not in args.fast:
                    continue
                t = measure(fast_cfg(arch, args.img_size, **overrides), x,
                            args.iters, args.amp)
                f_m, f_h = fast_flops(arch, args.img_size, **flop_args)
                res['fast'][name] = dict(ratio=t['step'] / mae['step'],
                                         flop_ratio=f_h / f_m)
                fast_rows.setdefault(name, {})[arch] = res['fast'][name]
        results[arch] = res
        overhead = (hpm['mask'] + hpm['losses']) / hpm['step']
        rows.append(
            f"| ViT-{arch.upper()} | {mae['step']:.3f} | {hpm['step']:.3f} | "
            f"**{hpm['step'] / mae['step']:.2f}x** | "
            f"{res['flop_ratio']:.2f}x | {hpm['teacher']:.3f} | "
            f"{hpm['mask'] * 1e3:.1f} ms | {hpm['student']:.3f} | "
            f"{hpm['losses'] * 1e3:.1f} ms | {100 * overhead:.1f}% |")
    header = ('| model | MAE step (s) | HPM step (s) | HPM/MAE | FLOP model '
              '| teacher (s) | mask gen | student fwd+bwd+step (s) | losses '
              '| mask+loss share |')
    print(header)
    print('|' + '---|' * (header.count('|') - 1))
    print('\n'.join(rows))
    if fast_rows:
        print('\nfast settings, HPM step / MAE step (FLOP model):')
        print('| setting | ' + ' | '.join(
            f'ViT-{a.upper()}' for a in args.archs) + ' |')
        print('|---|' + '---|' * len(args.archs))
        for name, per_arch in fast_rows.items():
            print(f'| {name} | ' + ' | '.join(
                f"{per_arch[a]['ratio']:.2f}x ({per_arch[a]['flop_ratio']:.2f}x)"
                for a in args.archs) + ' |')
    if args.out:
        with open(args.out, 'w') as f:
            json.dump(dict(device=dev_name, batch=args.batch,
                           img_size=args.img_size, amp=args.amp,
                           results=results), f, indent=2)
    return results


if __name__ == '__main__':
    main()
