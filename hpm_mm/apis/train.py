"""Training from Python: a config in, a trained runner out."""
import importlib.util
import logging
import os
from typing import Optional, Union

from mmengine.config import Config

from hpm_mm.errors import HPMError
from .config import run_config


def train_config(config: Union[str, Config],
                 work_dir: Optional[str] = None,
                 resume: Union[bool, str, None] = None,
                 amp: bool = False,
                 quiet: bool = False,
                 tensorboard: bool = False,
                 validate: bool = True,
                 auto_scale_lr: bool = False,
                 launcher: str = 'none',
                 cfg_options: Optional[dict] = None,
                 pin_memory: bool = True,
                 persistent_workers: bool = True,
                 **overrides) -> Config:
    """The config of a training run, as ``tools/train.py`` makes it: ``config``
    (a file or a Config) with ``cfg_options`` (checked) and ``overrides``
    (top-level keys merged) and the tool's flags: ``resume`` (True: the work
    dir's newest checkpoint of this run, beside the config's ``load_from``
    the resume room's rule: :class:`~hpm_mm.engine.resume.RunResume`; a
    path), ``amp`` (``precision='auto'``
    over the config's, with a warning), ``quiet`` (``console='quiet'``),
    ``tensorboard``, ``validate``, ``auto_scale_lr``, ``launcher``,
    ``pin_memory`` and ``persistent_workers`` (False: off in every loader). A
    config or option that cannot work is one HPMError line."""
    flags = {k: v for k, v in locals().items() if k in FLAGS}
    for name, value in flags.items():  # amp='no' would count as True
        if not isinstance(value, bool):
            raise HPMError(f'{name}={value!r}: give True or False.')
    if work_dir is not None and not isinstance(work_dir, (str, os.PathLike)):
        raise HPMError(f'work_dir={work_dir!r}: give a folder path.')
    if resume is not None and not isinstance(resume, (bool, str, os.PathLike)):
        raise HPMError(f'resume={resume!r}: give True, a path, or False.')
    cfg = run_config(config, work_dir, launcher, overrides, cfg_options)
    if resume is True or resume == 'auto':  # load_from kept: the resume
        cfg.resume = True  # room's rule (hpm_mm.engine.resume) reads it
    elif resume:  # a path: the runner's resume room reads it as asked for
        cfg.resume, cfg.load_from = os.fspath(resume), None
    if amp:  # the command line wins over the config, as --cfg-options
        if cfg.get('precision') not in (None, 'auto'):
            from mmengine.logging import print_log
            print_log(
                f"--amp sets precision='auto' over the config's "
                f"precision={cfg.precision!r}", 'current', logging.WARNING)
        cfg.precision = 'auto'
    if auto_scale_lr:
        cfg.auto_scale_lr.enable = True
    if not validate:
        cfg.val_cfg = cfg.val_dataloader = cfg.val_evaluator = None
    if tensorboard:
        if importlib.util.find_spec('tensorboard') is None:
            raise HPMError('--tensorboard: the tensorboard package is not '
                           'installed. Fix: pip install tensorboard')
        backends = cfg.visualizer.setdefault('vis_backends', [])
        if not any(b.get('type') == 'TensorboardVisBackend' for b in backends):
            backends.append(dict(type='TensorboardVisBackend'))
    if quiet:
        cfg.console = 'quiet'
    for key in ('pin_memory', 'persistent_workers'):
        for split in ('train', 'val', 'test'):  # False: off in every loader
            loader = cfg.get(f'{split}_dataloader')
            if not flags[key] and loader is not None:
                loader[key] = False
    return cfg


#: train_config's switches (True or False)
FLAGS = ('amp', 'quiet', 'tensorboard', 'validate', 'auto_scale_lr',
         'pin_memory', 'persistent_workers')

#: mmengine's runners and hpm_mm's, which add the run's policy to them
POLICY_RUNNERS = dict(Runner='HPMRunner', FlexibleRunner='HPMFlexibleRunner')


def build_runner(cfg: Config):
    """The runner of ``cfg`` as mmengine builds it (``RUNNERS.build``),
    hpm_mm's runner where the config names none; mmengine's own two runners
    (without the run's policy) are refused in one line naming hpm_mm's twin."""
    from mmengine.registry import RUNNERS

    import hpm_mm.engine  # noqa: F401  (registers the runners)
    kind = cfg.get('runner_type')
    if kind in POLICY_RUNNERS:
        raise HPMError(f"runner_type='{kind}' lacks hpm_mm's run policy. "
                       f"Fix: runner_type='{POLICY_RUNNERS[kind]}'.")
    if kind is None:
        cfg.runner_type = 'HPMFlexibleRunner' if cfg.get(
            'strategy') is not None else 'HPMRunner'
    return RUNNERS.build(cfg)


def train(config: Union[str, Config],
          work_dir: Optional[str] = None,
          **kwargs):
    """Train from a config file or a loaded config (:func:`train_config`'s
    arguments) and return the runner after training (a refusal of the run's
    policy is one HPMError line)::

        runner = train(
            'configs/hpm/hpm_vit-mini-p4_1xb256-coslr-10e_fmnist.py',
            work_dir='work_dirs/try', train_cfg=dict(max_epochs=1))
    """
    runner = build_runner(train_config(config, work_dir, **kwargs))
    runner.train()
    return runner
