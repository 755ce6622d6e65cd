"""HPM's and MAE's training step side by side in one run, on a CPU or a GPU
(``--help``: the options; ``--report FILE.json ...`` prints saved rows).

A row: one model's own ``train_step`` (mmpretrain's MAE, hpm_mm's HPM at
alpha 0.5, :data:`SETTINGS`) on random images, after what a run's hooks
push; x MAE: against the MAE row of the same arch, batch, precision,
optimizer, compile and kernel; the FLOP model counts forward x3 for the
trained parts, x1 for the teacher (the columns: docs/speed.md, "On a GPU").
``--sections``: HPM's modules timed; ``--load-bench``: a ViT-B checkpoint's
integrity check and load; ``--budget``: the rows after it are skipped.
"""
import argparse
import copy
import itertools
import json
import os.path as osp
import statistics
import time
from contextlib import contextmanager

import torch

REPO = osp.dirname(osp.dirname(osp.abspath(__file__)))
HPM_CFG = osp.join(REPO, 'configs', '_base_', 'models', 'hpm_vit-base-p16.py')
MAE_CFG = 'mmpretrain::_base_/models/mae_vit-base-p16.py'
MINI = dict(
    hpm='configs/hpm/hpm_vit-mini-p4_1xb256-coslr-10e_fmnist.py',
    mae='configs/hpm/ablations/mae_vit-mini-p4_1xb256-coslr-10e_fmnist.py')
ARCHS = {  # name: (embed_dims, depth, heads)
    't': (192, 12, 3),
    's': (384, 12, 6),
    'b': (768, 12, 12),
    'l': (1024, 24, 16),
    'toy': (32, 2, 2),  # the CPU dry run's (its decoders 32-d, 1 block)
}
# name: (HPM model overrides (dotted keys), FLOP-model arguments); None: MAE
SETTINGS = {
    'mae': (None, {}),
    'hpm': ({}, {}),
    '2blocks': ({
        'neck.predictor_depth': 2
    }, dict(pred_depth=2)),
    'half_res': ({
        'teacher.input_scale': 0.5
    }, dict(teacher_scale=0.5)),
    'fast': ({
        'neck.predictor_depth': 2,
        'teacher.input_scale': 0.5
    }, dict(pred_depth=2, teacher_scale=0.5)),
    'alpha0': ({
        'mask_generator.alpha_0': 0.,
        'mask_generator.alpha_T': 0.
    }, dict(teacher=False)),
    'teacher_bf16': ({
        'teacher.dtype': 'bfloat16'
    }, {}),
}


# -------------------------------------------------------------- FLOPs
def vit_macs(tokens: int, dim: int, depth: int, mlp: float = 4.) -> float:
    """Multiply-accumulates of ``depth`` transformer blocks on ``tokens``."""
    return depth * (tokens * dim * dim * (4 + 2 * mlp) + 2 * tokens**2 * dim)


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
    """(MAE MACs, HPM MACs) per image of one training step;
    ``teacher_patches``: the half-resolution teacher's; ``teacher=False``:
    alpha = 0, no teacher pass."""
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


def fast_flops(arch, img_size, pred_depth=8, teacher_scale=1., teacher=True):
    """``flop_model`` of a setting at a ViT size (patch 16)."""
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


# -------------------------------------------------------------- models
def model_cfgs(arch, img_size, overrides=None):
    """(MAE, HPM) model configs from the configs at this size (``mini``:
    the main job's Fashion-MNIST configs)."""
    from mmengine.config import Config
    from mmengine.hub import get_config  # resolves mmpretrain::
    if arch == 'mini':
        mae = Config.fromfile(osp.join(REPO, MINI['mae'])).model
        hpm = Config.fromfile(osp.join(REPO, MINI['hpm'])).model
    else:
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
        if arch == 'toy':
            neck.update(
                decoder_embed_dim=32, decoder_depth=1, decoder_num_heads=2)
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
    hpm = Config(dict(model=hpm))
    hpm.merge_from_dict({
        f'model.{k}': v
        for k, v in (overrides or {}).items()
    })
    return mae.to_dict(), hpm.model.to_dict()


def optim_wrapper(model, precision=None, optimizer='default', device='cpu'):
    """AdamW through the wrapper a run of ``precision`` (None: fp32) gets
    (hpm_mm's rule: guarded; bf16 autocast; fp16 with a dynamic scale)."""
    from mmengine.optim import build_optim_wrapper

    from hpm_mm.engine.precision import optim_wrapper_cfg, run_precision
    cfg = dict(
        type='GuardedOptimWrapper',
        optimizer=dict(type='AdamW', lr=1e-4, betas=(0.9, 0.95)))
    if optimizer != 'default':
        cfg['optimizer'][optimizer] = True  # fused / foreach
    rule = run_precision(dict(precision=precision or 'fp32'), str(device))
    return build_optim_wrapper(model, optim_wrapper_cfg(cfg, rule))


# -------------------------------------------------------------- timing
class DeviceOps:
    """What timing needs of a device: wait for its queued work, reset and
    read its peak memory (CUDA; None elsewhere)."""

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

    @contextmanager
    def section(self, name):
        self.ops.sync()
        self.open.append(name)
        t = time.perf_counter()
        try:
            yield
        finally:
            self.ops.sync()
            self.times.setdefault(name, []).append(time.perf_counter() - t)
            self.open.pop()

    def wrap(self, obj, method, name):
        """Time every call of ``obj.method``; returns the undo."""
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


def count_ops(model, optim, data):
    """Operator calls of one step (each one GPU kernel launch or more) and
    the busiest operators by name (``_to_copy``: dtype casts)."""
    from collections import Counter

    from torch.utils._python_dispatch import TorchDispatchMode
    calls = Counter()

    class Count(TorchDispatchMode):

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            calls[func.overloadpacket.__name__] += 1
            return func(*args, **(kwargs or {}))

    with Count():
        model.train_step(copy.copy(data), optim)
    return sum(calls.values()), dict(calls.most_common(12))


def measure(cfg,
            x,
            iters=5,
            precision=None,
            breakdown=False,
            warmup=1,
            ops=None,
            optimizer='default',
            compile_=None,
            syncs=False,
            ops_count=False,
            sdpa='default'):
    """One row's numbers: median step, images/s, first step (compile),
    peak memory, skipped steps, and as asked the sections, the host syncs
    and the operator calls; ``dict(oom=True)`` when it does not fit."""
    ops = ops or DeviceOps(x.device)
    from contextlib import nullcontext
    if sdpa == 'default':
        kernel = nullcontext()
    else:  # one of torch's attention kernels, alone
        from torch.nn.attention import SDPBackend, sdpa_kernel
        kernel = sdpa_kernel(getattr(SDPBackend, SDPA[sdpa]))
    try:
        with kernel:
            return _measure(cfg, x, iters, precision, breakdown, warmup, ops,
                            optimizer, compile_, syncs, ops_count)
    except torch.OutOfMemoryError:
        if x.device.type == 'cuda':
            torch.cuda.empty_cache()
        return dict(oom=True)
    except RuntimeError as e:  # e.g. an attention kernel this card lacks
        if sdpa == 'default':
            raise
        return dict(skipped=str(e).splitlines()[0][:120])


def trainer(cfg, device, precision=None, optimizer='default', compile_=None):
    """The model of ``cfg`` on ``device`` (seed 0; the teacher scoring, its
    ramp done), its optimizer wrapper and ``step(data)``: what a run's hooks
    push before an iteration (HPMScheduleHook's progress, a CUDA-graph
    generation), then the model's own ``train_step``. ``compile_``: None, or
    torch.compile's options (mode 'reduce-overhead': CUDA graphs)."""
    from mmpretrain.registry import MODELS
    torch.manual_seed(0)
    model = MODELS.build(cfg).to(device)
    model.init_weights()
    model.train()
    if hasattr(model, 'set_progress'):
        model.set_progress(1.0, epoch=1, max_epochs=1)
    optim = optim_wrapper(model, precision, optimizer, device)
    compiled, options = [], compile_ if isinstance(compile_, dict) else {}
    if isinstance(compile_, dict):  # ({}: torch.compile's defaults) from a
        torch._dynamo.reset()  # fresh state: no row reuses another's graphs
        from hpm_mm.models.selfsup.base import HPMBase
        if not isinstance(model, HPMBase):  # mmpretrain's MAE: its parts
            model.teacher = None  # compiled as HPM's are (block by block)
        compiled = HPMBase.compile_parts(model, **options)
    graphs = options.get('mode') in ('reduce-overhead', 'max-autotune')

    def step(data):
        if hasattr(model, 'set_progress'):
            model.set_progress(1.0, 1, optim.step_calls, 1, optim.last_applied)
        if graphs:
            torch.compiler.cudagraph_mark_step_begin()
        model.train_step(copy.copy(data), optim)

    step.compiled = compiled  # the parts compiled (an empty dict of
    return model, optim, step  # options compiles too: it once did not)


def _measure(cfg, x, iters, precision, breakdown, warmup, ops, optimizer,
             compile_, syncs, ops_count):
    model, optim, step = trainer(cfg, x.device, precision, optimizer, compile_)
    data = dict(inputs=x, data_samples=None)
    timer = Timer(ops)
    t0 = time.perf_counter()
    for _ in range(max(1, warmup)):
        step(data)
    ops.sync()
    out = dict(first_steps_s=time.perf_counter() - t0, compiled=step.compiled)
    ops.reset_peak()
    for _ in range(iters):
        with timer.section('step'):
            step(data)
    out['step'] = statistics.median(timer.times.pop('step'))
    out['img_s'] = x.shape[0] / out['step']
    peak = ops.peak_gib()
    if peak is not None:
        out['peak_mem_gib'] = peak
    if syncs:
        from hpm_mm.testing.host_sync import HostSyncCounter
        cuda = x.device.type == 'cuda'
        with HostSyncCounter(device=x.device if cuda else None) as counter:
            step(data)
        out['syncs'], out['sync_ops'] = counter.count, dict(counter.ops)
    if ops_count and not isinstance(compile_, dict):  # (a dispatch mode
        # runs compiled code eager: a compiled row would count eager ops)
        out['ops_per_step'], out['top_ops'] = count_ops(model, optim, data)
    if breakdown:
        undo = sections(model, timer)
        for _ in range(iters):
            with timer.section('timed_step'):
                step(data)
        for u in undo:
            u()
        steps = timer.times.pop('timed_step')
        per_step = {k: sum(v) / len(steps) for k, v in timer.times.items()}
        per_step['rest'] = statistics.median(steps) - sum(per_step.values())
        out.update(per_step)
    out['skipped_steps'] = int(getattr(optim, 'skipped_steps', 0))
    return out


def matmul_tflops(device, reps=10):
    """The device's matrix rate (TFLOP/s): CUDA bf16 8192^3, CPU fp32
    1024^3; median of ``reps`` after 3 warm-ups."""
    ops = DeviceOps(device)
    cuda = device.type == 'cuda'
    n, dtype = (8192, torch.bfloat16) if cuda else (1024, torch.float32)
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


def load_bench(folder):
    """Seconds of hpm_mm's integrity check (the zip CRCs) and of the
    weights-only load of a ViT-B HPM checkpoint with its AdamW state."""
    from mmpretrain.registry import MODELS

    from hpm_mm.engine import safe_load
    model = MODELS.build(model_cfgs('b', 224)[1])
    optim = optim_wrapper(model)
    model.train_step(
        dict(inputs=torch.randn(1, 3, 224, 224), data_samples=None), optim)
    path = osp.join(folder, 'vit-b_hpm.pth')
    torch.save(
        dict(state_dict=model.state_dict(), optimizer=optim.state_dict()),
        path)
    gb, out = osp.getsize(path) / 1e9, {}
    for name, fn in (('crc_check', safe_load.checkpoint_problem),
                     ('torch_load', safe_load.load_file)):
        safe_load._problem.cache_clear()
        t = time.perf_counter()
        fn(path)
        out[name] = time.perf_counter() - t
    return dict(out, gb=gb, crc_s_per_gb=out['crc_check'] / gb)


# -------------------------------------------------------------- the rows
#: --sdpa: torch's attention kernels by name
SDPA = dict(
    flash='FLASH_ATTENTION',
    efficient='EFFICIENT_ATTENTION',
    cudnn='CUDNN_ATTENTION',
    math='MATH')


def compiled(mode) -> str:
    """The table's note of a row's compile setting."""
    return '' if not mode else ', compile' if mode in (
        True, 'default') else f', compile {mode}'


def row(args, spec, device, ops):
    """One row: its ``spec``, its numbers and its FLOP model."""
    setting, arch, batch = spec['setting'], spec['arch'], spec['batch']
    precision, optimizer = spec['precision'], spec['optimizer']
    overrides, flop_args = SETTINGS[setting]
    size = 28 if arch == 'mini' else args.img_size
    mae_cfg, hpm_cfg = model_cfgs(arch, size, overrides)
    channels = 1 if arch == 'mini' else 3
    x = torch.randn(batch, channels, size, size, device=device)
    out = dict(spec)
    out.update(
        measure(
            mae_cfg if overrides is None else hpm_cfg,
            x,
            args.iters,
            None if precision == 'fp32' else precision,
            breakdown=args.sections and overrides is not None,
            warmup=args.warmup,
            ops=ops,
            optimizer=optimizer,
            compile_=spec['compile']
            and dict({} if spec['compile'] == 'default' else dict(
                mode=spec['compile']),
                     **({} if not args.compile_backend else dict(
                         backend=args.compile_backend))),
            syncs=True,
            ops_count=args.count_ops,
            sdpa=spec.get('sdpa', 'default')))
    if arch not in ('mini', 'toy'):
        f_mae, f_hpm = fast_flops(arch, size, **flop_args)
        out['macs'] = f_mae if overrides is None else f_hpm
        out['flop_ratio'] = out['macs'] / f_mae
    return out


def table(rows, tflops):
    """The markdown table of ``rows`` (x MAE: against the MAE row of the
    same arch, batch, precision, optimizer and compile)."""

    def key(r):
        return (r['arch'], r['batch'], r['precision'], r['optimizer'],
                r['compile'], r.get('sdpa', 'default'))

    mae = {key(r): r for r in rows if r['setting'] == 'mae' and 'step' in r}
    lines = [
        '| ViT | batch | precision | row | step (s) | images/s | x MAE | '
        'FLOP model | MFU | syncs | ops | peak GiB |', '|---' * 12 + '|'
    ]
    for r in rows:
        sdpa = r.get('sdpa', 'default')
        head = (f"| {r['arch']} | {r['batch']} | {r['precision']} | "
                f"{r['setting']}, {r['optimizer']}{compiled(r['compile'])}"
                f"{'' if sdpa == 'default' else ', ' + sdpa} |")
        if 'step' not in r:
            why = 'OOM' if r.get('oom') else r.get('skipped', 'failed')
            lines.append(head + f' {why} |' + ' |' * 7)
            continue
        base = mae.get(key(r))
        ratio = f"{r['step'] / base['step']:.2f}x" if base else '-'
        flops = f"{r['flop_ratio']:.2f}x" if 'flop_ratio' in r else '-'
        mfu = (f"{100 * r['img_s'] * 2 * r['macs'] / (tflops * 1e12):.1f}%"
               if 'macs' in r else '-')
        mem = f"{r['peak_mem_gib']:.1f}" if 'peak_mem_gib' in r else '-'
        lines.append(head + f" {r['step']:.4f} | {r['img_s']:.0f} | {ratio} | "
                     f"{flops} | {mfu} | {r.get('syncs', '-')} | "
                     f"{r.get('ops_per_step', '-')} | {mem} |")
    return '\n'.join(lines)


def versions(device):
    """torch, CUDA and the device's name, for the record."""
    out = dict(torch=torch.__version__, cuda=torch.version.cuda)
    out['device'] = torch.cuda.get_device_name(device) \
        if device.type == 'cuda' else \
        f'CPU ({torch.get_num_threads()} threads)'
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        '--arch', nargs='+', default=['b'], choices=list(ARCHS) + ['mini'])
    parser.add_argument('--batch', nargs='+', type=int, default=[8])
    parser.add_argument(
        '--precision',
        nargs='+',
        default=['fp32'],
        choices=['fp32', 'bf16', 'fp16'])
    parser.add_argument(
        '--optimizer',
        nargs='+',
        default=['default'],
        choices=['default', 'fused', 'foreach'])
    parser.add_argument(
        '--rows',
        nargs='*',
        default=['mae', 'hpm', 'fast'],
        choices=list(SETTINGS))
    parser.add_argument(
        '--compile',
        nargs='?',
        const='default',
        default=False,
        choices=['default', 'reduce-overhead', 'max-autotune'],
        help='torch.compile the parts (reduce-overhead: CUDA graphs)')
    parser.add_argument(
        '--compile-backend',
        help="torch.compile's backend (eager: the CPU dry run, no kernels "
        'built)')
    parser.add_argument(
        '--sdpa',
        nargs='+',
        default=['default'],
        choices=['default'] + list(SDPA),
        help="the attention kernel (default: torch's choice)")
    parser.add_argument('--sections', action='store_true')
    parser.add_argument('--count-ops', action='store_true')
    parser.add_argument('--load-bench', metavar='DIR')
    parser.add_argument('--iters', type=int, default=5)
    parser.add_argument('--warmup', type=int, default=1)
    parser.add_argument('--img-size', type=int, default=224)
    parser.add_argument('--budget', type=float)
    parser.add_argument('--device')
    parser.add_argument('--out')
    parser.add_argument('--report', nargs='+', metavar='JSON')
    args = parser.parse_args(argv)
    if args.report:
        for path in args.report:
            with open(path) as f:
                record = json.load(f)
            print(f"\n{path}: {record['versions']['device']}, torch "
                  f"{record['versions']['torch']}, matrix rate "
                  f"{record['matmul_tflops']:.0f} TFLOP/s")
            print(table(record['rows'], record['matmul_tflops']))
        return None
    from mmengine.logging import MMLogger
    from mmengine.registry import init_default_scope

    import hpm_mm  # noqa: F401
    init_default_scope('mmpretrain')
    MMLogger.get_instance('bench_step', log_level='WARNING')
    device = torch.device(
        args.device or ('cuda' if torch.cuda.is_available() else 'cpu'))
    if 'fp16' in args.precision and device.type != 'cuda':
        parser.error('--precision fp16 (a dynamic loss scale) needs CUDA')
    start, env = time.perf_counter(), versions(device)
    tflops = matmul_tflops(device)
    print(
        f"device: {env['device']}; torch {env['torch']}, CUDA "
        f"{env['cuda']}; matrix rate {tflops:.2f} TFLOP/s; median of "
        f'{args.iters} steps after {max(1, args.warmup)} warm-up',
        flush=True)
    ops, rows = DeviceOps(device), []
    record = dict(
        versions=env,
        matmul_tflops=tflops,
        img_size=args.img_size,
        iters=args.iters,
        warmup=args.warmup,
        rows=rows)

    def save():
        record['seconds'] = time.perf_counter() - start
        if args.out:
            with open(args.out, 'w') as f:
                json.dump(record, f, indent=1)

    for arch, batch, precision, optimizer, sdpa, setting in itertools.product(
            args.arch, args.batch, args.precision, args.optimizer, args.sdpa,
            args.rows):
        spec = dict(
            setting=setting,
            arch=arch,
            batch=batch,
            precision=precision,
            optimizer=optimizer,
            compile=args.compile,
            sdpa=sdpa)
        if args.budget is not None and \
                time.perf_counter() - start > args.budget:
            r = dict(spec, skipped='time budget spent')
        else:
            r = row(args, spec, device, ops)
        rows.append(r)
        print(table([r], tflops).splitlines()[-1], flush=True)
        save()  # a call cut short keeps its rows
    print(table(rows, tflops))
    if args.load_bench:
        record['load_bench'] = lb = load_bench(args.load_bench)
        print(f"ViT-B checkpoint {lb['gb']:.2f} GB: CRC check "
              f"{lb['crc_check']:.2f} s ({lb['crc_s_per_gb']:.2f} s/GB), "
              f"weights-only load {lb['torch_load']:.2f} s (with the check)")
    save()
    return record


if __name__ == '__main__':
    main()
