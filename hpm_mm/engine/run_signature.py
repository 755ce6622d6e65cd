"""A run's signature: what defines the run a checkpoint continues (every
checkpoint records it in ``meta['hpm_run']``), and the one-line refusal of
a resume whose run changed since (:func:`changed_run`), which the resume
room (at the start) and the resume hook (the iterations per epoch, once the
loader is built) share."""
import os
from typing import List, Optional

from hpm_mm.errors import HPMError

#: the dataset keys that say which data a run reads
DATA_KEYS = ('type', 'data_root', 'ann_file', 'data_prefix', 'split',
             'indices', 'subset')
#: how each part of the signature reads in a refusal
_NAMES = dict(
    data='train_dataloader.dataset',
    mask_generator='model.mask_generator',
    optimizer='optim_wrapper.optimizer (other than lr)',
    max_epochs='train_cfg.max_epochs',
    max_iters='train_cfg.max_iters',
    batch_size='train_dataloader.batch_size',
    world_size='processes (WORLD_SIZE)',
    lr='optim_wrapper.optimizer.lr')


def _plain(value):
    """``value`` with tuples as lists and configs as dicts, for comparing
    (as a checkpoint's meta keeps it)."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items() if k != '_scope_'}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def run_signature(kw: dict) -> dict:
    """The signature of the run the runner's arguments ``kw`` define: its
    length, batch, processes, lr and schedulers (the iteration schedule),
    data, mask generator, other optimizer hyper-parameters."""

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


def signature_changes(then: Optional[dict], now: dict) -> List[str]:
    """How the signature ``now`` differs from ``then`` (a checkpoint's; None:
    unsigned), each difference as a refusal names it (a dict by its changed
    keys)."""
    changes = []
    for key, new in now.items():
        old = (then or {}).get(key, new)
        if _plain(old) == _plain(new):
            continue
        if isinstance(old, dict) and isinstance(new, dict):
            changes.append('; '.join(
                f'{_NAMES[key]}.{k} {old.get(k)!r} -> {new.get(k)!r}'
                for k in sorted(set(old) | set(new))
                if _plain(old.get(k)) != _plain(new.get(k))))
        else:
            changes.append(
                'param_scheduler (its types, ends or values)' if key ==
                'param_scheduler' else f'{_NAMES[key]} {old!r} -> {new!r}')
    return changes


def changed_run(path: str, changed: List[str], allowed: bool) -> Optional[str]:
    """Refuse, in one line, a resume of ``path`` whose run changed
    (``changed``: how), unless ``allowed`` (``resume_changed_run=True``):
    then the warning that says so; None where nothing changed."""
    what = '; '.join(changed)
    if changed and not allowed:
        raise HPMError(
            f'--resume {path}: the run changed since it was written ({what})'
            ". Fix: the work dir's config copy, or resume_changed_run=True.")
    return changed and (f'resume: the run changed since {path} ({what}); '
                        'continuing as the new config') or None
