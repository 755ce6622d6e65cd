"""Training from Python: a config in, a trained runner out."""
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
                 **overrides) -> Config:
    """The config of a training run, as ``tools/train.py`` makes it.

    Args:
        config (str | Config): A config file or a loaded config.
        work_dir (str, optional): Defaults to the config's, else
            ``work_dirs/<config name>``.
        resume (bool | str, optional): True: the newest complete checkpoint
            of the work dir (from scratch when there is none); a path: that
            checkpoint.
        amp (bool): Mixed precision where it makes the run faster:
            ``precision='auto'`` (the runner's precision rule decides, on a
            CPU by timing the run's own step; an AMP config asks by itself).
        quiet (bool): Console of one line per epoch, the precision line and
            warnings (``console='quiet'``); the log file keeps everything.
        tensorboard (bool): Also log to TensorBoard.
        validate (bool): False drops the validation loop.
        auto_scale_lr (bool): Scale the lr by the total batch.
        launcher (str): ``'none'``, ``'pytorch'``, ``'slurm'`` or ``'mpi'``.
        cfg_options (dict, optional): ``key.sub=value`` overrides (as
            ``--cfg-options``), checked: a key nothing reads or a value of
            the wrong type is refused.
        **overrides: Top-level keys merged into the config (dicts merge key
            by key, e.g. ``train_cfg=dict(max_epochs=2)``).

    Raises:
        HPMError: A config or option that cannot work, in one line.
    """
    check_arguments(
        dict(
            amp=amp,
            quiet=quiet,
            tensorboard=tensorboard,
            validate=validate,
            auto_scale_lr=auto_scale_lr),
        work_dir=work_dir,
        resume=resume,
        launcher=launcher)
    cfg = run_config(config, work_dir, launcher, overrides, cfg_options)
    if resume is True or resume == 'auto':
        cfg.resume, cfg.load_from = True, None
    elif resume:
        cfg.resume, cfg.load_from = True, resume
    if amp:  # the runner's rule chooses what the hardware computes fastest
        cfg.precision = 'auto'
    if auto_scale_lr:
        cfg.auto_scale_lr.enable = True
    if not validate:
        cfg.val_cfg = cfg.val_dataloader = cfg.val_evaluator = None
    if tensorboard:
        try:
            import tensorboard  # noqa: F401
        except ImportError:
            raise HPMError('--tensorboard: the tensorboard package is not '
                           'installed. Fix: pip install tensorboard') from None
        backends = cfg.visualizer.setdefault('vis_backends', [])
        if not any(b.get('type') == 'TensorboardVisBackend' for b in backends):
            backends.append(dict(type='TensorboardVisBackend'))
    if quiet:
        cfg.console = 'quiet'
    return cfg


LAUNCHERS = ('none', 'pytorch', 'slurm', 'mpi')


def check_arguments(flags: dict,
                    work_dir=None,
                    resume=None,
                    launcher='none') -> None:
    """Refuse, in one line, an argument of the wrong type (``amp='no'``
    would otherwise count as True) or value."""
    import os
    for name, value in flags.items():
        if not isinstance(value, bool):
            raise HPMError(f'{name}={value!r}: give True or False.')
    if work_dir is not None and not isinstance(work_dir, (str, os.PathLike)):
        raise HPMError(f'work_dir={work_dir!r}: give a folder path.')
    if resume is not None and not isinstance(resume, (bool, str, os.PathLike)):
        raise HPMError(f'resume={resume!r}: give True (the newest complete '
                       'checkpoint of the work dir), a checkpoint path, or '
                       'False.')
    if launcher not in LAUNCHERS:
        raise HPMError(f'launcher={launcher!r}: give one of '
                       f'{", ".join(LAUNCHERS)}.')


def set_loaders(cfg: Config, key: str, value) -> None:
    """Set ``key`` of every dataloader of ``cfg`` (train, val, test)."""
    for split in ('train', 'val', 'test'):
        loader = cfg.get(f'{split}_dataloader')
        if loader is not None:
            loader[key] = value


#: mmengine's runners and hpm_mm's, which add the run's policy to them
POLICY_RUNNERS = dict(Runner='HPMRunner', FlexibleRunner='HPMFlexibleRunner')


def build_runner(cfg: Config):
    """The runner of ``cfg`` as mmengine builds it (``RUNNERS.build``).
    A config without ``runner_type`` gets :class:`~hpm_mm.engine.HPMRunner`
    (:class:`~hpm_mm.engine.HPMFlexibleRunner` with a ``strategy``), so
    every config gets hpm_mm's run policy; an explicit ``runner_type`` is
    left as it is, except mmengine's own two, which would run without the
    policy and are refused in one line naming hpm_mm's twin.

    Raises:
        HPMError: ``runner_type='Runner'`` or ``'FlexibleRunner'``.
    """
    from mmengine.registry import RUNNERS

    import hpm_mm.engine  # noqa: F401  (registers the runners)
    kind = cfg.get('runner_type')
    if kind in POLICY_RUNNERS:
        raise HPMError(
            f"runner_type='{kind}' is mmengine's runner without hpm_mm's run "
            '(precision, work-dir lock, resume and checkpoint checks). Fix: '
            f"runner_type='{POLICY_RUNNERS[kind]}' (the same runner with "
            'them), or leave runner_type out.')
    if kind is None:
        cfg.runner_type = 'HPMFlexibleRunner' if cfg.get(
            'strategy') is not None else 'HPMRunner'
    return RUNNERS.build(cfg)


def train(config: Union[str, Config],
          work_dir: Optional[str] = None,
          *,
          resume: Union[bool, str, None] = None,
          amp: bool = False,
          quiet: bool = False,
          cfg_options: Optional[dict] = None,
          **overrides):
    """Train from a config file or a loaded config; return the runner
    after training (its ``work_dir``, ``model``, ``message_hub``, the hooks'
    results).

    The arguments are :func:`train_config`'s. Example::

        from hpm_mm.apis import train
        runner = train(
            'configs/hpm/hpm_vit-mini-p4_1xb256-coslr-10e_fmnist.py',
            work_dir='work_dirs/try', train_cfg=dict(max_epochs=1))

    Raises:
        HPMError: A refusal of the run's policy (a busy work dir, a run
            length the schedule does not fit, a checkpoint that does not
            fit, ...), in one line.
    """
    cfg = train_config(
        config,
        work_dir,
        resume=resume,
        amp=amp,
        quiet=quiet,
        cfg_options=cfg_options,
        **overrides)
    runner = build_runner(cfg)
    runner.train()
    return runner
