"""The run's policy in the runner: what every way of starting a run gets.

:class:`HPMRunner` (mmengine's :class:`~mmengine.runner.Runner`) and
:class:`HPMFlexibleRunner` (its :class:`~mmengine.runner.FlexibleRunner`, for
configs with a ``strategy``: FSDP, DeepSpeed) are registered in mmengine's
``RUNNERS`` and named by ``runner_type`` in hpm_mm's configs, so
``RUNNERS.build(cfg)`` (mmengine's builder, as mmpretrain's and mmdet's
``tools/train.py`` call it), ``HPMRunner.from_cfg(cfg)``,
:func:`hpm_mm.apis.train`, ``tools/train.py`` and ``mim train`` all run
the same policy:

- **precision** by the one rule (:func:`~hpm_mm.engine.precision.
  choose_precision`): an AMP optimizer wrapper becomes fp16 with a loss
  scale on CUDA; on a CPU, where the run starts training, the run's own
  training step is timed in fp32 and bf16 on a copy of its model and a
  batch of its data, and bf16 autocast is taken only where it is clearly
  faster; the decision and the step times are a console line and
  ``WORK_DIR/precision.json``;
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
- **CPU DDP**: ``launcher='pytorch'`` without a GPU joins a gloo process
  group and wraps the model without device ids;
- **console**: ``console='quiet'`` in the config keeps the console to the
  precision line, one line per epoch (:class:`ConsoleProgressHook`) and
  warnings; the log file keeps everything.

Each refusal is an :class:`~hpm_mm.errors.HPMError` raised before the runner
writes anything into the work dir (the fit checks: before the first step).
"""
import copy
import inspect
import itertools
import json
import logging
import os
import os.path as osp
import sys
from typing import Callable, List, Optional, Tuple

from mmengine.config import Config
from mmengine.dist import is_main_process
from mmengine.registry import RUNNERS
from mmengine.runner import FlexibleRunner, Runner

from hpm_mm.errors import HPMError
from .checkpoint import (checkpoint_mismatch, checkpoint_problem,
                         checkpoint_state, download_checkpoint,
                         find_resume_checkpoint, share_of_model)
from .optimizers.autocast_optim_wrapper import AMP_TYPES, amp_optim_wrapper_cfg
from .precision import Precision, choose_precision, shapes
from .schedule import check_run_length
from .work_dir import own_work_dir, release_work_dir


def run_precision(optim_wrapper: dict) -> Tuple[Optional[Precision], dict]:
    """The run's precision and its ``optim_wrapper`` config, as far as the
    config decides them.

    An AMP wrapper (``AmpOptimWrapper``, ``GuardedAmpOptimWrapper``) asks
    for mixed precision: on CUDA it is fp16 with a loss scale now; on a CPU
    the decision waits for the run's own step (None is returned and the
    wrapper kept; :meth:`RunPolicyMixin.train` times the step and converts
    it, :func:`amp_optim_wrapper_cfg`). A config's own
    ``AutocastOptimWrapper`` is kept as its choice; any other wrapper runs
    in fp32.
    """
    import torch
    kind = optim_wrapper.get('type')
    if kind == 'AutocastOptimWrapper':
        dtype = optim_wrapper.get('dtype', 'bfloat16')
        name = {'bfloat16': 'bf16', 'float16': 'fp16'}.get(str(dtype), dtype)
        return Precision(name, None, 'any', '-',
                         "the config's AutocastOptimWrapper"), optim_wrapper
    if kind not in AMP_TYPES:
        return choose_precision(False), optim_wrapper
    if torch.cuda.is_available():
        precision = choose_precision(True, 'cuda')
        return precision, amp_optim_wrapper_cfg(optim_wrapper, precision)
    return None, optim_wrapper


def timed_train_step(model,
                     dataloader: dict,
                     optim_wrapper: dict,
                     model_cfg=None) -> Tuple[Callable, str]:
    """``step(dtype)``: one real training step of a copy of ``model`` on
    the first batch of ``dataloader`` (unshuffled, no workers), through an
    optimizer wrapper of that precision (fp32 for None, bf16 autocast), at
    the end of a mask schedule (HPM's ``set_progress(1)``: the teacher
    scores, as in every step once it mines a patch);
    and the workload's description for the timing cache. The run's model,
    data order and random numbers are left as they were.

    Args:
        model (nn.Module | dict): The run's model (wrapped or not), or its
            config (``FlexibleRunner`` builds it later).
        dataloader (dict): The run's ``train_dataloader`` config.
        optim_wrapper (dict): The run's ``optim_wrapper`` config; its
            optimizer is built on the copy (parameter-wise options left out:
            they change values, not the work).
        model_cfg (dict, optional): The model's config, for the cache key.
    """
    import torch.nn as nn
    from mmengine.optim import build_optim_wrapper
    from mmengine.registry import MODELS
    from mmpretrain.utils import get_ori_model

    from .precision import keep_random_state
    with keep_random_state():
        if isinstance(model, nn.Module):
            model = copy.deepcopy(get_ori_model(model))
        else:
            model = MODELS.build(copy.deepcopy(model))
        model.train()
        if hasattr(model, 'set_progress'):  # HPM: the teacher on, as it
            model.set_progress(1.0, epoch=1, max_epochs=1)  # is from K >= 1
        loader = copy.deepcopy(dict(dataloader))
        sampler = dict(loader.get('sampler') or dict(type='DefaultSampler'))
        loader.update(
            num_workers=0,
            persistent_workers=False,
            sampler=dict(sampler, shuffle=False, seed=0))
        batch = next(iter(Runner.build_dataloader(loader, seed=0)))
    base = {
        k: v
        for k, v in dict(optim_wrapper).items()
        if k not in ('constructor', 'paramwise_cfg')
    }
    wrappers = {}

    def step(dtype):
        if dtype not in wrappers:
            name = 'fp32' if dtype is None else 'bf16'
            cfg = amp_optim_wrapper_cfg(base,
                                        Precision(name, dtype, 'cpu', '', ''))
            wrappers[dtype] = build_optim_wrapper(model, cfg)
        model.train_step(batch, wrappers[dtype])

    inputs = batch.get('inputs') if isinstance(batch, dict) else batch
    workload = json.dumps(
        dict(
            step='train_step',
            model=type(model).__name__,
            model_cfg=model_cfg,
            inputs=shapes(inputs),
            optimizer=str(base.get('optimizer'))),
        sort_keys=True,
        default=str)
    return step, workload


def die_with_launcher() -> None:
    """Let the kernel end this worker (SIGTERM) when the process that
    launched it dies: a ``kill -9`` of ``tools/dist_train.sh``'s torchrun
    would otherwise leave its workers training to the end as orphans
    (Linux ``prctl(PR_SET_PDEATHSIG)``; elsewhere nothing changes)."""
    import ctypes
    import signal
    import sys
    if not sys.platform.startswith('linux'):
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # 1: PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # no prctl: nothing to set
        return
    if os.getppid() == 1:  # the launcher died before the line above
        os.kill(os.getpid(), signal.SIGTERM)


def setup_cpu_distributed(launcher: str, cfg: Config) -> None:
    """Make ``launcher='pytorch'`` work on machines without a GPU.

    mmengine's ``init_dist`` calls ``torch.cuda.set_device`` and its DDP
    wrapper passes ``device_ids=[LOCAL_RANK]``; both fail on a CPU. Without
    CUDA this joins the process group with gloo first (mmengine then skips
    its own ``init_dist``) and sets ``cfg.model_wrapper_cfg`` to wrap the
    model with ``device_ids=None``. Nothing of that changes where CUDA is
    available. On any device, a torchrun worker ends with its launcher
    (:func:`die_with_launcher`).
    """
    import torch
    import torch.distributed as dist
    if (launcher or 'none') == 'none':
        return
    if launcher == 'pytorch':  # torchrun's workers end with it
        die_with_launcher()
    if torch.cuda.is_available():
        return
    if not dist.is_initialized():
        dist.init_process_group(backend='gloo')
    wrapper = cfg.get('model_wrapper_cfg') or dict(
        type='MMDistributedDataParallel',
        broadcast_buffers=False,
        find_unused_parameters=cfg.get('find_unused_parameters', False))
    wrapper.setdefault('device_ids', None)
    cfg.model_wrapper_cfg = wrapper


def resolve_resume(work_dir: str, load_from: Optional[str],
                   notes: List[Tuple[int, str]]) -> Optional[str]:
    """The checkpoint a resumed run starts from, checked.

    Without ``load_from``: the newest complete checkpoint of ``work_dir``
    (``last_checkpoint`` when it names a complete file, else the newest
    complete ``epoch_N/iter_N.pth``), each file skipped noted; None (train
    from scratch, noted) when there is none. With ``load_from``: that file,
    which must be a complete checkpoint (an http(s) URL: its download).

    Raises:
        HPMError: The file given is incomplete, or the work dir holds only
            incomplete checkpoints.
    """
    if load_from:
        if load_from.startswith(('http://', 'https://')):
            # checked like a path: the download is what is resumed
            url, load_from = load_from, download_checkpoint(load_from)
            notes.append((logging.INFO, f'resume: {url} is {load_from}'))
        problem = checkpoint_problem(load_from)
        if problem:
            newest, _ = find_resume_checkpoint(osp.dirname(load_from) or '.')
            hint = (f' The newest complete one there: --resume {newest}'
                    if newest else '')
            raise HPMError(f'cannot resume from {load_from}: {problem}.{hint}')
        return load_from
    path, skipped = find_resume_checkpoint(work_dir)
    notes += [(logging.WARNING, f'resume: skipped {line}') for line in skipped]
    if path:
        notes.append((logging.INFO, f'resume: from {path}'))
    elif skipped:
        raise HPMError(
            f'--resume found no complete checkpoint in {work_dir} '
            f'({"; ".join(skipped)}) and will not train from scratch over '
            'them. Fix: move them away, or pass --resume PATH.')
    else:
        notes.append((logging.WARNING, f'resume: no checkpoint in {work_dir} '
                      'yet: training from scratch'))
    return path


def run_signature(kw: dict) -> dict:
    """What defines a run's iteration schedule, from the runner's
    arguments: its length, the batch per process, the number of processes,
    the base lr and the parameter schedulers. Saved in every checkpoint's
    meta (``hpm_run``) and compared when it is resumed."""
    train_cfg = kw.get('train_cfg') or {}
    loader = kw.get('train_dataloader')
    optim = kw.get('optim_wrapper')
    optimizer = optim.get('optimizer', {}) if isinstance(optim, dict) else {}
    schedulers = kw.get('param_scheduler') or []
    if isinstance(schedulers, dict):
        schedulers = [schedulers]
    return dict(
        max_epochs=train_cfg.get('max_epochs'),
        max_iters=train_cfg.get('max_iters'),
        batch_size=loader.get('batch_size')
        if isinstance(loader, dict) else None,
        world_size=int(os.environ.get('WORLD_SIZE', '1')),
        lr=optimizer.get('lr') if isinstance(optimizer, dict) else None,
        param_scheduler=[{
            k: v
            for k, v in dict(s).items() if k != '_scope_'
        } for s in schedulers if isinstance(s, dict)])


#: how each part of the signature reads in a refusal
_SIGNATURE_NAMES = dict(
    max_epochs='train_cfg.max_epochs',
    max_iters='train_cfg.max_iters',
    batch_size='train_dataloader.batch_size',
    world_size='processes (WORLD_SIZE)',
    lr='optim_wrapper.optimizer.lr',
    param_scheduler='param_scheduler')


def check_same_run(path: str, ckpt: dict, signature: dict, allowed: bool,
                   notes: List[Tuple[int, str]]) -> None:
    """Refuse to resume ``path`` when the run it was written by differs
    from this one in what defines the iteration schedule (mmengine would
    continue the old schedule: a cosine left at its minimum or cut
    half-way, while alpha and the teacher's ramp follow the new length).

    Args:
        path (str): The checkpoint (named in the messages).
        ckpt (dict): It, loaded.
        allowed (bool): ``resume_changed_run=True`` in the config: continue
            anyway, with the differences noted.

    Raises:
        HPMError: The differences, and the fix.
    """
    meta = ckpt.get('meta') or {}
    then = meta.get('hpm_run')
    if then is None:
        notes.append((logging.WARNING,
                      f'resume: {path} records no run signature (written '
                      'before hpm_mm 1.1 or by another runner): not checked '
                      'against this run'))
        return
    changed = [
        f'{_SIGNATURE_NAMES[k]} {then.get(k)!r} -> {v!r}'
        for k, v in signature.items()
        if k in then and then.get(k) != v and k != 'param_scheduler'
    ]
    if then.get('param_scheduler') != signature['param_scheduler']:
        changed.append('param_scheduler (its types, ends or values)')
    if not changed:
        return
    what = '; '.join(changed)
    if allowed:
        notes.append((logging.WARNING,
                      f'resume: the run changed since {path} ({what}); '
                      'continuing as resume_changed_run=True asks'))
        return
    raise HPMError(
        f'--resume {path}: the run changed since it was written ({what}); '
        'resuming keeps the iteration schedule of the checkpoint, so the '
        'learning rate would not follow the new run. Fix: resume with the '
        'config and number of processes it was trained with (its config '
        'copy is in the work dir), or start a new work dir with '
        '--cfg-options load_from=CKPT, or pass --cfg-options '
        'resume_changed_run=True to continue anyway.')


def refuse_earlier_run(work_dir: str) -> None:
    """Refuse a new run in a work dir that holds another run's checkpoints:
    they would mix, and a later ``--resume`` would continue whichever is
    newest."""
    import re
    if not osp.isdir(work_dir):
        return
    found = sorted(
        n for n in os.listdir(work_dir)
        if re.fullmatch(r'(epoch|iter)_\d+\.pth', n))
    if not found:
        return
    raise HPMError(
        f'{work_dir} holds the checkpoints of an earlier run '
        f'({", ".join(found[:3])}{", ..." if len(found) > 3 else ""}); a new '
        'run there would mix its checkpoints with them, and a later --resume '
        'would continue whichever is newest. Fix: --resume to continue that '
        'run, or give this run its own --work-dir.')


class _QuietConsole(logging.Filter):
    """The console of a quiet run: warnings, errors and the records logged
    with ``extra=dict(console=True)`` (the precision line, the per-epoch
    lines)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.WARNING or getattr(
            record, 'console', False)


class _BareConsoleFormatter(logging.Formatter):
    """The console's format, except for the records logged with
    ``extra=dict(console=True)``: their bare message, as a tool's own
    line."""

    def __init__(self, base: logging.Formatter) -> None:
        super().__init__()
        self.base = base

    def format(self, record: logging.LogRecord) -> str:
        if getattr(record, 'console', False) and \
                record.levelno < logging.WARNING:
            return record.getMessage()
        return self.base.format(record)


def _check_channels(kw: dict) -> None:
    """mmpretrain's ``SelfSupDataPreprocessor`` becomes its subclass
    :class:`~hpm_mm.models.ChannelCheckedDataPreprocessor` (identical
    otherwise), so that images of another channel count than the model's
    (grayscale into an RGB model) are refused at the first batch in one line
    instead of an IndexError in the channel swap."""
    for holder, key in ((kw, 'data_preprocessor'),
                        (kw.get('model') if isinstance(kw.get('model'), dict)
                         else {}, 'data_preprocessor')):
        pre = holder.get(key)
        if isinstance(pre, dict) and pre.get('type', '').split('.')[-1] \
                == 'SelfSupDataPreprocessor':
            holder[key] = dict(pre, type='ChannelCheckedDataPreprocessor')


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
        self._hpm_fit_checked = False
        if self._hpm_quiet:  # one console line per epoch
            hooks = list(kw.get('custom_hooks') or [])
            if not any(
                    isinstance(h, dict)
                    and h.get('type') == 'ConsoleProgressHook' for h in hooks):
                hooks.append(dict(type='ConsoleProgressHook'))
            kw['custom_hooks'] = hooks
        _check_channels(kw)
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
        """Mixed precision asked for on a CPU: time the run's own training
        step in fp32 and in bf16 (:func:`timed_train_step`, on a copy of
        the model) and convert the AMP wrapper to what the rule chooses
        (every process takes the first one's decision). Its line goes to
        the console, its numbers to ``precision.json``."""
        from mmengine.dist import broadcast_object_list, get_world_size
        try:
            step, workload = timed_train_step(self.model,
                                              self._train_dataloader,
                                              self.optim_wrapper,
                                              self.cfg.get('model'))
            precision = choose_precision(
                True, 'cpu', step, workload, what='training step')
        except Exception as e:  # the run's own step will say what is wrong
            precision = choose_precision(
                False,
                'cpu')._replace(reason=f'the training step could not be timed '
                                f'({type(e).__name__}: {e}): fp32')
        if get_world_size() > 1:
            box = [precision]
            broadcast_object_list(box)
            precision = box[0]
        self.optim_wrapper = amp_optim_wrapper_cfg(
            dict(self.optim_wrapper), precision)
        self._record_precision(precision)
        self.logger.info(precision.line(), extra=dict(console=True))

    # ------------------------------------------------------------ the start
    def _check_before_work(self, kw: dict, cfg: Config) -> None:
        """Everything that can be judged from the config, before the
        runner writes into the work dir."""
        optim_wrapper = kw.get('optim_wrapper')
        if isinstance(optim_wrapper, dict):
            precision, optim_wrapper = run_precision(dict(optim_wrapper))
            kw['optim_wrapper'] = cfg.optim_wrapper = optim_wrapper
            self._hpm_precision = precision
        model = kw.get('model')
        check_run_length(
            dict(
                train_cfg=kw.get('train_cfg'),
                param_scheduler=kw.get('param_scheduler'),
                model=model if isinstance(model, dict) else {}))
        setup_cpu_distributed(kw.get('launcher'), cfg)
        work_dir = kw.get('work_dir') or 'work_dirs'
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
                handler.setFormatter(_BareConsoleFormatter(handler.formatter))
                if self._hpm_quiet:
                    handler.addFilter(_QuietConsole())
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
        skipped-step check; the work dir is released when it ends, however
        it ends."""
        try:
            if self._hpm_precision is None and isinstance(
                    self.optim_wrapper, dict):  # a CPU's AMP, undecided
                self._decide_precision()
            model = super().train()
        finally:
            self.release_work_dir()
        self._check_skipped_steps()
        return model

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
        resume it as mmengine does."""
        self._check_checkpoint_fits()
        super().load_or_resume()

    def save_checkpoint(self, *args, **kwargs):
        """mmengine's checkpoint, its meta holding this run's signature
        (:func:`run_signature`), which a resume compares."""
        signature = getattr(self, '_hpm_signature', None)
        if signature is not None:
            meta = dict(kwargs.get('meta') or {})
            meta['hpm_run'] = signature
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
        if self._resume:
            ckpt, self._hpm_resume_ckpt = self._hpm_resume_ckpt, None
            self._check_resume_fits(self._load_from, ckpt)
        else:
            self._check_load_from(self._load_from)

    def _original_model(self):
        from mmpretrain.utils import get_ori_model
        return get_ori_model(self.model)

    def _check_load_from(self, path: str) -> None:
        """Refuse a ``load_from`` checkpoint that fills less than half of
        the model's weights (by name and shape): a checkpoint of another
        architecture, which mmengine would load with a warning and then
        train from scratch. (A pretraining checkpoint fine-tuned through
        load_from fills the whole encoder; only a small head stays new.)"""
        model = self._original_model()
        share = share_of_model(model, checkpoint_state(model, path))
        if share < 0.5:
            raise HPMError(
                f'load_from={path} fills {100 * share:.1f}% of this model\'s '
                'weights (by name and shape): it is a checkpoint of another '
                'architecture, and training would start almost from '
                'scratch. Fix: a checkpoint of this architecture, or '
                'convert it (tools/model_converters/hpm2backbone.py) and '
                'load it through the backbone\'s init_cfg.')

    def _check_resume_fits(self, path: str, ckpt: dict = None) -> None:
        """Refuse to resume a checkpoint that does not fill this config's
        model (the architecture changed since it was written), in one
        line, before mmengine fails on unrelated tensor errors."""
        model = self._original_model()
        problem = checkpoint_mismatch(model,
                                      checkpoint_state(model, ckpt or path),
                                      f'--resume {path}')
        if problem:
            raise HPMError(
                f'{problem}: the config changed since the checkpoint was '
                'written. Fix: resume with the config it was trained with '
                '(its copy is in the work dir), or start a new work dir, '
                'with --cfg-options load_from=CKPT to start from its '
                'weights.')

    def _check_skipped_steps(self) -> None:
        """A run that ends having skipped more optimizer steps (non-finite
        loss or gradients) than it applied trained on almost nothing: fail
        it in one line instead of returning normally (runs shorter than
        the guard's limit of consecutive skips would otherwise pass)."""
        wrapper = self.optim_wrapper
        wrappers = wrapper.values() if hasattr(wrapper,
                                               'values') else [wrapper]
        for w in wrappers:
            skipped = getattr(w, 'skipped_steps', 0)
            applied = getattr(w, 'applied_steps', 0)
            if skipped and skipped >= applied:
                raise HPMError(
                    f'{skipped} of {skipped + applied} optimizer steps were '
                    'skipped (non-finite loss or gradients): the checkpoints '
                    'hold a model that barely trained. Fix: lower '
                    'optimizer.lr or set clip_grad, check the data, and '
                    'train again.')


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
