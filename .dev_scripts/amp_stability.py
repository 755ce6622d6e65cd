"""HPM under mixed precision for a few hundred steps: NaN, skipped steps,
loss scale and the loss curve, fp16 and bf16 side by side.

    python .dev_scripts/amp_stability.py [--arch b] [--img-size 224] \
        [--batch 64] [--steps 300] [--amp fp16 bf16] [--device cuda] \
        [--data data/fashion_mnist] [--out amp.json]

The model is the ViT-B/16 HPM of ``configs/_base_/models/hpm_vit-base-p16.py``
(``--arch`` sets the ViT's width and depth as ``benchmark_step.py`` does),
trained with the recipe's optimizer through the wrapper ``--amp`` gives:
fp16 = ``GuardedAmpOptimWrapper`` (mmengine's AmpOptimWrapper, dynamic loss
scale; CUDA), bf16 = ``AutocastOptimWrapper``; AdamW (0.9, 0.95), wd 0.05,
lr 1.5e-4 x batch / 256 with a linear warm-up over the first 10% of the
steps, clipping at 5.0. alpha grows 0 -> 0.5 over the run, so the teacher
starts scoring after the first steps (K = 0 at the start).

Data: Fashion-MNIST's training images (the idx files, plain or .gz),
upsampled on the device to ``--img-size`` (bilinear), grey copied to 3
channels, random horizontal flips, random batches; ``--data synthetic``
draws smooth random images instead. Each step records loss_rec, loss_pred,
rank_acc, whether the step was skipped (non-finite), the loss scale (fp16)
and the gradient norm; the first step also checks that the per-patch
losses, L_rec and the relative L_pred are fp32 while the student runs in
the AMP dtype.
"""
import argparse
import gzip
import json
import math
import os.path as osp
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, osp.dirname(osp.abspath(__file__)))
from benchmark_step import ARCHS, model_cfgs, setup, versions  # noqa: E402


def load_images(data: str, device) -> torch.Tensor:
    """Fashion-MNIST's 60k training images (N, 28, 28) uint8 on
    ``device``, from ``train-images-idx3-ubyte[.gz]`` in ``data``."""
    import numpy as np
    for name in ('train-images-idx3-ubyte', 'train-images-idx3-ubyte.gz'):
        path = osp.join(data, name)
        if osp.exists(path):
            opener = gzip.open if name.endswith('.gz') else open
            with opener(path, 'rb') as f:
                raw = f.read()
            n, h, w = (
                int.from_bytes(raw[4 * i:4 * i + 4], 'big') for i in (1, 2, 3))
            arr = np.frombuffer(raw, np.uint8, offset=16).reshape(n, h, w)
            return torch.from_numpy(arr.copy()).to(device)
    raise FileNotFoundError(
        f'no train-images-idx3-ubyte[.gz] in {data}. Fix: python '
        'tools/dataset_converters/prepare_fashion_mnist.py --out '
        f'{data}, or --data synthetic')


def batches(images, batch, img_size, device, seed=0):
    """Endless random batches (B, 3, S, S) of pixel values 0..255."""
    g = torch.Generator(device=device).manual_seed(seed)
    while True:
        if images is None:  # smooth random images
            low = torch.rand(batch, 3, 4, 4, generator=g, device=device)
            x = F.interpolate(
                low,
                size=(img_size, img_size),
                mode='bicubic',
                align_corners=False)
            yield (x.clamp(0, 1) * 255)
            continue
        idx = torch.randint(len(images), (batch, ), generator=g, device=device)
        x = images[idx].float().unsqueeze(1)
        x = F.interpolate(
            x, size=(img_size, img_size), mode='bilinear',
            align_corners=False).expand(-1, 3, -1, -1)
        flip = torch.rand(batch, generator=g, device=device) < 0.5
        yield torch.where(flip.view(-1, 1, 1, 1), x.flip(-1), x)


def build(arch, img_size, amp, batch, device):
    """HPM (alpha 0 -> 0.5) and the recipe's optimizer wrapper."""
    from mmengine.optim import build_optim_wrapper
    from mmpretrain.registry import MODELS
    hpm = model_cfgs(arch, img_size, {
        'mask_generator.alpha_0': 0.,
        'mask_generator.alpha_T': 0.5
    })[1]
    torch.manual_seed(0)
    model = MODELS.build(hpm).to(device)
    model.init_weights()
    model.train()
    cfg = dict(
        optimizer=dict(
            type='AdamW',
            lr=1.5e-4 * batch / 256,
            betas=(0.9, 0.95),
            weight_decay=0.05),
        clip_grad=dict(max_norm=5.0))
    if amp == 'fp16':
        cfg.update(
            type='GuardedAmpOptimWrapper',
            dtype='float16',
            loss_scale='dynamic')
    else:
        cfg.update(
            type='AutocastOptimWrapper',
            dtype='bfloat16',
            device_type=torch.device(device).type)
    return model, build_optim_wrapper(model, cfg)


def dtype_probe(model):
    """Record the dtypes of the student's activations, the per-patch
    losses and the relative loss (hooks; returns the dict and the
    undo)."""
    seen = {}

    def student(module, inputs, output):
        seen.setdefault('student', str(output.dtype))

    undo = [
        model.backbone.layers[0].attn.qkv.register_forward_hook(student).remove
    ]
    head = model.head
    patch, rel = head.patch_losses, head.loss_pred.forward

    def patch_losses(*a, **k):
        out = patch(*a, **k)
        seen.setdefault('per_patch_losses', str(out.dtype))
        return out

    def relative(*a, **k):
        out = rel(*a, **k)
        seen.setdefault('loss_pred', str(out.dtype))
        return out

    head.patch_losses = patch_losses
    head.loss_pred.forward = relative
    undo += [
        lambda: delattr(head, 'patch_losses'),
        lambda: delattr(head.loss_pred, 'forward')
    ]
    return seen, undo


def run(amp, args, device, images):
    from mmengine.logging import MessageHub
    model, optim = build(args.arch, args.img_size, amp, args.batch, device)
    hub = MessageHub.get_current_instance()
    lr0 = optim.param_groups[0]['lr']
    warm = max(1, args.steps // 10)
    seen, undo = dtype_probe(model)
    data = batches(images, args.batch, args.img_size, device, args.seed)
    curve, t0 = [], time.perf_counter()
    for step in range(args.steps):
        t = step / args.steps
        model.set_progress(t, epoch=t * 100, optim_steps=optim.applied_steps)
        lr = lr0 * min(1., (step + 1) / warm) * (0.5 * (1 + math.cos(
            math.pi * max(0, step - warm) / max(1, args.steps - warm))))
        for group in optim.param_groups:
            group['lr'] = lr
        skipped = optim.skipped_steps
        log = model.train_step(
            dict(inputs=next(data), data_samples=None), optim)
        if step == 0:
            for u in undo:
                u()
            seen['loss_rec'] = str(log['loss_rec'].dtype)
        scaler = getattr(optim, 'loss_scaler', None)
        grad = hub.get_scalar('train/grad_norm')
        curve.append(
            dict(
                step=step,
                **{
                    k: float(log[k].detach())
                    for k in ('loss_rec', 'loss_pred', 'rank_acc', 'alpha')
                    if k in log
                },
                skipped=optim.skipped_steps > skipped,
                loss_scale=float(scaler.get_scale())
                if scaler is not None and scaler.is_enabled() else None,
                grad_norm=float(grad.current())
                if grad is not None and len(grad.data[0]) else None))
    if device.type == 'cuda':
        torch.cuda.synchronize(device)
    seconds = time.perf_counter() - t0
    finite = [c for c in curve if not c['skipped']]
    k = max(1, min(50, len(curve) // 5))

    def mean(rows, key):
        vals = [
            r[key] for r in rows
            if r.get(key) is not None and math.isfinite(r[key])
        ]
        return sum(vals) / len(vals) if vals else float('nan')

    summary = dict(
        amp=amp,
        steps=args.steps,
        seconds=seconds,
        skipped=sum(c['skipped'] for c in curve),
        nonfinite_logged=sum(not math.isfinite(c['loss_rec']) for c in curve),
        loss_rec_first=mean(curve[:k], 'loss_rec'),
        loss_rec_last=mean(finite[-k:], 'loss_rec'),
        loss_pred_first=mean(curve[:k], 'loss_pred'),
        loss_pred_last=mean(finite[-k:], 'loss_pred'),
        rank_acc_last=mean(finite[-k:], 'rank_acc'),
        loss_scale_last=curve[-1]['loss_scale'],
        teacher_steps=int(model.teacher.steps),
        dtypes=seen)
    return summary, curve


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--arch', default='b', choices=list(ARCHS))
    parser.add_argument('--img-size', type=int, default=224)
    parser.add_argument('--batch', type=int, default=64)
    parser.add_argument('--steps', type=int, default=300)
    parser.add_argument(
        '--amp', nargs='+', default=['fp16', 'bf16'], choices=['fp16', 'bf16'])
    parser.add_argument('--device', default=None)
    parser.add_argument(
        '--data',
        default='data/fashion_mnist',
        help="Fashion-MNIST's folder, or 'synthetic'")
    parser.add_argument('--seed', type=int, default=0)
    parser.add_argument('--out')
    args = parser.parse_args(argv)
    device = setup(parser, args.device, args.amp, 'amp_stability')
    images = None if args.data == 'synthetic' else load_images(
        args.data, device)
    env = versions(device)
    print(f"device: {env['device']}; torch {env['torch']}, CUDA "
          f"{env['cuda']}; ViT-{args.arch.upper()} HPM, {args.img_size}px, "
          f'batch {args.batch}, {args.steps} steps, data '
          f"{'synthetic' if images is None else args.data}")
    results = {}
    print('| AMP | steps | skipped | non-finite loss_rec | loss_rec first '
          '-> last | loss_pred first -> last | rank_acc (last) | '
          'loss scale (end) | dtypes: student / per-patch / L_rec / L_pred '
          '| s |')
    print('|---|---|---|---|---|---|---|---|---|---|')
    for amp in args.amp:
        summary, curve = run(amp, args, device, images)
        results[amp] = dict(summary=summary, curve=curve)
        d = summary['dtypes']
        print(f"| {amp} | {summary['steps']} | {summary['skipped']} | "
              f"{summary['nonfinite_logged']} | "
              f"{summary['loss_rec_first']:.4f} -> "
              f"{summary['loss_rec_last']:.4f} | "
              f"{summary['loss_pred_first']:.4f} -> "
              f"{summary['loss_pred_last']:.4f} | "
              f"{summary['rank_acc_last']:.3f} | "
              f"{summary['loss_scale_last'] or '-'} | "
              f"{d.get('student')} / {d.get('per_patch_losses')} / "
              f"{d.get('loss_rec')} / {d.get('loss_pred')} | "
              f"{summary['seconds']:.0f} |")
    if args.out:
        with open(args.out, 'w') as f:
            json.dump(
                dict(versions=env, args=vars(args), results=results),
                f,
                indent=1)
    return results


if __name__ == '__main__':
    main()
