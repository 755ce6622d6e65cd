"""HPM's training step at the GPU's pace: images/s, x MAE, MFU, host
synchronisations and kernel launches per step, side by side in one run.

    python .dev_scripts/gpu_pace.py [--arch b] [--batch 64 256] \
        [--amp fp16 bf16] [--rows ...] [--compile-rows ...] \
        [--iters 10] [--warmup 3] [--img-size 224] [--budget 300] \
        [--out pace.json] [--table pace.md]
    python .dev_scripts/gpu_pace.py --report docs/results/gpu/pace_*.json

Every row is one model's own ``train_step`` (data preprocessor, loss,
backward, the guarded optimizer wrapper's step) on one batch, timed as
``benchmark_step.py`` times it (median of ``--iters`` steps after
``--warmup``, the device synchronised around each), with the models built
from the configs (``benchmark_step.model_cfgs``):

- ``mae``: mmpretrain's MAE; ``hpm``: faithful HPM (alpha 0.5, the teacher
  scores every step); ``fast``: HPM with a half-resolution teacher and a
  2-block loss predictor; ``2blocks``: the 2-block predictor alone;
- ``+foreach``: AdamW's multi-tensor loop (torch's default on CUDA, and
  what every run used before); ``+fused``: its fused kernel (what
  ``hpm_mm.engine.precision.optim_wrapper_cfg`` gives a CUDA run now);
- ``hpm-before``: the step as it was before this change (mmengine's
  per-parameter EMA update reading ``steps`` back twice, the mask scalars
  made on the GPU, foreach AdamW): today's step against it in the same
  process;
- ``+compile``: ``HPMBase.compile_parts`` (student encoder and neck, the
  teacher's encoder; MAE: its backbone and neck), compile time reported.

Columns: step (s), images/s, x MAE (same batch, precision, optimizer),
the FLOP model's ratio, MFU (images/s x 2 x the FLOP model's MACs per image
over the bf16 matrix rate measured at the start of the run: an 8192^3 bf16
product, median of 10), host syncs per step (``HostSyncCounter`` over one
step: reads back to the host, data-dependent shapes, copies between host
and device) and, with ``--count-ops``, operator calls per step (each one
kernel launch or more on a GPU: counted by the dispatcher, on any device),
peak memory. Rows stop, each recorded as skipped, when ``--budget`` seconds
are spent (the lent GPU's call has a limit).
"""
import argparse
import copy
import json
import os.path as osp
import statistics
import sys
import time
import types

import torch

sys.path.insert(0, osp.dirname(osp.abspath(__file__)))
import benchmark_step as B  # noqa: E402

#: HPM model overrides of the named settings (benchmark_step.FAST's)
SETTINGS = {
    'mae': None,
    'hpm': {},
    '2blocks': B.FAST['predictor_2blocks'][0],
    'fast': B.FAST['teacher_half_res+2blocks'][0],
}
FLOPS = {  # fast_flops arguments of each setting
    'mae': None,
    'hpm': {},
    '2blocks': B.FAST['predictor_2blocks'][1],
    'fast': B.FAST['teacher_half_res+2blocks'][1],
}


def matmul_tflops(device, n=8192, reps=10):
    """The device's bf16 matrix rate: an n^3 product, median of ``reps``
    after 3 warm-ups (on a CPU a 1024^3 fp32 one)."""
    ops = B.DeviceOps(device)
    if device.type != 'cuda':
        n, dtype = 1024, torch.float32
    else:
        dtype = torch.bfloat16
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    times = []
    for i in range(reps + 3):
        ops.sync()
        t = time.perf_counter()
        a @ b
        ops.sync()
        if i >= 3:
            times.append(time.perf_counter() - t)
    return 2 * n**3 / statistics.median(times) / 1e12


def before_step(model):
    """Give ``model`` the step as it was before the host-sync work:
    mmengine's per-parameter EMA update (reads ``steps`` twice) and the
    mask generator's scalars made on the inputs' device."""
    from mmengine.model import BaseAveragedModel
    if getattr(model, 'teacher', None) is not None:
        model.teacher.update_parameters = types.MethodType(
            BaseAveragedModel.update_parameters, model.teacher)

    def with_mask_log(losses, inputs):
        for key, value in model.mask_generator.log_vars(
                model.backbone.num_patches, model.progress).items():
            losses[key] = inputs.new_tensor(value)
        return losses

    model.with_mask_log = with_mask_log


def build(setting,
          arch,
          img_size,
          device,
          amp,
          optimizer,
          before=False,
          compile_=False):
    """(model, optimizer wrapper, compile seconds) of one row."""
    from mmengine.optim import build_optim_wrapper
    from mmpretrain.registry import MODELS
    mae_cfg, hpm_cfg = B.model_cfgs(arch, img_size, SETTINGS[setting])
    torch.manual_seed(0)
    model = MODELS.build(mae_cfg if setting == 'mae' else hpm_cfg)
    model.init_weights()
    model = model.to(device).train()
    if hasattr(model, 'set_progress'):
        model.set_progress(1.0)
    if before:
        before_step(model)
    wrapper = dict(
        type='GuardedOptimWrapper',
        optimizer=dict(type='AdamW', lr=1e-4, betas=(0.9, 0.95)))
    wrapper['optimizer'][optimizer] = True  # fused / foreach
    if amp == 'bf16':
        wrapper.update(
            type='AutocastOptimWrapper',
            dtype='bfloat16',
            device_type=device.type)
    elif amp == 'fp16':
        wrapper.update(
            type='GuardedAmpOptimWrapper',
            dtype='float16',
            loss_scale='dynamic')
    optim = build_optim_wrapper(model, wrapper)
    if compile_:
        if hasattr(model, 'compile_parts'):
            model.compile_parts()
        else:
            model.backbone.compile()
            model.neck.compile()
    return model, optim


def count_ops(model, optim, data):
    """Operator calls of one step (each one GPU kernel launch or more),
    counted by the dispatcher."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Count(TorchDispatchMode):
        n = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            Count.n += 1
            return func(*args, **(kwargs or {}))

    with Count():
        model.train_step(copy.copy(data), optim)
    return Count.n


def collect_run(work_dir, seconds, out):
    """A finished run's knn.json and precision.json, and its wall time."""
    record = dict(seconds=int(seconds), work_dir=work_dir)
    for name in ('knn', 'precision'):
        try:
            with open(osp.join(work_dir, f'{name}.json')) as f:
                record[name] = json.load(f)
        except (OSError, ValueError) as e:
            record[name] = f'missing: {e}'
    print(json.dumps(record)[:800])
    if out:
        with open(out, 'w') as f:
            json.dump(record, f, indent=1)
    return record


def breakdown(model, optim, data, ops, steps=3):
    """Seconds per step in each section of the step (benchmark_step's
    sections: the device synchronised around each, so their sum exceeds
    the step)."""
    timer = B.Timer(ops)
    undo = B.sections(model, timer)
    try:
        for _ in range(steps):
            with timer.section('timed_step'):
                model.train_step(copy.copy(data), optim)
    finally:
        for u in undo:
            u()
    total = timer.times.pop('timed_step')
    out = {k: sum(v) / steps for k, v in timer.times.items()}
    out['rest'] = statistics.median(total) - sum(out.values())
    return out


def row(setting,
        arch,
        args,
        device,
        amp,
        batch,
        optimizer,
        before=False,
        compile_=False,
        sections=False):
    """One row's numbers (``oom=True`` when it does not fit)."""
    from hpm_mm.testing.host_sync import HostSyncCounter
    ops = B.DeviceOps(device)
    out = dict(
        setting=setting,
        arch=arch,
        batch=batch,
        amp=amp,
        optimizer=optimizer,
        before=before,
        compile=compile_)
    try:
        t0 = time.perf_counter()
        model, optim = build(setting, arch, args.img_size, device, amp,
                             optimizer, before, compile_)
        x = torch.randn(batch, 3, args.img_size, args.img_size, device=device)
        data = dict(inputs=x, data_samples=None)
        model.train_step(copy.copy(data), optim)  # first step (compiles)
        ops.sync()
        out['first_step_s'] = time.perf_counter() - t0
        for _ in range(max(0, args.warmup - 1)):
            model.train_step(copy.copy(data), optim)
        ops.sync()
        ops.reset_peak()
        times = []
        for _ in range(args.iters):
            ops.sync()
            t = time.perf_counter()
            model.train_step(copy.copy(data), optim)
            ops.sync()
            times.append(time.perf_counter() - t)
        out['step'] = statistics.median(times)
        out['img_s'] = batch / out['step']
        peak = ops.peak_gib()
        if peak is not None:
            out['peak_mem_gib'] = peak
        with HostSyncCounter(
                device=device if device.type == 'cuda' else None) as syncs:
            model.train_step(copy.copy(data), optim)
        out['syncs'] = syncs.count
        out['sync_ops'] = dict(syncs.ops)
        if args.count_ops:
            out['ops_per_step'] = count_ops(model, optim, data)
        if sections:
            out['sections'] = breakdown(model, optim, data, ops)
        out['skipped_steps'] = int(getattr(optim, 'skipped_steps', 0))
    except torch.OutOfMemoryError:
        out['oom'] = True
    finally:
        model = optim = None
        if device.type == 'cuda':
            torch.cuda.empty_cache()
    dim, depth, _ = B.ARCHS[arch]
    f_mae, f_hpm = B.fast_flops(arch, args.img_size, **(FLOPS[setting] or {}))
    out['macs'] = f_mae if setting == 'mae' else f_hpm
    out['flop_ratio'] = out['macs'] / f_mae
    return out


def plan(args):
    """The rows, in the order they run (most wanted first)."""
    rows = []
    for batch in args.batch:
        for amp in args.amp:
            for setting in args.rows:
                for optimizer in ('foreach', 'fused'):
                    rows.append(
                        dict(
                            setting=setting,
                            arch=args.arch,
                            batch=batch,
                            amp=amp,
                            optimizer=optimizer))
            if 'hpm' in args.rows:
                rows.append(
                    dict(
                        setting='hpm',
                        arch=args.arch,
                        batch=batch,
                        amp=amp,
                        optimizer='foreach',
                        before=True))
    for spec in args.compile_rows:  # SETTING:BATCH:AMP
        setting, batch, amp = spec.split(':')
        rows.append(
            dict(
                setting=setting,
                arch=args.arch,
                batch=int(batch),
                amp=amp,
                optimizer='fused',
                compile_=True))
    for spec in args.extra_rows:  # ARCH:SETTING:BATCH:AMP
        arch, setting, batch, amp = spec.split(':')
        rows.append(
            dict(
                setting=setting,
                arch=arch,
                batch=int(batch),
                amp=amp,
                optimizer='fused',
                sections=args.breakdown))
    return rows


def name_of(r):
    name = {
        'mae': 'MAE',
        'hpm': 'HPM faithful',
        '2blocks': 'HPM 2-block '
        'predictor',
        'fast': 'HPM fast (half-res teacher + 2 blocks)'
    }[r['setting']]
    if r.get('before'):
        return name + ', step before (#55)'
    extra = ', compile' if r['compile'] else ''
    return name + f", {r['optimizer']}" + extra


def table(results, tflops):
    """The markdown table: x MAE against the MAE row of the same arch,
    batch, precision, optimizer (fused for the compiled rows)."""
    mae = {
        (r['arch'], r['batch'], r['amp'], r['optimizer'], r['compile']): r
        for r in results if r['setting'] == 'mae' and 'step' in r
    }
    lines = [
        '| ViT | batch | precision | row | step (s) | images/s | x MAE | '
        'FLOP model | MFU | syncs/step | ops/step | peak GiB | '
        'first step (s) |',
        '|---|---|---|---|---|---|---|---|---|---|---|---|---|'
    ]
    for r in results:
        head = f"| {r['arch'].upper()} | {r['batch']} | {r['amp']} | " \
            f'{name_of(r)} |'
        if r.get('skipped') or r.get('oom') or 'step' not in r:
            why = 'OOM' if r.get('oom') else r.get('skipped', 'failed')
            lines.append(head + f' {why} |' + ' |' * 8)
            continue
        base = mae.get(
            (r['arch'], r['batch'], r['amp'], r['optimizer'],
             r['compile'])) or mae.get(
                 (r['arch'], r['batch'], r['amp'], 'foreach', False))
        ratio = f"{r['step'] / base['step']:.2f}x" if base else '-'
        mfu = r['img_s'] * 2 * r['macs'] / (tflops * 1e12)
        mem = f"{r['peak_mem_gib']:.1f}" if 'peak_mem_gib' in r else '-'
        lines.append(
            head + f" {r['step']:.4f} | {r['img_s']:.0f} | {ratio} | "
            f"{r['flop_ratio']:.2f}x | {100 * mfu:.1f}% | {r['syncs']} | "
            f"{r.get('ops_per_step', '-')} | {mem} | "
            f"{r['first_step_s']:.1f} |")
    return '\n'.join(lines)


def write(path, env, tflops, args, start, results):
    record = dict(
        versions=env,
        matmul_tflops=tflops,
        img_size=args.img_size,
        iters=args.iters,
        warmup=args.warmup,
        seconds=time.perf_counter() - start,
        rows=results)
    if path:
        with open(path, 'w') as f:
            json.dump(record, f, indent=1)
    return record


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--arch', default='b', choices=list(B.ARCHS))
    parser.add_argument('--batch', nargs='+', type=int, default=[64, 256])
    parser.add_argument(
        '--amp',
        nargs='+',
        default=['fp16', 'bf16'],
        choices=['fp16', 'bf16', 'fp32'])
    parser.add_argument(
        '--rows',
        nargs='*',
        default=['mae', 'hpm', 'fast'],
        choices=list(SETTINGS))
    parser.add_argument(
        '--compile-rows',
        nargs='*',
        default=[],
        help='SETTING:BATCH:AMP rows with compile_parts (fused AdamW)')
    parser.add_argument(
        '--extra-rows',
        nargs='*',
        default=[],
        help='ARCH:SETTING:BATCH:AMP rows (fused AdamW), e.g. l:fast:64:bf16')
    parser.add_argument('--iters', type=int, default=10)
    parser.add_argument('--warmup', type=int, default=3)
    parser.add_argument('--img-size', type=int, default=224)
    parser.add_argument('--count-ops', action='store_true')
    parser.add_argument(
        '--breakdown',
        action='store_true',
        help="the extra rows' step in sections (teacher, mask, student, "
        'losses, rest), as benchmark_step.py times them')
    parser.add_argument(
        '--collect-run',
        nargs=2,
        metavar=('WORK_DIR', 'SECONDS'),
        help="only write a finished run's knn.json and precision.json "
        'with its wall time into --out (the GPU call\'s main job)')
    parser.add_argument(
        '--budget',
        type=float,
        default=None,
        help='seconds; rows after it are recorded skipped')
    parser.add_argument('--device', default=None)
    parser.add_argument('--out')
    parser.add_argument('--table')
    parser.add_argument(
        '--report',
        nargs='+',
        metavar='JSON',
        help="print the tables of earlier runs' jsons (nothing is run)")
    args = parser.parse_args(argv)
    if args.report:
        for path in args.report:
            with open(path) as f:
                record = json.load(f)
            print(f"\n{path}: {record['versions'].get('device')}, torch "
                  f"{record['versions'].get('torch')}, matrix rate "
                  f"{record['matmul_tflops']:.0f} TFLOP/s")
            print(table(record['rows'], record['matmul_tflops']))
        return None
    if args.collect_run:
        return collect_run(*args.collect_run, args.out)
    amps = [a for a in args.amp if a != 'fp32']
    device = B.setup(parser, args.device, amps, 'gpu_pace')
    start = time.perf_counter()
    env = B.versions(device)
    tflops = matmul_tflops(device)
    print(
        f"device: {env['device']}; torch {env['torch']}, CUDA "
        f"{env['cuda']}; matrix rate {tflops:.0f} TFLOP/s "
        f"({'bf16 8192^3' if device.type == 'cuda' else 'fp32 1024^3'})",
        flush=True)
    results = []
    for spec in plan(args):
        spec = dict(dict(before=False, compile_=False, sections=False), **spec)
        if args.budget is not None and \
                time.perf_counter() - start > args.budget:
            r = dict(
                spec,
                compile=spec.pop('compile_'),
                skipped='time budget spent')
            r.pop('sections')
            results.append(r)
            continue
        r = row(spec['setting'], spec['arch'], args, device,
                None if spec['amp'] == 'fp32' else spec['amp'], spec['batch'],
                spec['optimizer'], spec['before'], spec['compile_'],
                spec['sections'])
        r['amp'] = spec['amp']
        results.append(r)
        print(table([r], tflops).splitlines()[-1], flush=True)
        if 'sections' in r:
            print('  sections (s): ' +
                  ', '.join(f'{k} {v:.4f}' for k, v in r['sections'].items()))
        if args.out:  # after every row: a call cut short keeps them
            write(args.out, env, tflops, args, start, results)
    text = table(results, tflops)
    print(text)
    record = write(args.out, env, tflops, args, start, results)
    if args.table:
        with open(args.table, 'w') as f:
            f.write(text + '\n')
    return record


if __name__ == '__main__':
    main()
