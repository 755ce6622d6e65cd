"""Train a model from a config (mmpretrain's CLI conventions).

    python tools/train.py CONFIG [--work-dir DIR] [--resume [CKPT]] [--amp]
                          [--quiet] [--tensorboard]
                          [--cfg-options k=v ...] [--launcher pytorch]
"""
import argparse
import json
import os
import os.path as osp

from mmengine.config import Config
from mmengine.dist import is_main_process
from mmengine.runner import Runner

import hpm_mm  # noqa: F401,I001  (first: registers modules, quiets imports)
from hpm_mm.utils.cli import CfgOptionsAction, load_config, merge_cfg_options


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description='Train a model')
    parser.add_argument('config', help='train config file path')
    parser.add_argument('--work-dir', help='the dir to save logs and models')
    parser.add_argument(
        '--resume',
        nargs='?',
        type=str,
        const='auto',
        help='resume from this checkpoint, or from the latest checkpoint in '
        'the work_dir when no path is given')
    parser.add_argument(
        '--amp',
        action='store_true',
        help='mixed precision where the hardware computes it faster: fp16 '
        'with a dynamic loss scale on CUDA; bf16 autocast on a CPU with '
        'native bf16 (AVX512-BF16/AMX, confirmed by a timed probe), fp32 on '
        'others (e.g. AVX2), said in the first console line')
    parser.add_argument(
        '--quiet',
        action='store_true',
        help='console: one line per epoch (ConsoleProgressHook) and warnings; '
        'the environment, the config and every logged line stay in the work '
        "dir's log file")
    parser.add_argument(
        '--tensorboard',
        action='store_true',
        help='also log to TensorBoard (work_dir/<timestamp>/vis_data): the '
        'loss curves, kNN and the hard-patch grids')
    parser.add_argument(
        '--check-data',
        action='store_true',
        help='open every image file of the config first (as '
        'tools/misc/check_data.py) and stop on any problem')
    parser.add_argument(
        '--no-validate',
        action='store_true',
        help='skip the validation loop during training')
    parser.add_argument(
        '--auto-scale-lr',
        action='store_true',
        help='scale the lr by total batch / auto_scale_lr.base_batch_size')
    parser.add_argument(
        '--no-pin-memory', action='store_true', help='pin_memory=False')
    parser.add_argument(
        '--no-persistent-workers',
        action='store_true',
        help='persistent_workers=False')
    parser.add_argument(
        '--cfg-options',
        nargs='+',
        action=CfgOptionsAction,
        help='override settings of the config, key=value (xxx=[a,b] lists)')
    parser.add_argument(
        '--launcher',
        choices=['none', 'pytorch', 'slurm', 'mpi'],
        default='none',
        help='job launcher')
    parser.add_argument('--local_rank', '--local-rank', type=int, default=0)
    args = parser.parse_args(argv)
    os.environ.setdefault('LOCAL_RANK', str(args.local_rank))
    return args


def merge_args(cfg: Config, args) -> Config:
    """Fold the command-line switches into the config."""
    cfg.launcher = args.launcher
    if args.work_dir is not None:
        cfg.work_dir = args.work_dir
    elif cfg.get('work_dir') is None:
        cfg.work_dir = osp.join('./work_dirs',
                                osp.splitext(osp.basename(args.config))[0])

    cfg.precision = choose_run_precision(cfg, args.amp).to_dict()

    if args.resume == 'auto':
        cfg.resume = True
        cfg.load_from = None
    elif args.resume is not None:
        cfg.resume = True
        cfg.load_from = args.resume

    if args.auto_scale_lr:
        cfg.auto_scale_lr.enable = True

    if args.no_validate:
        cfg.val_cfg = cfg.val_dataloader = cfg.val_evaluator = None

    def set_loader(key, value):
        for split in ('train', 'val', 'test'):
            loader = cfg.get(f'{split}_dataloader')
            if loader is not None:
                loader[key] = value

    if args.no_pin_memory:
        set_loader('pin_memory', False)
    if args.no_persistent_workers:
        set_loader('persistent_workers', False)

    if args.tensorboard:
        try:
            import tensorboard  # noqa: F401
        except ImportError:
            raise SystemExit('train.py --tensorboard: the tensorboard package '
                             'is not installed. Fix: pip install tensorboard')
        backends = cfg.visualizer.setdefault('vis_backends', [])
        if not any(b.get('type') == 'TensorboardVisBackend' for b in backends):
            backends.append(dict(type='TensorboardVisBackend'))
    if args.quiet:
        cfg.custom_hooks = list(cfg.get(
            'custom_hooks', [])) + [dict(type='ConsoleProgressHook')]

    if args.cfg_options is not None:
        merge_cfg_options(cfg, args.cfg_options)
    from hpm_mm.utils.schedule import check_run_length
    check_run_length(cfg)  # the lr schedule and the teacher fit the run
    return cfg


def resolve_resume(cfg: Config) -> None:
    """What ``--resume`` (or ``resume = True``) resumes from, checked.

    Without a path: the newest complete checkpoint of the work dir
    (``last_checkpoint`` when it names a complete file, else the newest
    complete ``epoch_N/iter_N.pth``), naming every file skipped; with
    checkpoints present but none complete it refuses to start from scratch
    over them. With a path: that file must be a complete checkpoint.
    """
    if not cfg.get('resume'):
        return
    from mmengine.logging import print_log

    from hpm_mm.utils import checkpoint_problem, find_resume_checkpoint
    path = cfg.get('load_from')
    if path:
        problem = None if '://' in path else checkpoint_problem(path)
        if problem:
            newest, _ = find_resume_checkpoint(osp.dirname(path) or '.')
            hint = f' The newest complete one there: --resume {newest}' \
                if newest else ''
            raise SystemExit(
                f'train.py: cannot resume from {path}: {problem}.{hint}')
        return
    path, skipped = find_resume_checkpoint(cfg.work_dir)
    for line in skipped:
        print_log(f'resume: skipped {line}', logger='current', level=30)
    if path:
        cfg.load_from = path
        print_log(f'resume: from {path}', logger='current')
    elif skipped:
        raise SystemExit(
            f'train.py: --resume found no complete checkpoint in '
            f'{cfg.work_dir} ({"; ".join(skipped)}) and will not train from '
            'scratch over them. Fix: move them away, or pass --resume PATH.')
    else:
        print_log(
            f'resume: no checkpoint in {cfg.work_dir} yet: training '
            'from scratch',
            logger='current',
            level=30)


def choose_run_precision(cfg: Config, amp: bool):
    """The run's precision (:func:`hpm_mm.utils.precision.choose_precision`:
    mixed precision only where the hardware computes it faster), its
    optimizer wrapper set to match; printed as the console's first line."""
    from hpm_mm.engine.optimizers.autocast_optim_wrapper import (
        AMP_TYPES, amp_optim_wrapper_cfg)
    from hpm_mm.utils.precision import Precision, choose_precision
    kind = cfg.optim_wrapper.get('type')
    if kind == 'AutocastOptimWrapper' and not amp:  # the config's own choice
        precision = Precision('bf16', None, 'any', '-',
                              "the config's AutocastOptimWrapper")
    else:
        asked = amp or kind in AMP_TYPES or kind == 'AutocastOptimWrapper'
        precision = choose_precision(asked)
        if asked:
            cfg.optim_wrapper = amp_optim_wrapper_cfg(cfg.optim_wrapper,
                                                      precision)
    if os.environ.get('RANK', '0') == '0':
        print(precision.line(), flush=True)
    return precision


def main(argv=None):
    args = parse_args(argv)
    cfg = merge_args(load_config(args.config, 'train.py'), args)
    lock = None  # held until the run ends
    if os.environ.get('RANK', '0') == '0':  # one run per work dir
        from hpm_mm.utils.work_dir import WorkDirBusy, own_work_dir
        try:
            lock = own_work_dir(cfg.work_dir)  # noqa: F841 (held to exit)
        except WorkDirBusy as e:
            raise SystemExit(str(e))
    resolve_resume(cfg)
    if args.check_data:
        from hpm_mm.utils.data_check import check_data
        result = check_data(cfg)
        print('\n'.join(result['report']))
        if result['problems']:
            raise SystemExit('train.py --check-data: ' +
                             '\n'.join(result['problems']))
    from hpm_mm.utils import setup_cpu_distributed
    setup_cpu_distributed(cfg)  # gloo + CPU DDP when there is no GPU
    runner_cls = Runner
    if cfg.get('strategy') is not None or \
            cfg.get('runner_type') == 'FlexibleRunner':
        # mmengine's FlexibleRunner: FSDP / DeepSpeed / ... strategies
        from mmengine.runner import FlexibleRunner
        runner_cls = FlexibleRunner
    if args.quiet:
        from hpm_mm.engine.hooks import QuietConsoleMixin
        runner_cls = type(f'Quiet{runner_cls.__name__}',
                          (QuietConsoleMixin, runner_cls), {})
    runner = runner_cls.from_cfg(cfg)
    if cfg.get('load_from') and not cfg.get('resume'):
        check_load_from(runner, cfg.load_from)
    elif cfg.get('load_from') and cfg.get('resume'):
        check_resume_fits(runner, cfg.load_from)
    if is_main_process():  # what ran, for whoever reads the work dir
        with open(osp.join(runner.work_dir, 'precision.json'), 'w') as f:
            json.dump(cfg.precision, f, indent=2)
    runner.train()
    check_skipped_steps(runner)


def check_load_from(runner, path: str) -> None:
    """Refuse a ``load_from`` checkpoint that fills less than half of the
    model's weights (by name and shape): a checkpoint of another
    architecture, which mmengine would load with a warning and then train
    from scratch. (A pretraining checkpoint fine-tuned through load_from
    fills the whole encoder; only a small head stays new.)"""
    from mmpretrain.utils import get_ori_model

    from hpm_mm.utils import checkpoint_state, share_of_model
    model = get_ori_model(runner.model)
    share = share_of_model(model, checkpoint_state(model, path))
    if share < 0.5:
        raise SystemExit(
            f'train.py: load_from={path} fills {100 * share:.1f}% of this '
            'model\'s weights (by name and shape): it is a checkpoint of '
            'another architecture, and training would start almost from '
            'scratch. Fix: a checkpoint of this architecture, or convert '
            'it (tools/model_converters/hpm2backbone.py) and load it '
            'through the backbone\'s init_cfg.')


def check_resume_fits(runner, path: str) -> None:
    """Refuse ``--resume`` of a checkpoint that does not fill this config's
    model (the architecture changed since it was written), in one line,
    before mmengine fails on unrelated tensor errors."""
    from mmpretrain.utils import get_ori_model

    from hpm_mm.utils import checkpoint_mismatch, checkpoint_state
    model = get_ori_model(runner.model)
    problem = checkpoint_mismatch(model, checkpoint_state(model, path),
                                  f'--resume {path}')
    if problem:
        raise SystemExit(
            f'train.py: {problem}: the config changed since the checkpoint '
            'was written. Fix: resume with the config it was trained with '
            '(its copy is in the work dir), or start a new work dir, with '
            '--cfg-options load_from=CKPT to start from its weights.')


def check_skipped_steps(runner) -> None:
    """A run that ends having skipped more optimizer steps (non-finite loss
    or gradients) than it applied trained on almost nothing: fail it in
    one line instead of exiting 0 (runs shorter than the guard's limit of
    consecutive skips would otherwise pass)."""
    wrapper = runner.optim_wrapper
    wrappers = wrapper.values() if hasattr(wrapper, 'values') else [wrapper]
    for w in wrappers:
        skipped = getattr(w, 'skipped_steps', 0)
        applied = getattr(w, 'applied_steps', 0)
        if skipped and skipped >= applied:
            raise SystemExit(
                f'train.py: {skipped} of {skipped + applied} optimizer steps '
                'were skipped (non-finite loss or gradients): the checkpoints '
                'hold a model that barely trained. Fix: lower optimizer.lr '
                'or set clip_grad, check the data, and train again.')


if __name__ == '__main__':
    main()
