"""The run's policy in the runner: what every way of starting a run gets.

:class:`HPMRunner` (mmengine's :class:`~mmengine.runner.Runner`) and
:class:`HPMFlexibleRunner` (its :class:`~mmengine.runner.FlexibleRunner`, for
configs with a ``strategy``: FSDP, DeepSpeed) are registered in mmengine's
``RUNNERS`` and named by ``runner_type`` in hpm_mm's configs, so
``RUNNERS.build(cfg)`` (mmengine's builder, as mmpretrain's and mmdet's
``tools/train.py`` call it), ``HPMRunner.from_cfg(cfg)``,
:func:`hpm_mm.apis.train`, ``tools/train.py`` and ``mim train`` all run
the same policy:

- **precision**: the config key ``precision`` ('auto', 'fp32', 'bf16',
  'fp16'; :mod:`hpm_mm.engine.precision`) read once, into the optimizer
  wrapper that computes it; 'auto' is fp16 with a loss scale on CUDA, and
  on a CPU the run's own training step is timed in fp32 and bf16 on a copy
  of its model and a batch of its data when training starts, bf16 taken
  only where it is clearly faster; the decision and the step times are a
  console line and ``WORK_DIR/precision.json``;
- **run length**: a schedule or EMA-teacher ramp that does not fit
  ``train_cfg`` is refused (:func:`~hpm_mm.engine.schedule.
  check_run_length`);
- **one run per work dir** (:func:`~hpm_mm.engine.work_dir.own_work_dir`);
- **resume**: ``resume=True`` takes the newest *complete* checkpoint of the
  work dir, naming each file skipped, and refuses to start from scratch
  over damaged ones; a checkpoint given to resume must be complete;
- **fit checks**: a ``load_from`` checkpoint that fills less than half of
  the model (another architecture) and a resumed checkpoint that does not
  fill it (the config changed) are refused before the first step;
- **skipped steps**: a run that skipped (non-finite) as many optimizer steps
  as it applied fails at its end;
- **input channels**: every batch's channels checked at the built model's
  data preprocessor (:func:`~hpm_mm.models.data_preprocessor.
  watch_channels`);
- **CPU DDP**: ``launcher='pytorch'`` without a GPU joins a gloo process
  group and wraps the model without device ids (:mod:`~hpm_mm.engine.
  dist`);
- **console**: ``console='quiet'`` in the config keeps the console to the
  precision line, one line per epoch (:class:`ConsoleProgressHook`) and
  warnings; the log file keeps everything.

The checks of a resume live in :mod:`~hpm_mm.engine.resume`, the console
filters in :mod:`~hpm_mm.engine.log_filter`. Each refusal is an
:class:`~hpm_mm.errors.HPMError` raised before the runner writes anything
into the work dir (the fit checks: before the first step).
"""
import copy
import inspect
import itertools
import json
import logging
import os
import os.path as osp
import sys
from typing import List, Optional, Tuple

from mmengine.config import Config
from mmengine.dist import is_main_process
from mmengine.registry import RUNNERS
from mmengine.runner import FlexibleRunner, Runner

from hpm_mm.datasets.data_check import check_data_roots
from .dist import setup_cpu_distributed
from .log_filter import BareConsoleFormatter, QuietConsole
from .precision import (Precision, choose_precision, decide, optim_wrapper_cfg,
                        run_precision, timed_train_step)
from .resume import (check_load_from, check_resume_fits,
                     check_resumed_schedule, check_same_run, refit_schedulers,
                     refuse_earlier_run, resolve_resume, run_signature)
from .schedule import check_run_length
from .work_dir import own_work_dir, release_work_dir

#: runners built in this process (:class:`RunPolicyMixin` names each)
_RUNNERS_BUILT = itertools.count(1)


class RunPolicyMixin:
    """The policy of :mod:`hpm_mm.engine.runner`, mixed into mmengine's
    ``Runner`` or ``FlexibleRunner`` (which take the same keyword
    arguments; ``cfg`` carries the config keys they do not take:
    ``console``, ``model_wrapper_cfg``)."""

    @classmethod
    def from_cfg(cls, cfg):
        """mmengine's ``from_cfg`` after the config's ``image`` spec is
        applied to every part it sets (:mod:`hpm_mm.datasets.image_spec`)."""
        from hpm_mm.datasets.image_spec import apply_image_spec
        return super().from_cfg(apply_image_spec(copy.deepcopy(cfg)))

    def __init__(self, *args, **kwargs) -> None:
        bound = inspect.signature(super().__init__).bind(*args, **kwargs)
        kw = dict(bound.arguments)
        cfg = kw.get('cfg')
        cfg = copy.deepcopy(cfg) if isinstance(cfg, Config) else Config(
            dict(cfg or {}))
        kw['cfg'] = cfg
        self._hpm_notes: List[Tuple[int, str]] = []
        self._hpm_quiet = cfg.get('console', 'full') == 'quiet'
        self._hpm_precision = None
        self._hpm_lock = None
        self._hpm_signature = None
        self._hpm_resume_ckpt = None  # loaded by the run check, reused once
        self._hpm_resumed = None  # its meta and schedulers' saved state
        self._hpm_fit_checked = False
        if self._hpm_quiet:  # one console line per epoch
            hooks = list(kw.get('custom_hooks') or [])
            if not any(
                    isinstance(h, dict)
                    and h.get('type') == 'ConsoleProgressHook' for h in hooks):
                hooks.append(dict(type='ConsoleProgressHook'))
            kw['custom_hooks'] = hooks
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
        if self._hpm_precision is not None:
            self._record_precision(self._hpm_precision)

    @property
    def precision(self) -> Optional[Precision]:
        """The run's precision (:mod:`hpm_mm.engine.precision`); None while
        a CPU's mixed precision waits for its timed step (``train``)."""
        return self._hpm_precision

    def _record_precision(self, precision: Precision) -> None:
        self._hpm_precision = precision
        if is_main_process():
            with open(osp.join(self.work_dir, 'precision.json'), 'w') as f:
                json.dump(precision.to_dict(), f, indent=2)

    def _decide_precision(self) -> None:
        """``precision='auto'`` on a CPU: time the run's own training step in
        fp32 and in bf16 (:func:`~hpm_mm.engine.precision.timed_train_step`,
        on a copy of the model) and take what the rule chooses (every
        process takes the first one's decision). Its line goes to the
        console, its numbers to ``precision.json``."""
        from mmengine.dist import broadcast_object_list, get_world_size
        try:
            step, workload = timed_train_step(self.model,
                                              self._train_dataloader,
                                              self.optim_wrapper,
                                              self.cfg.get('model'))
            precision = decide('auto', 'cpu', step, workload, 'training step')
        except Exception as e:  # the run's own step will say what is wrong
            precision = choose_precision(
                False,
                'cpu')._replace(reason=f'the training step could not be timed '
                                f'({type(e).__name__}: {e}): fp32')
        if get_world_size() > 1:
            box = [precision]
            broadcast_object_list(box)
            precision = box[0]
        self.optim_wrapper = optim_wrapper_cfg(
            dict(self.optim_wrapper), precision)
        self._record_precision(precision)
        self.logger.info(precision.line(), extra=dict(console=True))

    # ------------------------------------------------------------ the start
    def _check_before_work(self, kw: dict, cfg: Config) -> None:
        """Everything that can be judged from the config, before the
        runner writes into the work dir."""
        if isinstance(kw.get('optim_wrapper'), dict):  # the one reading
            precision, wrapper = run_precision(
                dict(
                    precision=cfg.get('precision'),
                    optim_wrapper=dict(kw['optim_wrapper'])))
            if precision is not None:
                kw['optim_wrapper'] = cfg.optim_wrapper = wrapper
            self._hpm_precision = precision
        model = kw.get('model')
        teacher = model.get('teacher') if isinstance(model, dict) else None
        if isinstance(teacher, dict) and teacher.get('score_source'):
            from hpm_mm.models.teachers.score_sources import check_source
            check_source(teacher['score_source'])  # before any file
        check_run_length(
            dict(
                train_cfg=kw.get('train_cfg'),
                param_scheduler=kw.get('param_scheduler'),
                model=model if isinstance(model, dict) else {}))
        setup_cpu_distributed(kw.get('launcher'), cfg)
        work_dir = kw.get('work_dir') or 'work_dirs'
        check_data_roots(cfg, work_dir)
        if os.environ.get('RANK', '0') == '0':  # one run per work dir
            self._hpm_lock = own_work_dir(work_dir)
        resume = kw.get('resume')
        if isinstance(resume, str):  # FlexibleRunner: resume=PATH
            kw['load_from'], kw['resume'] = resume, True
        self._hpm_signature = run_signature(kw)
        if kw.get('resume'):
            kw['load_from'] = resolve_resume(work_dir, kw.get('load_from'),
                                             self._hpm_notes)
            cfg.load_from = kw['load_from']
            if kw['load_from']:
                from mmengine.runner.checkpoint import _load_checkpoint

                # loaded once for both checks (the fit check needs the model)
                self._hpm_resume_ckpt = _load_checkpoint(
                    kw['load_from'], map_location='cpu')
                self._hpm_resumed = (
                    self._hpm_resume_ckpt.get('meta'),
                    self._hpm_resume_ckpt.get('param_schedulers'))
                check_same_run(kw['load_from'], self._hpm_resume_ckpt,
                               self._hpm_signature,
                               cfg.get('resume_changed_run',
                                       False), self._hpm_notes)
        else:
            refuse_earlier_run(work_dir)

    def build_logger(self, *args, **kwargs):
        """mmengine's logger; the precision decision (where the config
        makes it; a CPU's mixed precision is decided when training starts)
        is its first record, then the resume notes, each a bare line on the
        console. A quiet
        console shows warnings and these console records only."""
        logger = super().build_logger(*args, **kwargs)
        for handler in logger.handlers:
            if type(handler) is logging.StreamHandler and \
                    handler.stream in (sys.stdout, sys.stderr):
                handler.setFormatter(BareConsoleFormatter(handler.formatter))
                if self._hpm_quiet:
                    handler.addFilter(QuietConsole())
        console = dict(console=True)
        if self._hpm_precision is not None:
            logger.info(self._hpm_precision.line(), extra=console)
        files = [
            h.baseFilename for h in logger.handlers
            if isinstance(h, logging.FileHandler)
        ]
        if self._hpm_quiet and files:
            logger.info(f'full log: {files[0]}', extra=console)
        for level, message in self._hpm_notes:
            logger.log(level, message, extra=console)
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
        """mmengine's ``train`` (first, on a CPU that was asked for mixed
        precision, the timed decision: :meth:`_decide_precision`), then the
        guard's check that the run trained (``check_trained``); the work
        dir is released when it ends, however it ends."""
        try:
            if self._hpm_precision is None and isinstance(
                    self.optim_wrapper, dict):  # a CPU's AMP, undecided
                self._decide_precision()
            model = super().train()
        finally:
            self.release_work_dir()
        wrapper = self.optim_wrapper  # one, or one per optimizer
        for w in (wrapper.values()
                  if hasattr(wrapper, 'values') else [wrapper]):
            if hasattr(w, 'check_trained'):  # the non-finite guard's
                w.check_trained()
        return model

    def _maybe_compile(self, target: str) -> None:
        """mmengine's ``compile`` setting: for an HPM model, its tensor parts
        (:meth:`~hpm_mm.models.HPMBase.compile_parts`) instead of the whole
        ``train_step``, whose optimizer wrapper and teacher update hold
        host-side state (dynamo stopped in the non-finite guard)."""
        from mmpretrain.utils import get_ori_model
        options = self.cfg.get('compile')
        model = get_ori_model(self.model)
        if not options or not hasattr(model, 'compile_parts'):
            return super()._maybe_compile(target)
        parts = model.compile_parts(
            **(options if isinstance(options, dict) else {}))
        self.logger.info(f'compiled (torch.compile): {", ".join(parts)}; '
                         'the first steps take longer')

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
        """Refuse a checkpoint that does not fit the model, then load or
        resume it as mmengine does. (Here ``FlexibleRunner``'s model is
        built: its preprocessor's channel check goes on now.)"""
        from hpm_mm.models.data_preprocessor import watch_channels
        self._check_checkpoint_fits()
        watch_channels(getattr(self.model, 'module', self.model))
        fresh = []
        if self._resume and self._hpm_resumed is not None:
            meta, saved = self._hpm_resumed
            schedulers = self.param_schedulers
            if isinstance(schedulers, dict):  # per optimizer: the first
                schedulers = next(iter(schedulers.values()), [])
            notes: List[Tuple[int, str]] = []
            check_resumed_schedule(self._load_from, meta, saved,
                                   len(self.train_dataloader), schedulers,
                                   self.cfg.get('resume_changed_run', False),
                                   notes)
            for level, message in notes:
                self.logger.log(level, message)
            if self.cfg.get('resume_changed_run', False):
                fresh = [(s, s.state_dict()) for s in schedulers or []]
        super().load_or_resume()
        if fresh:
            refit_schedulers(fresh, self.iter, len(self.train_dataloader))

    def save_checkpoint(self, *args, **kwargs):
        """mmengine's checkpoint, its meta holding this run's signature
        (:func:`run_signature`), which a resume compares."""
        signature = getattr(self, '_hpm_signature', None)
        if signature is not None:
            meta = dict(kwargs.get('meta') or {})
            meta['hpm_run'] = dict(
                signature, iters_per_epoch=len(self.train_dataloader))
            kwargs['meta'] = meta
        return super().save_checkpoint(*args, **kwargs)

    def _check_checkpoint_fits(self) -> None:
        """The fit checks of a training run's checkpoint, once, as soon as
        the model is built (``Runner``: at construction; ``FlexibleRunner``
        builds it in ``train``)."""
        import torch.nn as nn
        if self._hpm_fit_checked or self._hpm_signature is None or \
                not self._load_from or not isinstance(self.model, nn.Module):
            return  # checked, not a training run, nothing to load, no model
        self._hpm_fit_checked = True
        from mmpretrain.utils import get_ori_model
        model = get_ori_model(self.model)
        if self._resume:
            ckpt, self._hpm_resume_ckpt = self._hpm_resume_ckpt, None
            check_resume_fits(model, self._load_from, ckpt)
        else:
            check_load_from(model, self._load_from)


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
