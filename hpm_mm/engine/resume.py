"""What a resumed or warm-started run is checked against, before it
trains: the checkpoint it continues (complete, the newest of the work dir),
the run that wrote it (same iteration schedule), and the model it must fill;
and a new run's work dir (no earlier run's checkpoints). Each refusal is an
:class:`~hpm_mm.errors.HPMError` in one line."""
import logging
import os
import os.path as osp
from typing import List, Optional, Tuple

from hpm_mm.errors import HPMError
from .checkpoint import (checkpoint_mismatch, checkpoint_problem,
                         checkpoint_state, download_checkpoint,
                         find_resume_checkpoint, share_of_model)


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
    """What defines the run a checkpoint continues, from the runner's
    arguments: its length, the batch per process, the number of processes,
    the base lr and the parameter schedulers (the iteration schedule), the
    data it reads, the mask generator and the optimizer's other
    hyper-parameters (a resumed optimizer state brings back the old ones).
    Saved in every checkpoint's meta (``hpm_run``, with the iterations per
    epoch the run had) and compared when it is resumed; keys a checkpoint
    lacks (written by an earlier hpm_mm) are not compared."""
    train_cfg = kw.get('train_cfg') or {}
    loader = kw.get('train_dataloader')
    optim = kw.get('optim_wrapper')
    optimizer = optim.get('optimizer', {}) if isinstance(optim, dict) else {}
    schedulers = kw.get('param_scheduler') or []
    if isinstance(schedulers, dict):
        schedulers = [schedulers]
    dataset = loader.get('dataset') if isinstance(loader, dict) else None
    model = kw.get('model')
    return dict(
        data={
            k: dataset.get(k)
            for k in DATA_KEYS if dataset.get(k) is not None
        } if isinstance(dataset, dict) else None,
        mask_generator=_plain(model.get('mask_generator')) if isinstance(
            model, dict) else None,
        optimizer={
            k: _plain(v)
            for k, v in dict(optimizer).items() if k not in ('lr', '_scope_')
        } if isinstance(optimizer, dict) else None,
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


#: the dataset keys that say which data a run reads
DATA_KEYS = ('type', 'data_root', 'ann_file', 'data_prefix', 'split',
             'indices', 'subset')


def _plain(value):
    """``value`` with tuples as lists and configs as dicts (as a
    checkpoint's meta keeps it), for comparing."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items() if k != '_scope_'}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


#: how each part of the signature reads in a refusal
_SIGNATURE_NAMES = dict(
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
                      'before hpm_mm 1.1 or by another runner): its '
                      "schedulers' saved ends are compared with this run's"))
        return
    changed = [
        _change(k, then.get(k), v) for k, v in signature.items() if k in then
        and _plain(then.get(k)) != _plain(v) and k != 'param_scheduler'
    ]
    if 'param_scheduler' in then and _plain(then['param_scheduler']) != \
            _plain(signature['param_scheduler']):
        changed.append('param_scheduler (its types, ends or values)')
    refuse_changes(path, changed, allowed, notes)


def _change(key: str, old, new) -> str:
    """One difference, as a refusal names it (a dict by its changed keys)."""
    if isinstance(old, dict) and isinstance(new, dict):
        keys = sorted(
            k for k in set(old) | set(new)
            if _plain(old.get(k)) != _plain(new.get(k)))
        return '; '.join(f'{_SIGNATURE_NAMES[key]}.{k} {old.get(k)!r} -> '
                         f'{new.get(k)!r}' for k in keys)
    return f'{_SIGNATURE_NAMES[key]} {old!r} -> {new!r}'


def check_resumed_schedule(path: str, meta: Optional[dict], saved_schedulers,
                           iters_per_epoch: int, schedulers, allowed: bool,
                           notes: List[Tuple[int, str]]) -> None:
    """The checks that need the built run (``load_or_resume``): the
    iterations per epoch (a folder that grew, another ``indices``: the
    restored cosine would end early), and, for a checkpoint without a run
    signature, its schedulers' saved ends against this run's.

    Raises:
        HPMError: The differences, and the fix.
    """
    then = (meta or {}).get('hpm_run')
    changed = []
    if then is not None:
        old = then.get('iters_per_epoch')
        if old is not None and old != iters_per_epoch:
            changed.append(_change('iters_per_epoch', old, iters_per_epoch))
    elif saved_schedulers:
        for i, (s,
                state) in enumerate(zip(schedulers or [], saved_schedulers)):
            for key in ('end', 'T_max'):
                mine, saved = getattr(s, key, None), (state or {}).get(key)
                if mine is not None and saved is not None and mine != saved:
                    changed.append(f'param_scheduler.{i} ({type(s).__name__})'
                                   f' {key} {saved} -> {mine} iterations')
    refuse_changes(path, changed, allowed, notes)


def refit_schedulers(fresh, iters: int, iters_per_epoch: int) -> None:
    """``resume_changed_run=True``: the resumed parameter schedulers follow
    this run's schedule (its ends and lengths as configured), at the point
    the checkpoint reached. mmengine's resume brings the checkpoint's
    schedule back (a run made longer would spend its added epochs at the
    minimum lr); the chained schedulers compute each value from the last
    one, so their shapes are put back and their ``iters`` steps replayed
    from the configured start, as the runner's ``ParamSchedulerHook`` steps
    them (per iteration, and at each epoch's end those by epoch).

    Args:
        fresh (list): ``(scheduler, its state as built for this run)``
            pairs, taken before the checkpoint was loaded into them.
        iters (int): The iterations trained (the resumed ``runner.iter``).
        iters_per_epoch (int): This run's.
    """
    for scheduler, state in fresh:  # this run's values at its start (the
        name = scheduler.param_name  # optimizer state brought the old ones)
        for group, value in zip(scheduler.optimizer.param_groups,
                                state['base_values']):
            group[f'initial_{name}'] = group[name] = value
    import warnings
    with warnings.catch_warnings():  # (steps before this process's first
        warnings.simplefilter('ignore', UserWarning)  # optimizer step)
        for scheduler, state in fresh:  # as built: its first step again
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


def refuse_changes(path: str, changed: List[str], allowed: bool,
                   notes: List[Tuple[int, str]]) -> None:
    """Refuse (or, with ``resume_changed_run``, note) a resume of a run
    that changed."""
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
        'resuming keeps the checkpoint\'s iteration schedule and optimizer '
        'state, so the run would not be the one configured. Fix: resume '
        'with the config, data and number of processes it was trained with '
        '(its config copy is in the work dir), or start a new work dir '
        'with --cfg-options load_from=CKPT, or pass --cfg-options '
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


def check_load_from(model, path: str) -> None:
    """Refuse a ``load_from`` checkpoint that fills less than half of
    ``model``'s weights (by name and shape): a checkpoint of another
    architecture, which mmengine would load with a warning and then train
    from scratch. (A pretraining checkpoint fine-tuned through load_from
    fills the whole encoder; only a small head stays new.)"""
    share = share_of_model(model, checkpoint_state(model, path))
    if share < 0.5:
        raise HPMError(
            f'load_from={path} fills {100 * share:.1f}% of this model\'s '
            'weights (by name and shape): it is a checkpoint of another '
            'architecture, and training would start almost from '
            'scratch. Fix: a checkpoint of this architecture, or '
            'convert it (tools/model_converters/hpm2backbone.py) and '
            'load it through the backbone\'s init_cfg.')


def check_resume_fits(model, path: str, ckpt: Optional[dict] = None) -> None:
    """Refuse to resume a checkpoint that does not fill ``model`` (the
    architecture changed since it was written), in one line, before
    mmengine fails on unrelated tensor errors."""
    problem = checkpoint_mismatch(model, checkpoint_state(model, ckpt or path),
                                  f'--resume {path}')
    if problem:
        raise HPMError(
            f'{problem}: the config changed since the checkpoint was '
            'written. Fix: resume with the config it was trained with '
            '(its copy is in the work dir), or start a new work dir, '
            'with --cfg-options load_from=CKPT to start from its '
            'weights.')
