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
the teacher). Fast settings are timed too: teacher in bf16, a lighter
predictor (2 blocks), and alpha = 0 (teacher skipped).
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
               dec_depth=8, pred_depth=8, pred_dim=512, patch_pixels=768):
    """(MAE MACs, HPM MACs) per image of one training step."""
    vis = num_patches - round(mask_ratio * num_patches) + 1
    full = num_patches + 1
    enc_vis = vit_macs(vis, dim, depth) + num_patches * patch_pixels * dim
    enc_full = vit_macs(full, dim, depth) + num_patches * patch_pixels * dim
    embed = vis * dim * dec_dim
    rec = vit_macs(full, dec_dim, dec_depth) + full * dec_dim * patch_pixels
    pred = (vit_macs(full, pred_dim, pred_depth) + full * pred_dim *
            patch_pixels + (full * dec_dim * pred_dim
                            if pred_dim != dec_dim else 0))
    mae = 3 * (enc_vis + embed + rec)
    teacher = enc_full + full * dim * dec_dim + pred
    hpm = 3 * (enc_vis + embed + rec + pred) + teacher
    return mae, hpm


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
            model.teacher.update_parameters(model._student())
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
    parser.add_argument('--out')
    args = parser.parse_args(argv)
    import hpm_mm  # noqa: F401
    from mmengine.registry import init_default_scope
    init_default_scope('mmpretrain')
    device = torch.device(args.device or (
        'cuda' if torch.cuda.is_available() else 'cpu'))
    dev_name = torch.cuda.get_device_name(device) if device.type == 'cuda' \
        else f'CPU ({torch.get_num_threads()} threads)'
    print(f'device: {dev_name}; batch {args.batch}; {args.img_size}px; '
          f"{'bf16 autocast' if args.amp else 'fp32'}; median of "
          f'{args.iters} steps')
    rows, results = [], {}
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
            fast = {}
            cfg = model_cfgs(arch, args.img_size)[1]
            cfg['teacher_dtype'] = 'bfloat16'
            fast['teacher_bf16'] = measure(cfg, x, args.iters, args.amp)
            cfg = model_cfgs(arch, args.img_size, pred_depth=2)[1]
            fast['predictor_2blocks'] = measure(cfg, x, args.iters,
                                                args.amp)
            cfg = model_cfgs(arch, args.img_size, pred_depth=2)[1]
            cfg['teacher_dtype'] = 'bfloat16'
            fast['bf16_teacher+2blocks'] = measure(cfg, x, args.iters,
                                                   args.amp)
            cfg = model_cfgs(arch, args.img_size)[1]
            cfg['mask_generator'] = dict(type='HPMMaskGenerator',
                                         alpha_0=0., alpha_T=0.)
            fast['alpha0_no_teacher'] = measure(cfg, x, args.iters, args.amp)
            res['fast'] = {k: v['step'] / mae['step'] for k, v in
                           fast.items()}
        results[arch] = res
        overhead = (hpm['mask'] + hpm['losses']) / hpm['step']
        rows.append(
            f"| ViT-{arch.upper()} | {mae['step']:.3f} | {hpm['step']:.3f} | "
            f"**{hpm['step'] / mae['step']:.2f}x** | "
            f"{res['flop_ratio']:.2f}x | {hpm['teacher']:.3f} | "
            f"{hpm['mask'] * 1e3:.1f} ms | {hpm['student']:.3f} | "
            f"{hpm['losses'] * 1e3:.1f} ms | {100 * overhead:.1f}% |" +
            ('' if args.no_fast else ' ' + ', '.join(
                f'{k} {v:.2f}x' for k, v in res['fast'].items()) + ' |'))
    header = ('| model | MAE step (s) | HPM step (s) | HPM/MAE | FLOP model '
              '| teacher (s) | mask gen | student fwd+bwd+step (s) | losses '
              '| mask+loss share |' + ('' if args.no_fast else
                                        ' fast settings (step / MAE) |'))
    print(header)
    print('|' + '---|' * header.count('|')[:-1] if False else
          '|' + '---|' * (header.count('|') - 1))
    print('\n'.join(rows))
    if args.out:
        with open(args.out, 'w') as f:
            json.dump(dict(device=dev_name, batch=args.batch,
                           img_size=args.img_size, amp=args.amp,
                           results=results), f, indent=2)
    return results


if __name__ == '__main__':
    main()
