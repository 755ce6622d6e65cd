"""Where the main job's time goes, side by side in one process.

    python tools/analysis_tools/profile_main_job.py [--steps 4] [--out prof.json]

Times, on this machine, the parts of ``tools/main_job.sh`` (the Fashion-MNIST
HPM config): one training step at batch 256 with the teacher scoring
(alpha > 0, as in epochs 2-10) and without it (epoch 1), in fp32 and under
bf16 autocast (``--amp``), also at Fashion-MNIST's native 28 px (7 x 7
patches instead of 8 x 8: the token count); the data pipeline of one
training batch and of one kNN batch (in the main process: what a dataloader
worker spends); the encoder forward of one kNN batch (500 images, fp32 and
bf16). Medians over ``--steps`` after one warm-up. The estimate at the end
multiplies them out to the job's 400 steps and 70k kNN images.
"""
import argparse
import copy
import json
import statistics
import time

import torch

CONFIG = 'configs/hpm/hpm_vit-mini-p4_1xb256-coslr-10e_fmnist.py'


def median_time(fn, steps):
    fn()  # warm-up
    times = []
    for _ in range(steps):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--steps', type=int, default=4)
    parser.add_argument('--out')
    args = parser.parse_args(argv)
    import hpm_mm  # noqa: F401
    from mmengine.config import Config
    from mmengine.optim import build_optim_wrapper
    from mmengine.runner import Runner
    from mmpretrain.structures import DataSample

    from hpm_mm.engine.optimizers import amp_optim_wrapper_cfg
    from hpm_mm.utils import build_model
    cfg = Config.fromfile(CONFIG)
    res = dict(threads=torch.get_num_threads(), steps=args.steps)

    def step_time(amp, teacher, size=32):
        c = copy.deepcopy(cfg)
        if size != 32:
            grid = size // 4
            c.model.backbone.img_size = size
            c.model.neck.num_patches = grid * grid
        torch.manual_seed(0)
        model = build_model(c)
        model.set_progress(0.5 if teacher else 0.0, 5, 0)
        wrapper = build_optim_wrapper(
            model, amp_optim_wrapper_cfg(c.optim_wrapper, cuda=False)
            if amp else c.optim_wrapper)
        batch = dict(
            inputs=torch.randint(0, 255, (256, 1, size, size),
                                 dtype=torch.uint8),
            data_samples=[DataSample() for _ in range(256)])
        return median_time(lambda: model.train_step(batch, wrapper),
                           args.steps)

    for amp in (False, True):
        name = 'bf16' if amp else 'fp32'
        res[f'step_teacher_{name}'] = step_time(amp, True)
        res[f'step_no_teacher_{name}'] = step_time(amp, False)
        res[f'step_teacher_{name}_28px'] = step_time(amp, True, 28)

    def pipeline_time(loader_cfg, n):
        loader = Runner.build_dataloader(
            dict(loader_cfg, num_workers=0, persistent_workers=False), seed=0)
        it = iter(loader)
        return median_time(lambda: next(it), n)

    knn_hook = [h for h in cfg.custom_hooks if h.type == 'KNNEvalHook'][0]
    from mmengine.registry import init_default_scope
    init_default_scope('mmpretrain')
    res['pipeline_train_batch256'] = pipeline_time(cfg.train_dataloader,
                                                   args.steps)
    res['pipeline_knn_batch500'] = pipeline_time(knn_hook.train_dataloader,
                                                 args.steps)
    model = build_model(cfg).eval()
    x = torch.randn(500, 1, 32, 32)
    for amp in (False, True):
        def forward():
            with torch.no_grad(), torch.autocast('cpu', torch.bfloat16,
                                                 enabled=amp):
                model.extract_feat(x)
        res[f'knn_forward_batch500_{"bf16" if amp else "fp32"}'] = \
            median_time(forward, args.steps)

    print(f'torch threads: {res["threads"]}; medians of {args.steps} steps')
    for key, value in res.items():
        if key not in ('threads', 'steps'):
            print(f'{key:32s} {value:7.3f} s')
    for p in ('fp32', 'bf16'):
        train = 40 * res[f'step_no_teacher_{p}'] + \
            360 * res[f'step_teacher_{p}']
        knn = 140 * res[f'knn_forward_batch500_{p}']
        res[f'estimate_train_{p}'], res[f'estimate_knn_{p}'] = train, knn
        print(f'{p}: 400 steps ~{train:.0f} s + kNN forward of 70k images '
              f'~{knn:.0f} s')
    print(f'bf16 / fp32 step (teacher): '
          f'{res["step_teacher_bf16"] / res["step_teacher_fp32"]:.2f}; '
          f'28 px / 32 px step (fp32): '
          f'{res["step_teacher_fp32_28px"] / res["step_teacher_fp32"]:.2f}; '
          f'pipeline share of a step: '
          f'{res["pipeline_train_batch256"] / res["step_teacher_bf16"]:.1%}')
    if args.out:
        with open(args.out, 'w') as f:
            json.dump(res, f, indent=2)
    return res


if __name__ == '__main__':
    main()
