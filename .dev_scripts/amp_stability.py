"""HPM under mixed precision for a few hundred steps: NaN, skipped steps,
loss scale and the loss curve, fp16 and bf16 side by side.

    python .dev_scripts/amp_stability.py [CONFIG] [--amp fp16 bf16] \
        [--steps 300] [--batch 64] [--work-dir DIR] [--out amp.json]

Each run is ``CONFIG`` (default: the ViT-B/16 HPM recipe on Fashion-MNIST
at 224 px, ``.dev_scripts/configs/``) trained by mmengine's Runner with the
precision forced (fp16 with a dynamic loss scale on CUDA, or bf16) and the
recipe scaled to ``--steps`` (``scale_recipe``; the lr to ``--batch``).
A hook records every step's losses, alpha, skips, loss scale and gradient
norm, and checks at the first step that the losses are fp32."""
import argparse
import json
import math
import os.path as osp
import time

import torch
from mmengine.hooks import Hook

ROOT = osp.dirname(osp.dirname(osp.abspath(__file__)))
CONFIG = osp.join(ROOT, '.dev_scripts', 'configs',
                  'amp-stability_hpm-vit-base-p16_fmnist-224px.py')
EPOCHS = 10
DTYPES = dict(fp16=torch.float16, bf16=torch.bfloat16)


class AMPRecordHook(Hook):
    """Per-step records of a run and, at its first step, the dtypes of the
    student's activations, the per-patch losses and the two losses."""
    priority = 'LOWEST'

    def __init__(self):
        self.curve, self.dtypes, self._undo = [], {}, []

    def before_train_iter(self, runner, batch_idx, data_batch=None):
        if runner.iter == 0:
            self._probe(self._model(runner))
        self._skipped = runner.optim_wrapper.skipped_steps

    def after_train_iter(self,
                         runner,
                         batch_idx,
                         data_batch=None,
                         outputs=None):
        if runner.iter == 0:
            for undo in self._undo:
                undo()
            self.dtypes['loss_rec'] = str(
                getattr(outputs['loss_rec'], 'dtype',
                        type(outputs['loss_rec']).__name__))
        optim = runner.optim_wrapper
        scaler = getattr(optim, 'loss_scaler', None)
        grad = runner.message_hub.get_scalar('train/grad_norm')
        row = dict(
            step=runner.iter,
            skipped=optim.skipped_steps > self._skipped,
            loss_scale=float(scaler.get_scale())
            if scaler is not None and scaler.is_enabled() else None,
            grad_norm=float(grad.current())
            if grad is not None and len(grad.data[0]) else None)
        for key in ('loss_rec', 'loss_pred', 'rank_acc', 'alpha'):
            if key in outputs:
                row[key] = float(torch.as_tensor(outputs[key]).detach())
        self.curve.append(row)

    @staticmethod
    def _model(runner):
        from mmengine.model import is_model_wrapper
        model = runner.model
        return model.module if is_model_wrapper(model) else model

    def _probe(self, model):
        seen = self.dtypes

        def student(module, inputs, output):
            seen.setdefault('student', str(output.dtype))

        handle = model.backbone.layers[0].attn.qkv.register_forward_hook(
            student)
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
        self._undo = [
            handle.remove, lambda: delattr(head, 'patch_losses'),
            lambda: delattr(head.loss_pred, 'forward')
        ]


def run_config(config, amp, steps, batch, work_dir, options=None):
    """The config of one run (see the module's docstring)."""
    from hpm_mm.apis.config import load_config
    from hpm_mm.engine.precision import Precision, optim_wrapper_cfg
    from hpm_mm.engine.schedule import scale_recipe
    cfg = load_config(config)
    if options:
        cfg.merge_from_dict(options)
    if steps % EPOCHS:
        raise SystemExit(f'--steps {steps}: the run is {EPOCHS} epochs, so '
                         f'--steps must be a multiple of {EPOCHS}.')
    per_epoch = steps // EPOCHS
    loader = cfg.train_dataloader
    loader.batch_size = batch
    loader.dataset.indices = per_epoch * batch
    cfg.optim_wrapper.optimizer.lr *= batch / cfg.auto_scale_lr.base_batch_size
    scale_recipe(cfg, EPOCHS, per_epoch)
    device = 'cuda' if torch.cuda.is_available() else 'cpu'
    precision = Precision(amp, DTYPES[amp], device,
                          'forced by amp_stability.py')
    cfg.optim_wrapper = optim_wrapper_cfg(cfg.optim_wrapper, precision)
    if amp == 'bf16':
        cfg.optim_wrapper.device_type = device
    cfg.work_dir = osp.join(work_dir, amp)
    return cfg


def run(cfg):
    """Train ``cfg`` with the recording hook; (summary, curve)."""
    from mmengine.runner import Runner
    runner = Runner.from_cfg(cfg)
    record = AMPRecordHook()
    runner.register_hook(record)
    start = time.perf_counter()
    model = runner.train()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    curve = record.curve
    finite = [c for c in curve if not c['skipped']]
    k = max(1, min(50, len(curve) // 5))

    def mean(rows, key):
        vals = [
            r[key] for r in rows
            if r.get(key) is not None and math.isfinite(r[key])
        ]
        return sum(vals) / len(vals) if vals else float('nan')

    teacher = getattr(model, 'teacher', None)
    summary = dict(
        steps=len(curve),
        seconds=seconds,
        skipped=sum(c['skipped'] for c in curve),
        nonfinite_logged=sum(not math.isfinite(c.get('loss_rec', 0.))
                             for c in curve),
        loss_rec_first=mean(curve[:k], 'loss_rec'),
        loss_rec_last=mean(finite[-k:], 'loss_rec'),
        loss_pred_first=mean(curve[:k], 'loss_pred'),
        loss_pred_last=mean(finite[-k:], 'loss_pred'),
        rank_acc_last=mean(finite[-k:], 'rank_acc'),
        loss_scale_last=curve[-1]['loss_scale'] if curve else None,
        teacher_steps=int(teacher.steps) if teacher is not None else 0,
        dtypes=record.dtypes)
    return summary, curve


def versions():
    """torch, CUDA and the device's name, for the record."""
    out = dict(torch=torch.__version__, cuda=torch.version.cuda)
    out['device'] = torch.cuda.get_device_name() if \
        torch.cuda.is_available() else \
        f'CPU ({torch.get_num_threads()} threads)'
    return out


def main(argv=None):
    from mmengine.config import DictAction
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('config', nargs='?', default=CONFIG)
    parser.add_argument(
        '--amp', nargs='+', default=['fp16', 'bf16'], choices=list(DTYPES))
    parser.add_argument('--steps', type=int, default=300)
    parser.add_argument('--batch', type=int, default=64)
    parser.add_argument(
        '--work-dir', default=osp.join(ROOT, 'work_dirs', 'amp_stability'))
    parser.add_argument('--out')
    parser.add_argument('--cfg-options', nargs='+', action=DictAction)
    args = parser.parse_args(argv)
    if 'fp16' in args.amp and not torch.cuda.is_available():
        parser.error('--amp fp16 (a dynamic loss scale) needs CUDA; use '
                     '--amp bf16 on this device')
    import hpm_mm  # noqa: F401
    env = versions()
    print(f"device: {env['device']}; torch {env['torch']}, CUDA "
          f"{env['cuda']}; {osp.relpath(args.config, ROOT)}, batch "
          f'{args.batch}, {args.steps} steps')
    results = {}
    rows = []
    for amp in args.amp:
        cfg = run_config(args.config, amp, args.steps, args.batch,
                         args.work_dir, args.cfg_options)
        summary, curve = run(cfg)
        summary = dict(amp=amp, **summary)
        results[amp] = dict(summary=summary, curve=curve)
        d = summary['dtypes']
        rows.append(f"| {amp} | {summary['steps']} | {summary['skipped']} | "
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
    print('| AMP | steps | skipped | non-finite loss_rec | loss_rec first '
          '-> last | loss_pred first -> last | rank_acc (last) | '
          'loss scale (end) | dtypes: student / per-patch / L_rec / L_pred '
          '| s |')
    print('|---|---|---|---|---|---|---|---|---|---|')
    print('\n'.join(rows))
    if args.out:
        with open(args.out, 'w') as f:
            json.dump(
                dict(versions=env, args=vars(args), results=results),
                f,
                indent=1,
                default=str)
    return results


if __name__ == '__main__':
    main()
