"""The resume room: which checkpoint a training run starts from, whether it
is this run's (its signature, id, line and start, in every checkpoint),
whether it fits. The restore is :class:`~hpm_mm.engine.hooks.ResumeHook`'s,
older layouts :mod:`.checkpoint_migrations`'. Rules: docs/reliability.md."""
import logging
import os
import os.path as osp
import re
import uuid
from typing import List, Optional, Tuple

import torch

from hpm_mm.errors import HPMError
from .checkpoint_migrations import checkpoint_state
from .download import download_checkpoint
from .run_signature import changed_run, run_signature, signature_changes
from .safe_load import check_fills, check_finite, checkpoint_problem, load_file

#: the work dir's file: lines ``ID``, ``FOLDER`` (where it was written),
#: ``PARENT STEP ...`` (the runs it branched from, the last step of each)
RUN_ID_FILE = 'run_id'


def checkpoints_in(work_dir: str) -> List[Tuple[int, str]]:
    """The work dir's ``epoch_N.pth`` / ``iter_N.pth``, newest first."""
    names = os.listdir(work_dir) if osp.isdir(work_dir) else []
    found = [(re.fullmatch(r'(?:epoch|iter)_(\d+)\.pth', n), n) for n in names]
    return sorted(
        ((int(m.group(1)), osp.join(work_dir, n)) for m, n in found if m),
        reverse=True)


def refuse_earlier_run(work_dir: str, load_from: Optional[str] = None) -> None:
    """Refuse a new run in a work dir holding another run's checkpoints
    (they would mix); the fix, ``--resume``, drops a ``load_from`` that run
    did not begin from (kept, it would come back here)."""
    found = [osp.basename(p) for _, p in checkpoints_in(work_dir)][::-1]
    if not found:
        return
    other = bool(load_from) and not _begun_from(work_dir, load_from)
    raise HPMError(
        f'{work_dir} holds the checkpoints of an earlier run '
        f'({", ".join(found[:3])}{", ..." if len(found) > 3 else ""})' +
        (f', none begun from {load_from}. Fix: --resume --cfg-options '
         'load_from=None' if other else '. Fix: --resume') +
        ' to continue it, or a new --work-dir.')


def _hpm_run(path: str) -> dict:
    """A checkpoint's ``meta['hpm_run']`` (tensors unread), or {}."""
    try:
        return torch.load(
            path, map_location='cpu', weights_only=True,
            mmap=True)['meta'].get('hpm_run') or {}
    except Exception:
        return {}


def training_state(ckpt) -> bool:
    """Whether ``ckpt`` holds a training state (epoch, optimizer, ...)."""
    return isinstance(ckpt, dict) and isinstance(ckpt.get('meta'), dict) \
        and {'optimizer', 'message_hub', 'meta'} <= set(ckpt) \
        and {'epoch', 'iter'} <= set(ckpt['meta'])


def _source(path: str) -> str:
    """A file from elsewhere as a run's checkpoints record its start."""
    return path if '://' in path else osp.realpath(path)


def _begun_from(work_dir: str, path: str, unknown: bool = True) -> bool:
    """Whether the run ``--resume`` continues in ``work_dir`` began from
    ``path``; ``unknown`` where none of its checkpoints is complete."""
    found, skipped = find_resume_checkpoint(work_dir)
    return _hpm_run(found).get('start') == _source(path) if found else \
        unknown and bool(skipped)


def run_start(work_dir: str):
    """Where the run ``--resume`` continues in ``work_dir`` began (its
    checkpoints' record: a checkpoint's path, None from scratch); False
    where none of its checkpoints is complete."""
    found = find_resume_checkpoint(work_dir)[0]
    return _hpm_run(found).get('start') if found else False


def read_run_ids(work_dir: str) -> tuple:
    """The work dir's :data:`RUN_ID_FILE`: (this run's id or None, the
    folder it was written in, {each run it branched from: its last step})."""
    try:
        with open(osp.join(work_dir, RUN_ID_FILE)) as f:
            own, where, line = (f.read().splitlines() + ['', '', ''])[:3]
    except OSError:
        return None, work_dir, {}
    line = line.split()
    return own or None, where or work_dir, dict(
        zip(line[::2], (int(s) if s.isdigit() else -1 for s in line[1::2])))


def find_resume_checkpoint(work_dir: str) -> Tuple[Optional[str], List[str]]:
    """(The checkpoint ``--resume`` continues, the lines of those skipped):
    this run's (or its line's, up to the branch) newest complete one at or
    before the one ``last_checkpoint`` names (as a file here), newer only
    when of this run: the run-id file's, else the pointed checkpoint's,
    else the one every checkpoint records, never chosen by date."""
    pointer, pointed = osp.join(work_dir, 'last_checkpoint'), None
    if osp.isfile(pointer):
        with open(pointer) as f:
            pointed = osp.join(work_dir, osp.basename(f.read().strip()))
    found = checkpoints_in(work_dir)
    limit = next((s for s, p in found if p == pointed), None)
    candidates = [(pointed, 0, False)] if pointed and limit is None else []
    candidates += [(p, s, limit is not None and s > limit) for s, p in found]
    own, _, line = read_run_ids(work_dir)
    if own is None:  # the pointed checkpoint's run, else the one all record
        runs = {_hpm_run(p).get('run_id'): p for _, p in found[::-1]}
        ids = set(runs) - {None}
        own = _hpm_run(pointed or '').get('run_id') or (ids.pop() if len(ids)
                                                        == 1 else None)
        if own is None and ids:
            return None, [
                ', '.join(f'{osp.basename(p)} of run {r}'
                          for r, p in runs.items() if r) +
                ': runs disagree; nothing says which is this one'
            ]
    skipped = []
    for path, step, newer in candidates:
        problem = checkpoint_problem(path)
        run = _hpm_run(path).get('run_id') if problem is None else None
        if problem is None and (run != own and step > line.get(run, -1)
                                or newer and run is None):
            problem = ((f'newer than {pointer} and ' if newer else '') +
                       f'not of this run (its run id {run} is not {own})')
        if problem is None:
            return path, skipped
        skipped.append(f'{path}: {problem}')
    return None, skipped


class RunResume:
    """What a training run starts from, decided and checked before the
    runner writes anything (``kw``: its arguments, ``load_from`` and
    ``resume`` set as decided; ``allowed``: ``resume_changed_run``)."""

    def __init__(self, kw: dict, work_dir: str, allowed: bool) -> None:
        self.notes: List[Tuple[int, str]] = []  # (level, line) to log
        self.signature, self.work_dir = run_signature(kw), work_dir
        self.run_id, self.line = uuid.uuid4().hex[:12], {}
        self.start, self.ckpt, self.changed = None, None, False  # (ckpt: once)
        self.path = kw['load_from'] = self._decide(kw)
        if not (self.resume and self.path):
            return
        meta = self.ckpt['meta']
        then = meta.get('hpm_run') or {}
        run, step = then.get('run_id'), meta['epoch'] or meta['iter']
        own, where, line = read_run_ids(work_dir)
        self.start = self.start or then.get('start')
        if own is not None and (run == own or step <= line.get(run, -1)):
            self.run_id, self.line = own, line  # the work dir's run
        else:  # the checkpoint's run goes on
            self.run_id, self.line = run or self.run_id, then.get('line') or {}
        if own is not None and osp.isdir(where) and \
                osp.realpath(where) != osp.realpath(work_dir):
            # a copy of a work dir: a branch of the run it holds
            self.line = dict(self.line, **({run: step} if run else {}))
            self.run_id = uuid.uuid4().hex[:12]
            self.notes.append((logging.WARNING, f'resume: {work_dir} is a '
                               f'copy of {where}: a branch, id {self.run_id}'))
        if not then:
            self.notes.append((logging.WARNING, f'resume: {self.path} '
                               'records no run signature (not hpm_mm\'s)'))
        # a changed run refused unless allowed, one shorter than what the
        # checkpoint trained too (it would train nothing and end well)
        line = changed_run(self.path, signature_changes(then, self.signature),
                           allowed)
        if line:
            self.changed = True
            self.notes.append((logging.WARNING, line))
        key = 'max_iters' if self.signature['max_epochs'] is None else \
            'max_epochs'  # (the one a run sets)
        length, done = self.signature[key], meta[key[4:-1]]
        if length is not None and done and length < done:
            raise HPMError(f'--resume {self.path}: it trained {done} '
                           f'{key[4:]}, more than train_cfg.{key}={length}. '
                           f'Fix: train_cfg.{key} >= {done}.')

    def _decide(self, kw: dict) -> Optional[str]:
        """Which checkpoint the run starts from (``kw['resume']`` set so).
        ``--resume PATH`` (``resume=PATH``): that file. ``resume=True`` beside
        ``load_from=FILE`` (an imported config's; a bare ``--resume`` keeps
        it): the work dir's run begun from FILE goes on; else FILE is
        resumed if it holds training state, else (weights only: imported,
        converted) a warm start, a new run from them. ``resume=True``
        alone: this run's newest checkpoint here. No resume: a new run.
        A new run, or a run's file from elsewhere resumed, is refused in a
        work dir holding another run's checkpoints."""
        explicit = isinstance(kw.get('resume'), str)  # FlexibleRunner's form
        given = kw['resume'] if explicit else kw.get('load_from')
        self.resume = bool(kw.get('resume'))
        outside = bool(given) and \
            osp.dirname(_source(given)) != osp.realpath(self.work_dir)
        if self.resume and given and not explicit:
            self.ckpt = load_file(given)
            weights = not training_state(self.ckpt)  # (imported, converted)
            if (outside or weights) and _begun_from(self.work_dir, given):
                given = None  # the run begun from it goes on
            elif weights:
                self.resume = False
                self.notes.append((logging.INFO, f'load_from {given}: '
                                   'weights without training state; the run '
                                   'starts from them'))
        kw['resume'] = self.resume
        if not self.resume:
            self.start = given and _source(given)
            refuse_earlier_run(self.work_dir, given)
            return given
        found = self._find(given)
        if found and (found != given or self.ckpt is None):
            self.ckpt = load_file(found)
        if found and not training_state(self.ckpt):
            raise HPMError(f'--resume {found}: it holds no training state. '
                           f'Fix: load_from={found} in a new work dir.')
        if given and outside:  # a run's checkpoint from elsewhere
            self.start = _source(given)
            if not _begun_from(self.work_dir, given, False):  # (would mix)
                refuse_earlier_run(self.work_dir, given)
        return found

    def _find(self, load_from: Optional[str]) -> Optional[str]:
        """``load_from`` (a URL downloaded), refused when incomplete; else
        the work dir's (:func:`find_resume_checkpoint`), or None."""
        if load_from:
            if load_from.startswith(('http://', 'https://')):
                url, load_from = load_from, download_checkpoint(load_from)
                self.notes.append((logging.INFO, f'resume: {url} is '
                                   f'{load_from}'))
            problem = checkpoint_problem(load_from)
            if problem:
                newest = find_resume_checkpoint(osp.dirname(load_from)
                                                or '.')[0]
                fix = f'--resume {newest}, the newest complete one there' \
                    if newest else 'a complete checkpoint, or a new --work-dir'
                raise HPMError(
                    f'cannot resume from {load_from}: {problem}. Fix: {fix}.')
            return load_from
        path, skipped = find_resume_checkpoint(self.work_dir)
        self.notes += [(logging.WARNING, f'resume: skipped {s}')
                       for s in skipped]
        if skipped and not path:
            raise HPMError(f'--resume found no complete checkpoint of this '
                           f'run in {self.work_dir} ({"; ".join(skipped)}) and'
                           ' will not train from scratch over them. Fix: '
                           '--resume PATH.')
        self.notes.append((logging.INFO, f'resume: from {path}') if path else (
            logging.WARNING, f'resume: no checkpoint in {self.work_dir} '
            'yet: training from scratch'))
        return path

    def check_fits(self, model) -> None:
        """Refuse a resumed checkpoint that does not fill ``model``, a
        ``load_from`` filling under half of it (another architecture)."""
        path, self.path, ckpt, self.ckpt = self.path, None, self.ckpt, None
        if not path:  # (checked once: loaded once, where it was)
            return
        name = f'--resume {path}' if self.resume else f'load_from={path}'
        state = checkpoint_state(model, ckpt or path)
        check_finite(state, name)  # (kNN's line)
        if self.resume:  # every tensor, both ways
            return check_fills(
                model, state, name, "resume with the work dir's config copy "
                '(the config changed since the checkpoint was written)', True)
        own = getattr(model, 'unsharded_state', None) or model.state_dict()
        sizes = [(v.numel(), getattr(state.get(k), 'shape', 0) == v.shape)
                 for k, v in own.items() if v.is_floating_point()]
        share = sum(n for n, fits in sizes if fits) / max(
            sum(n for n, _ in sizes), 1)
        if share < 0.5:  # (an FSDP model's shapes before sharding)
            raise HPMError(f'load_from={path} fills {100 * share:.1f}% '
                           "of this model's weights: a checkpoint of another "
                           'architecture. Fix: one of this architecture.')

    def meta(self, iters_per_epoch: int, wrapper=None) -> dict:
        """Every checkpoint's ``meta['hpm_run']`` (with the guard's step
        counts); its id and line also in the work dir's :data:`RUN_ID_FILE`."""
        from mmengine.dist import is_main_process
        if is_main_process() and osp.isdir(self.work_dir):
            with open(osp.join(self.work_dir, RUN_ID_FILE), 'w') as f:
                line = ' '.join(f'{k} {v}' for k, v in self.line.items())
                f.write(f'{self.run_id}\n{osp.realpath(self.work_dir)}\n'
                        f'{line}\n')
        return dict(
            self.signature,
            iters_per_epoch=iters_per_epoch,
            run_id=self.run_id,
            line=self.line,
            start=self.start,
            **getattr(wrapper, 'step_counts', dict)())
