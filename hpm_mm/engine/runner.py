"""hpm_mm's runners: mmengine's ``Runner`` and ``FlexibleRunner`` with the
run's policy, which ``RUNNERS.build(cfg)``, ``mim train``,
:func:`hpm_mm.apis.train` and ``tools/train.py`` all get: the ``image``
spec, the ``precision`` key, the run length, one run per work dir, the
resume room (:mod:`.resume`), the input channels, CPU DDP, a quiet
console, the guard's end-of-run check. Refusals are one HPMError line,
before anything is written (docs/extending.md, "the runner")."""
import copy
import inspect
import itertools
import json
import logging
import os
import os.path as osp
import sys
from logging import FileHandler
from typing import Optional

from mmengine.config import Config
from mmengine.dist import is_main_process
from mmengine.registry import RUNNERS
from mmengine.runner import FlexibleRunner, Runner
from mmpretrain.utils import get_ori_model

from hpm_mm.datasets.data_check import check_data_roots
from hpm_mm.errors import explained_build_errors
from .config_check import is_loaded, load_config
from .dist import setup_cpu_distributed
from .log_filter import BareConsoleFormatter, quiet_console
from .optimizers.guarded_optim_wrapper import each_wrapper, fused_on_cuda
from .precision import Precision, optim_wrapper_cfg, run_precision
from .resume import RunResume
from .safe_load import refuse_old_torch_pretraining
from .schedule import check_run_length
from .work_dir import own_work_dir, release_work_dir

#: runners built in this process (:class:`RunPolicyMixin` names each)
_RUNNERS_BUILT = itertools.count(1)

#: torch.compile modes that record and replay CUDA graphs
GRAPH_MODES = ('reduce-overhead', 'max-autotune')


class FormattedOnce(Config):
    """A run's config whose ``pretty_text`` is formatted once per content:
    mmengine formats the whole config with yapf (~0.25 s on a CPU) for the
    start's log and again for the work dir's copy."""

    @classmethod
    def of(cls, cfg: Config) -> 'FormattedOnce':
        once = cls.__new__(cls)
        once.__dict__.update(cfg.__dict__)
        return once

    @property
    def pretty_text(self) -> str:
        key = repr(self._cfg_dict)
        if vars(self).get('_hpm_text', (None, ))[0] != key:
            object.__setattr__(self, '_hpm_text', (key, super().pretty_text))
        return self._hpm_text[1]


class RunPolicyMixin:
    """The policy of :mod:`hpm_mm.engine.runner`, mixed into mmengine's
    ``Runner`` or ``FlexibleRunner`` (which take the same keyword
    arguments; ``cfg`` carries the config keys they do not take:
    ``console``, ``model_wrapper_cfg``)."""
    #: the run's precision (:mod:`hpm_mm.engine.precision`)
    precision: Optional[Precision] = None
    _hpm_lock = _hpm_resume = None  # a training run's lock and resume room

    @classmethod
    def from_cfg(cls, cfg):
        """mmengine's ``from_cfg`` of the config as the config room reads it
        (:func:`~hpm_mm.engine.config_check.load_config`: its dicts checked,
        its ``image`` spec applied), once: a config it made is taken as it
        is."""
        with explained_build_errors():
            return super().from_cfg(
                cfg if is_loaded(cfg) else load_config(cfg))

    def __init__(self, *args, **kwargs) -> None:
        bound = inspect.signature(super().__init__).bind(*args, **kwargs)
        kw = dict(bound.arguments)
        cfg = kw.get('cfg')
        cfg = copy.deepcopy(cfg) if isinstance(cfg, Config) else Config(
            dict(cfg or {}))
        kw['cfg'] = cfg = FormattedOnce.of(cfg)
        self._hpm_quiet = cfg.get('console', 'full') == 'quiet'
        # a quiet console: one line per epoch (ConsoleProgressHook's)
        hooks = list(kw.get('custom_hooks') or [])
        kinds = [h.get('type') for h in hooks if isinstance(h, dict)]
        if self._hpm_quiet and 'ConsoleProgressHook' not in kinds:
            kw['custom_hooks'] = hooks + [dict(type='ConsoleProgressHook')]
        if kw.get('experiment_name') is None:
            # mmengine names the run's logger, message hub, visualizer and
            # registry scope '<config>_<second>': a second runner of the
            # process in the same second (a notebook, a test) would get the
            # first one's instances. The first keeps mmengine's name.
            n = next(_RUNNERS_BUILT)
            if n > 1:
                stem = osp.splitext(osp.basename(cfg.filename or 'run'))[0]
                kw['experiment_name'] = f'{stem}_{n}'
        try:
            if kw.get('train_cfg') is not None:
                self._check_before_work(kw, cfg)
            super().__init__(**kw)
        except BaseException:
            self.release_work_dir()  # a refused start frees the work dir
            raise
        if self.precision is not None and is_main_process():
            with open(osp.join(self.work_dir, 'precision.json'), 'w') as f:
                json.dump(self.precision.to_dict(), f, indent=2)

    # ------------------------------------------------------------ the start
    def _check_before_work(self, kw: dict, cfg: Config) -> None:
        """Everything that can be judged from the config, before the
        runner writes into the work dir."""
        if isinstance(kw.get('optim_wrapper'), dict):  # the one reading
            wrapper = dict(kw['optim_wrapper'])
            precision = run_precision(
                dict(precision=cfg.get('precision'), optim_wrapper=wrapper))
            kw['optim_wrapper'] = cfg.optim_wrapper = fused_on_cuda(
                optim_wrapper_cfg(wrapper, precision), precision.device)
            self.precision = precision
        model = kw.get('model')
        refuse_old_torch_pretraining(model)
        teacher = model.get('teacher') if isinstance(model, dict) else None
        if isinstance(teacher, dict) and teacher.get('score_source'):
            from hpm_mm.models.teachers.score_sources import check_source
            check_source(teacher['score_source'])  # before any file
        check_run_length(kw)
        setup_cpu_distributed(kw.get('launcher'), cfg)
        work_dir = kw.get('work_dir') or 'work_dirs'
        check_data_roots(cfg, work_dir)
        if os.environ.get('RANK', '0') == '0':  # one run per work dir
            self._hpm_lock = own_work_dir(work_dir)
        room = self._hpm_resume = RunResume(
            kw, work_dir, cfg.get('resume_changed_run', False))
        cfg.resume, cfg.load_from = room.resume, room.path
        hooks = list(kw.get('custom_hooks') or [])  # its hook, by name
        kw['custom_hooks'] = hooks + [dict(type='ResumeHook', room=room)]

    def build_logger(self, *args, **kwargs):
        """mmengine's logger; the precision and the resume notes are its
        first records, bare lines on the console. A quiet console shows
        warnings and these records only."""
        logger = super().build_logger(*args, **kwargs)
        for handler in logger.handlers:
            if type(handler) is logging.StreamHandler and \
                    handler.stream in (sys.stdout, sys.stderr):
                handler.setFormatter(BareConsoleFormatter(handler.formatter))
                if self._hpm_quiet:
                    handler.addFilter(quiet_console)
        precision = self.precision
        notes = [(logging.INFO, precision.line())] if precision else []
        files = [h for h in logger.handlers if isinstance(h, FileHandler)]
        if self._hpm_quiet and files:
            notes.append((logging.INFO, f'full log: {files[0].baseFilename}'))
        for level, message in notes + getattr(self._hpm_resume, 'notes', []):
            logger.log(level, message, extra=dict(console=True))
        return logger

    def build_model(self, model):
        """mmengine's model, its data preprocessor checking every batch's
        channels (:func:`~hpm_mm.models.data_preprocessor.watch_channels`)."""
        from hpm_mm.models.data_preprocessor import watch_channels
        model = super().build_model(model)
        watch_channels(model)
        return model

    def build_visualizer(self, visualizer=None):
        """mmengine's visualizer, a new one for each runner: a config that
        names it (mmdet's and mmseg's ``name='visualizer'``) would otherwise
        get the instance of an earlier runner of the process (a notebook's
        second run, a test's) and write into that run's folder."""
        if isinstance(visualizer, dict) and visualizer.get('name'):
            from mmengine.registry import VISUALIZERS
            cls = VISUALIZERS.get(visualizer.get('type', 'Visualizer'))
            if cls is None or cls.check_instance_created(visualizer['name']):
                visualizer = dict(
                    visualizer,
                    name=f"{visualizer['name']}_{self._experiment_name}")
        return super().build_visualizer(visualizer)

    # ------------------------------------------------------------- the run
    def train(self):
        """mmengine's ``train``, then the guard's check that the run trained
        (``check_trained``); the work dir is released however it ends.
        ``compile`` compiles an HPM model's tensor parts
        (:meth:`~hpm_mm.models.HPMBase.compile_parts`), not the whole
        ``train_step``, whose optimizer wrapper and teacher update hold
        host-side state; ``compile=dict(mode='reduce-overhead')`` replays
        them as CUDA graphs on a GPU, the default mode on a CPU."""
        options, model = self.cfg.get('compile'), get_ori_model(self.model)
        if isinstance(options, dict) and options.get('mode') in GRAPH_MODES:
            from hpm_mm.evaluation import model_device
            if model_device(self.model) != 'cuda':
                self.logger.warning(
                    f"compile mode={options['mode']!r} replays CUDA graphs, "
                    'which need a GPU: compiling in the default mode here')
                options = dict(options, mode=None)  # (torch's default)
                self.set_compile(options)
            else:  # a new graph generation per iteration
                self.register_hook(dict(type='CUDAGraphStepHook'), 'VERY_HIGH')
        if options and hasattr(model, 'compile_parts'):
            self.set_compile(None)  # (mmengine's would take train_step)
            parts = model.compile_parts(
                **(options if isinstance(options, dict) else {}))
            self.logger.info(f'compiled (torch.compile): {", ".join(parts)}'
                             '; the first steps take longer')
        try:
            with explained_build_errors():  # (the loops are built here)
                model = super().train()
        finally:
            self.release_work_dir()
            self.stop_loader_workers()
        for w in each_wrapper(self.optim_wrapper):
            if hasattr(w, 'check_trained'):  # the non-finite guard's
                w.check_trained()
        return model

    def set_compile(self, options) -> None:
        """What mmengine's runners compile: Runner reads ``cfg.compile``,
        FlexibleRunner its ``_compile``."""
        self.cfg.compile = options
        if hasattr(self, '_compile'):
            self._compile = options or False

    def stop_loader_workers(self) -> None:
        """Stop the persistent workers of the run's loaders now: left to
        the garbage collector, torch's shutdown waited its 5-s status
        interval for them (a 5-s stall at a later runner's start)."""
        for loop in (self._train_loop, self._val_loop, self._test_loop):
            loader = getattr(loop, 'dataloader', None)
            if getattr(loader, '_iterator', None) is not None:
                loader._iterator._shutdown_workers()
                loader._iterator = None

    def release_work_dir(self) -> None:
        """Let the next run have the work dir (done when ``train`` ends)."""
        if self._hpm_lock is not None:
            release_work_dir(self._hpm_lock)
            self._hpm_lock = None

    def dump_config(self) -> None:
        """mmengine's config copy in the work dir, written once the
        checkpoint to start from is known to fit the model (a refused start
        leaves the earlier copy as it was). A config that lies in the work
        dir itself (``pretrain_folder``'s) is kept as written; the resolved
        copy goes beside it as ``<name>_resolved.py``."""
        self._check_checkpoint_fits()
        name = self.cfg.filename
        if name and is_main_process() and osp.realpath(
                osp.join(self.work_dir, osp.basename(name))) == \
                osp.realpath(name):
            stem, ext = osp.splitext(osp.basename(name))
            self.cfg.dump(osp.join(self.work_dir, f'{stem}_resolved{ext}'))
            return
        super().dump_config()

    def load_or_resume(self) -> None:
        """mmengine's, after the fit check (a resumed run's restore is the
        ``ResumeHook``'s). (Here ``FlexibleRunner``'s model is built: its
        preprocessor's channel check goes on now.)"""
        from hpm_mm.models.data_preprocessor import watch_channels
        self._check_checkpoint_fits()
        watch_channels(getattr(self.model, 'module', self.model))
        super().load_or_resume()

    def _check_checkpoint_fits(self) -> None:
        """The fit check (:meth:`RunResume.check_fits`, once), as soon as
        the model is built (``Runner``: at construction; ``FlexibleRunner``
        builds it in ``train``)."""
        import torch.nn as nn
        if self._hpm_resume is not None and isinstance(self.model, nn.Module):
            self._hpm_resume.check_fits(get_ori_model(self.model))


@RUNNERS.register_module()
class HPMRunner(RunPolicyMixin, Runner):
    """mmengine's :class:`~mmengine.runner.Runner` with hpm_mm's run policy
    (:mod:`hpm_mm.engine.runner`). Named by ``runner_type='HPMRunner'`` in
    hpm_mm's configs; build it with ``RUNNERS.build(cfg)`` or
    ``HPMRunner.from_cfg(cfg)``."""


@RUNNERS.register_module()
class HPMFlexibleRunner(RunPolicyMixin, FlexibleRunner):
    """mmengine's :class:`~mmengine.runner.FlexibleRunner` (``strategy``:
    FSDP, DeepSpeed, ...) with hpm_mm's run policy. Named by
    ``runner_type='HPMFlexibleRunner'`` in the FSDP config."""
