"""The resume room: which checkpoint a training run continues, whether it is
this run's, whether it fits, and what a changed run continues as.
:class:`RunResume` is asked by the runner before it writes anything, once
the model is built (the fit) and around mmengine's ``load_or_resume``;
every checkpoint carries the run's signature, id, line (the runs it
branched from) and start (the file from elsewhere it began from). The
rules: docs/reliability.md."""
import logging
import os
import os.path as osp
import re
import uuid
from typing import List, Optional, Tuple

import torch

from hpm_mm.errors import HPMError
from .download import download_checkpoint
from .optimizers.frozen_aware_constructor import merge_groups
from .optimizers.guarded_optim_wrapper import each_wrapper
from .safe_load import (check_finite, checkpoint_problem, checkpoint_state,
                        load_file)

#: the work dir's file holding the id of the run that owns its checkpoints
RUN_ID_FILE = 'run_id'
#: the dataset keys that say which data a run reads
DATA_KEYS = ('type', 'data_root', 'ann_file', 'data_prefix', 'split',
             'indices', 'subset')
#: how each part of the signature reads in a refusal
_NAMES = dict(
    data='train_dataloader.dataset',
    mask_generator='model.mask_generator',
    optimizer='optim_wrapper.optimizer (other than lr)',
    iters_per_epoch='iterations per epoch (images / batch / processes)',
    max_epochs='train_cfg.max_epochs',
    max_iters='train_cfg.max_iters',
    batch_size='train_dataloader.batch_size',
    world_size='processes (WORLD_SIZE)',
    lr='optim_wrapper.optimizer.lr',
    param_scheduler='param_scheduler')


# --------------------------------------------------------- the work dir
def checkpoints_in(work_dir: str) -> List[Tuple[int, str]]:
    """The work dir's ``epoch_N.pth`` / ``iter_N.pth``, newest first."""
    if not osp.isdir(work_dir):
        return []
    found = []
    for name in os.listdir(work_dir):
        m = re.fullmatch(r'(?:epoch|iter)_(\d+)\.pth', name)
        if m:
            found.append((int(m.group(1)), osp.join(work_dir, name)))
    return sorted(found, reverse=True)


def refuse_earlier_run(work_dir: str, begun: Optional[str] = None) -> None:
    """Refuse a new run in a work dir holding another run's checkpoints:
    they would mix, and a later ``--resume`` would continue the newest
    (``begun``: the file from elsewhere none of them began from)."""
    found = [osp.basename(p) for _, p in checkpoints_in(work_dir)][::-1]
    if found:
        raise HPMError(
            f'{work_dir} holds the checkpoints of an earlier run '
            f'({", ".join(found[:3])}{", ..." if len(found) > 3 else ""})' +
            (f', none begun from {begun}' if begun else '') +
            '. Fix: --resume to continue it, or a new --work-dir.')


def _hpm_run(path: str) -> dict:
    """What a checkpoint records of its run (``meta['hpm_run']``), its
    tensors left unread (mmap); {} for none, or a file that does not load so
    (torch's legacy format: no mmap, no hpm_mm run)."""
    try:
        return torch.load(
            path, map_location='cpu', weights_only=True,
            mmap=True)['meta'].get('hpm_run') or {}
    except Exception:
        return {}


def training_state(ckpt) -> bool:
    """Whether ``ckpt`` holds what a resume restores (its epoch and
    iteration, optimizer, message hub), not weights only."""
    return isinstance(ckpt, dict) and isinstance(ckpt.get('meta'), dict) \
        and {'optimizer', 'message_hub', 'meta'} <= set(ckpt) \
        and {'epoch', 'iter'} <= set(ckpt['meta'])


def _source(path: str) -> str:
    """The weights a run starts from, as its checkpoints record them."""
    return path if '://' in path else osp.realpath(path)


def _begun_from(work_dir: str, path: str) -> bool:
    """Whether the run ``--resume`` continues in ``work_dir`` began from
    ``path``, a file from elsewhere (its weights, or a run's checkpoint)."""
    found = find_resume_checkpoint(work_dir)[0] or ''
    return _hpm_run(found).get('start') == _source(path)


def read_run_ids(work_dir: str) -> tuple:
    """The work dir's run-id file, lines ``ID``, ``FOLDER``, ``PARENT STEP
    ...``: (this run's id or None, the folder it was written in, its line:
    {the id of each run it branched from: the last step of that run it
    holds})."""
    try:
        with open(osp.join(work_dir, RUN_ID_FILE)) as f:
            own, where, line = (f.read().splitlines() + ['', '', ''])[:3]
    except OSError:
        return None, work_dir, {}
    line = line.split()
    return own or None, where or work_dir, dict(
        zip(line[::2], (int(s) if s.isdigit() else -1 for s in line[1::2])))


def _ours(run: Optional[str], step: int, own: Optional[str],
          line: dict) -> bool:
    """Whether a checkpoint of the run ``run`` at ``step`` belongs to the
    run ``own``: its own, or one of its ``line`` up to the branch."""
    return run == own or step <= line.get(run, -1)


def find_resume_checkpoint(work_dir: str) -> Tuple[Optional[str], List[str]]:
    """The checkpoint ``--resume`` continues: the newest complete one of
    this run (:func:`_ours`) at or before the one ``last_checkpoint`` names
    (a pointer into another folder read as the file of that name here); a
    newer one only when it records this run's id. This run is the run-id
    file's, else the pointed checkpoint's, else the one every checkpoint
    records: runs that disagree are never chosen between by date. Returns
    (path or None, skipped lines)."""
    pointer, pointed = osp.join(work_dir, 'last_checkpoint'), None
    if osp.isfile(pointer):
        with open(pointer) as f:
            pointed = osp.join(work_dir, osp.basename(f.read().strip()))
    found = checkpoints_in(work_dir)
    limit = next((s for s, p in found if p == pointed), None)
    candidates = [(pointed, False)] if pointed and limit is None else []
    candidates += [(p, limit is not None and s > limit) for s, p in found]
    own, _, line = read_run_ids(work_dir)
    if own is None:  # the pointed checkpoint's run, else the one all record
        runs = {_hpm_run(p).get('run_id'): p for _, p in found[::-1]}
        ids = set(runs) - {None}
        own = _hpm_run(pointed or '').get('run_id')
        own = own or (ids.pop() if len(ids) == 1 else None)
        if own is None and ids:
            return None, [
                ', '.join(f'{osp.basename(p)} of run {r}'
                          for r, p in runs.items() if r) +
                ': runs disagree, and neither last_checkpoint nor '
                f'{RUN_ID_FILE} says which is this one'
            ]
    steps = {p: s for s, p in found}
    skipped = []
    for path, newer in candidates:
        problem = checkpoint_problem(path)
        if problem is None:
            run = _hpm_run(path).get('run_id')
            if not _ours(run, steps.get(path, 0), own, line) or \
                    (newer and run is None):
                problem = ((f'newer than {pointer} and ' if newer else '') +
                           f'not of this run (its run id {run} is not '
                           f'{own})')
        if problem is None:
            return path, skipped
        skipped.append(f'{path}: {problem}')
    return None, skipped


# ------------------------------------------------------- the signature
def _plain(value):
    """``value`` with tuples as lists and configs as dicts (as a
    checkpoint's meta keeps it), for comparing."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items() if k != '_scope_'}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def run_signature(kw: dict) -> dict:
    """What defines the run a checkpoint continues, from the runner's
    arguments: its length, batch, processes, lr and schedulers (the
    iteration schedule), data, mask generator and other optimizer
    hyper-parameters."""

    def part(node, key):  # a dict's dict entry, or {}
        value = node.get(key) if isinstance(node, dict) else None
        return value if isinstance(value, dict) else {}

    train_cfg, loader = part(kw, 'train_cfg'), part(kw, 'train_dataloader')
    optimizer = part(part(kw, 'optim_wrapper'), 'optimizer')
    schedulers = kw.get('param_scheduler') or []
    schedulers = [schedulers] if isinstance(schedulers, dict) else schedulers
    dataset = part(loader, 'dataset')
    return dict(
        data={k: dataset[k]
              for k in DATA_KEYS if dataset.get(k) is not None} if isinstance(
                  loader.get('dataset'), dict) else None,
        mask_generator=_plain(part(kw, 'model').get('mask_generator')),
        optimizer=_plain({
            k: v
            for k, v in optimizer.items() if k != 'lr'
        }),
        max_epochs=train_cfg.get('max_epochs'),
        max_iters=train_cfg.get('max_iters'),
        batch_size=loader.get('batch_size'),
        world_size=int(os.environ.get('WORLD_SIZE', '1')),
        lr=optimizer.get('lr'),
        param_scheduler=[_plain(s) for s in schedulers if isinstance(s, dict)])


def _change(key: str, old, new) -> str:
    """One difference, as a refusal names it (a dict by its changed keys)."""
    if isinstance(old, dict) and isinstance(new, dict):
        keys = sorted(
            k for k in set(old) | set(new)
            if _plain(old.get(k)) != _plain(new.get(k)))
        return '; '.join(f'{_NAMES[key]}.{k} {old.get(k)!r} -> '
                         f'{new.get(k)!r}' for k in keys)
    if key == 'param_scheduler':
        return 'param_scheduler (its types, ends or values)'
    return f'{_NAMES[key]} {old!r} -> {new!r}'


# -------------------------------------------------------------- the room
class RunResume:
    """What a training run starts from (``kw``: the runner's arguments, its
    ``load_from`` set to the checkpoint found), checked before the runner
    writes anything: an incomplete checkpoint, another run's, a changed run
    (unless ``allowed``: ``resume_changed_run=True``), a new run or a file
    from elsewhere resumed in a work dir holding another run's checkpoints
    are refused in one line."""

    def __init__(self,
                 kw: dict,
                 work_dir: str,
                 allowed: bool,
                 explicit: bool = False) -> None:
        self.notes: List[Tuple[int, str]] = []
        self.signature = run_signature(kw)
        self.allowed = allowed
        self.run_id = uuid.uuid4().hex[:12]
        self.work_dir = work_dir
        self.resume = bool(kw.get('resume'))
        self.then = None  # the resumed checkpoint's hpm_run meta
        self.ckpt = None  # loaded once, for the fit check
        self.saved, self.changed = [], False  # its schedulers; run changed
        self.line = {}  # the runs it branched from: {run id: last step}
        self.path = given = kw.get('load_from')
        outside = bool(given) and \
            osp.dirname(_source(given)) != osp.realpath(work_dir)
        self.start = None  # the file from elsewhere the run began from
        if self.resume and given and not explicit:  # (loaded once)
            self.ckpt = load_file(given)
            weights = not training_state(self.ckpt)  # (imported, converted)
            if (outside or weights) and _begun_from(work_dir, given):
                kw['load_from'] = given = None  # the run begun from it goes on
            elif weights:
                kw['resume'] = self.resume = False
                self.notes.append((logging.INFO, f'load_from {given}: '
                                   'weights without training state; the run '
                                   'starts from them'))
        if not self.resume:
            self.start = given and _source(given)
            refuse_earlier_run(work_dir, self.ckpt and given)
            return
        found = self._find(kw.get('load_from'))
        if found and (found != self.path or self.ckpt is None):
            self.ckpt = load_file(found)
        self.path = kw['load_from'] = found
        if self.path:
            if not training_state(self.ckpt):
                raise HPMError(
                    f'--resume {self.path}: it holds no training state (an '
                    'epoch, optimizer and message hub; weights only). Fix: '
                    f'use load_from={self.path} in a new work dir to start '
                    'from its weights.')
            if given and outside:  # a run's checkpoint from elsewhere
                self.start = _source(given)
                if checkpoints_in(work_dir) and \
                        not _begun_from(work_dir, given):  # (they would mix)
                    refuse_earlier_run(work_dir, given)
            meta = self.ckpt['meta']
            self.then = meta.get('hpm_run')
            self.saved = self.ckpt.get('param_schedulers') or []
            then = self.then or {}
            run, step = then.get('run_id'), meta['epoch'] or meta['iter']
            own, where, line = read_run_ids(work_dir)
            self.start = self.start or then.get('start')
            if own is not None and _ours(run, step, own, line):
                self.run_id, self.line = own, line  # the work dir's run
            else:  # the checkpoint's run goes on
                self.run_id, self.line = run or self.run_id, then.get(
                    'line') or {}
            if own is not None and osp.isdir(where) and \
                    osp.realpath(where) != osp.realpath(work_dir):
                # a copy of a work dir: a branch of the run it holds
                self.line = dict(self.line, **({run: step} if run else {}))
                self.run_id = uuid.uuid4().hex[:12]
                self.notes.append(
                    (logging.WARNING, f'resume: {work_dir} is a copy of '
                     f'{where} (its run id file says so): this run '
                     f'continues as a branch with its own id {self.run_id}'))
            self._check_same_run(meta)

    def _find(self, load_from: Optional[str]) -> Optional[str]:
        if load_from:
            if load_from.startswith(('http://', 'https://')):
                url, load_from = load_from, download_checkpoint(load_from)
                self.notes.append((logging.INFO, f'resume: {url} is '
                                   f'{load_from}'))
            problem = checkpoint_problem(load_from)
            if problem:
                newest, _ = find_resume_checkpoint(
                    osp.dirname(load_from) or '.')
                fix = f'--resume {newest}, the newest complete one there' \
                    if newest else 'a complete checkpoint, or bare --resume'
                raise HPMError(
                    f'cannot resume from {load_from}: {problem}. Fix: {fix}.')
            return load_from
        path, skipped = find_resume_checkpoint(self.work_dir)
        self.notes += [(logging.WARNING, f'resume: skipped {s}')
                       for s in skipped]
        if path:
            self.notes.append((logging.INFO, f'resume: from {path}'))
        elif skipped:
            raise HPMError(
                f'--resume found no complete checkpoint of this run in '
                f'{self.work_dir} ({"; ".join(skipped)}) and will not train '
                'from scratch over them. Fix: move them, or --resume PATH.')
        else:
            self.notes.append((logging.WARNING, 'resume: no checkpoint in '
                               f'{self.work_dir} yet: training from scratch'))
        return path

    def _check_same_run(self, meta: dict) -> None:
        if self.then is None:
            self.notes.append(
                (logging.WARNING, f'resume: {self.path} records no run '
                 'signature (another runner wrote it): its schedulers\' '
                 "saved ends are compared with this run's"))
            return self._check_length(meta)
        changed = [
            _change(k, self.then[k], v) for k, v in self.signature.items()
            if k in self.then and _plain(self.then[k]) != _plain(v)
        ]
        self._refuse(changed, self.notes)
        self.changed = bool(changed)
        self._check_length(meta)

    def _check_length(self, meta: dict) -> None:
        """A run shorter than what the checkpoint trained cannot continue
        it (it trained nothing and ended well), signed or not."""
        for key, done in (('max_epochs', meta.get('epoch')),
                          ('max_iters', meta.get('iter'))):
            length = self.signature[key]
            if length is not None and done and length < done:
                raise HPMError(
                    f'--resume {self.path}: it trained {done} {key[4:]}, '
                    f'more than train_cfg.{key}={length}. Fix: '
                    f'train_cfg.{key} >= {done}, or load_from={self.path} '
                    'in a new work dir.')

    def _refuse(self, changed: List[str], notes: list) -> None:
        if not changed:
            return
        what = '; '.join(changed)
        if self.allowed:
            notes.append(
                (logging.WARNING, f'resume: the run changed since '
                 f'{self.path} ({what}); continuing as the new config, as '
                 'resume_changed_run=True asks'))
            return
        raise HPMError(
            f'--resume {self.path}: the run changed since it was written '
            f'({what}). Fix: resume with its config, data and processes (the '
            "work dir's config copy), or load_from=CKPT in a new work dir, "
            'or resume_changed_run=True to continue it as the new config.')

    def check_fits(self, model) -> None:
        """Refuse a checkpoint that does not fit ``model``: a resumed one
        that does not fill it, a ``load_from`` that fills less than half
        of it (another architecture, trained almost from scratch)."""
        if not self.path:
            return
        ckpt, self.ckpt = self.ckpt, None  # (loaded once, where it was)
        name = f'--resume {self.path}' if self.resume else \
            f'load_from={self.path}'
        state = checkpoint_state(model, ckpt or self.path)
        check_finite(state, name)  # (kNN's line)
        if self.resume:
            problem = checkpoint_mismatch(model, state, name, True)
            if problem:
                raise HPMError(
                    f'{problem}: the config changed since the checkpoint was '
                    "written. Fix: resume with its config (the work dir's "
                    'copy), or load_from=CKPT in a new work dir.')
            return
        share = share_of_model(model, state)
        if share < 0.5:
            raise HPMError(
                f'load_from={self.path} fills {100 * share:.1f}% of this '
                "model's weights: a checkpoint of another architecture. Fix: "
                "one of this architecture, or convert it (tools/model_"
                "converters/hpm2backbone.py) for the backbone's init_cfg.")

    def load(self, runner, load) -> None:
        """Run mmengine's ``load_or_resume`` (``load``) for ``runner``; for a
        resumed run, first refuse a changed number of iterations per epoch
        (or, for a checkpoint without a signature, changed scheduler ends),
        and with ``resume_changed_run`` continue as the new config from the
        epoch reached: the iteration count, the optimizer's hyper-parameters
        and the parameter schedulers are this config's at that epoch."""
        if not (runner._resume and self.path):
            return load()
        schedulers = runner.param_schedulers or []
        if isinstance(schedulers, dict):  # per optimizer: the first
            schedulers = next(iter(schedulers.values()), [])
        iters_per_epoch = len(runner.train_dataloader)
        changed = []
        if self.then is not None:
            old = self.then.get('iters_per_epoch')
            if old is not None and old != iters_per_epoch:
                changed.append(
                    _change('iters_per_epoch', old, iters_per_epoch))
        else:
            for i, (s, state) in enumerate(zip(schedulers, self.saved)):
                for key in ('end', 'T_max'):
                    mine, then = getattr(s, key, None), (state or {}).get(key)
                    if mine is not None and then is not None and mine != then:
                        changed.append(f'param_scheduler.{i} '
                                       f'({type(s).__name__}) {key} {then} -> '
                                       f'{mine} iterations')
        notes = []
        self._refuse(changed, notes)
        for level, message in notes:
            runner.logger.log(level, message)
        if not (self.allowed and (self.changed or changed)):
            return load()
        wrappers = each_wrapper(runner.optim_wrapper)
        groups = [[{
            k: v
            for k, v in g.items() if k != 'params'
        } for g in w.optimizer.param_groups] for w in wrappers]
        fresh = [(s, s.state_dict()) for s in schedulers]
        load()
        for w, built in zip(wrappers, groups):  # this config's values
            for group, values in zip(w.optimizer.param_groups, built):
                group.update(values)
        iters = runner.iter
        from mmengine.runner import EpochBasedTrainLoop
        if isinstance(runner.train_loop, EpochBasedTrainLoop):
            iters = runner.epoch * iters_per_epoch  # this run's iterations
            runner.train_loop._iter = iters
        _replay(fresh, iters, iters_per_epoch)

    def restore(self, runner, ckpt: dict) -> None:
        """Before mmengine loads a resumed checkpoint's optimizer state: its
        groups merged as this run's (:func:`merge_saved`); the non-finite
        guard's steps skipped and applied (its end-of-run check counts the
        whole run) and whether the last was applied, which the EMA teacher's
        next update reads (a run saved after a skipped step leaves the
        teacher, as it would have without the stop)."""
        wrapper = runner.optim_wrapper  # (built: both runners' train)
        line = hasattr(wrapper, 'optimizer') and merge_saved(
            ckpt, wrapper.optimizer)
        if line:
            runner.logger.info(line)
        run = (ckpt.get('meta') or {}).get('hpm_run') or {}
        if 'last_applied' in run and hasattr(wrapper, 'last_applied'):
            wrapper.last_applied = run['last_applied']
            wrapper._skipped, wrapper._applied = run['steps']

    def meta(self, iters_per_epoch: int, wrapper=None) -> dict:
        """What every checkpoint records of the run (``meta['hpm_run']``;
        from the non-finite guard's ``wrapper``: its steps skipped and
        applied so far and whether the last was applied); the run's id goes
        into the work dir too, where ``--resume`` reads which newer
        checkpoints are its own."""
        from mmengine.dist import is_main_process
        if is_main_process() and osp.isdir(self.work_dir):
            with open(osp.join(self.work_dir, RUN_ID_FILE), 'w') as f:
                line = ' '.join(f'{k} {v}' for k, v in self.line.items())
                f.write(f'{self.run_id}\n{osp.realpath(self.work_dir)}\n'
                        f'{line}\n')
        guard = {}
        if getattr(wrapper, 'last_applied', None) is not None:
            guard = dict(
                last_applied=float(wrapper.last_applied),
                steps=[wrapper.skipped_steps, wrapper.applied_steps])
        return dict(
            self.signature,
            iters_per_epoch=iters_per_epoch,
            run_id=self.run_id,
            line=self.line,
            start=self.start,
            **guard)


def merge_saved(ckpt: dict, optimizer) -> Optional[str]:
    """A resumed checkpoint whose optimizer holds more parameter groups than
    ``optimizer`` (saved before the constructor merged them by setting: one
    per parameter) merged the same way, in place: its state renumbered (an
    FSDP state, keyed by name, keeps its keys), its schedulers' per-group
    values those of each merged group's first. Returns the line that says
    so; None where nothing was merged (torch's own error names a layout
    that still differs)."""
    state = ckpt.get('optimizer') or {}
    saved = state.get('param_groups') or []
    if len(saved) <= len(optimizer.param_groups):
        return None
    merged = merge_groups([  # each parameter as (its group, its saved id)
        dict(g, params=[(i, p) for p in g['params']])
        for i, g in enumerate(saved)
    ])
    if [len(g['params']) for g in merged] != \
            [len(g['params']) for g in optimizer.param_groups]:
        return None
    firsts = [g['params'][0][0] for g in merged]
    order = [p for g in merged for _, p in g['params']]  # FSDP's: names
    new = {p: i if isinstance(p, int) else p for i, p in enumerate(order)}
    state['state'] = {new[p]: v for p, v in state['state'].items()}
    state['param_groups'] = [
        dict(g, params=[new[p] for _, p in g['params']]) for g in merged
    ]
    for scheduler in ckpt.get('param_schedulers') or []:
        for key in set(scheduler) & {'base_values', '_last_value'}:
            scheduler[key] = [scheduler[key][i] for i in firsts]
    return (f'resume: the checkpoint\'s {len(saved)} optimizer groups (one '
            f'per parameter) merged by setting into {len(merged)}, as this '
            'run builds them')


def _replay(fresh, iters: int, iters_per_epoch: int) -> None:
    """Put each scheduler back as built for this run and step it through
    ``iters`` iterations, as the runner's ``ParamSchedulerHook`` does (per
    iteration, and at each epoch's end those by epoch): chained schedulers
    compute each value from the last one."""
    import warnings
    with warnings.catch_warnings():  # (steps before any optimizer step)
        warnings.simplefilter('ignore', UserWarning)
        for scheduler, state in fresh:  # from the base values, as built
            for group, value in zip(scheduler.optimizer.param_groups,
                                    state['base_values']):
                group[scheduler.param_name] = value
        for scheduler, state in fresh:
            scheduler.load_state_dict(
                dict(state, last_step=-1, _global_step=-1))
            scheduler.step()
        schedulers = [s for s, _ in fresh]
        for i in range(iters):
            for s in schedulers:
                if not s.by_epoch:
                    s.step()
            if (i + 1) % iters_per_epoch == 0:
                for s in schedulers:
                    if s.by_epoch:
                        s.step()


# -------------------------------------------------------------- the fit
def _own_state(model: torch.nn.Module) -> dict:
    """``model``'s state dict; an FSDP-sharded model's as it was before
    sharding (``HPMFullyShardedDataParallel``'s meta tensors)."""
    return getattr(model, 'unsharded_state', None) or model.state_dict()


def share_of_model(model: torch.nn.Module, state_dict: dict) -> float:
    """The fraction of ``model``'s floating-point weights that
    ``state_dict`` holds under the same name (``module.`` dropped) and
    shape."""
    own = {k: v for k, v in _own_state(model).items() if v.is_floating_point()}
    shared = 0
    for k, v in state_dict.items():
        k = k[len('module.'):] if k.startswith('module.') else k
        if k in own and torch.is_tensor(v) and \
                tuple(v.shape) == tuple(own[k].shape):
            shared += own[k].numel()
    return shared / max(sum(v.numel() for v in own.values()), 1)


def checkpoint_mismatch(model: torch.nn.Module,
                        state_dict: dict,
                        name: str = 'the checkpoint',
                        exact: bool = False) -> Optional[str]:
    """One line saying how ``state_dict`` fails to fill ``model`` (missing
    keys, other shapes; keys the model lacks are counted, and with
    ``exact`` a failure too: a resumed model shallower or narrower than
    the checkpoint's), or None."""
    own = _own_state(model)
    missing = [k for k in own if k not in state_dict]
    shapes = [
        k for k in own if k in state_dict
        and tuple(state_dict[k].shape) != tuple(own[k].shape)
    ]
    extra = [k for k in state_dict if k not in own]
    if not missing and not shapes and not (exact and extra):
        return None
    if not missing and not shapes:
        return (f'{name} holds {len(extra)} tensors the model lacks (e.g. '
                f'{", ".join(extra[:3])}): the model is shallower or '
                'narrower than the one it was trained with')
    parts = []
    if missing:
        parts.append(f'{len(missing)} of the model\'s {len(own)} tensors are '
                     f'missing (e.g. {", ".join(missing[:3])})')
    if shapes:
        k = shapes[0]
        parts.append(f'{len(shapes)} have another shape (e.g. {k}: '
                     f'{tuple(state_dict[k].shape)} in the file, '
                     f'{tuple(own[k].shape)} in the model)')
    return (f'{name} does not fill the model: ' + '; '.join(parts) +
            f'; {len(extra)} keys of the file are not in the model')
