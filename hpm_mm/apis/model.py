"""A model from a config, with a trained checkpoint loaded strictly."""
from typing import Optional, Sequence, Union

import torch
from mmengine.config import Config
from mmengine.logging import print_log

from hpm_mm.engine.checkpoint_migrations import checkpoint_state
from hpm_mm.engine.safe_load import check_fills, check_finite
from .config import load_config


def load_model(config: Union[str, Config],
               checkpoint: Optional[str] = None,
               teacher: bool = False,
               whole: bool = False,
               required: Union[None, str, Sequence[str]] = None,
               device: Optional[str] = None):
    """The model of ``config`` (:func:`mmpretrain.apis.get_model`, in eval
    mode), with ``checkpoint`` loaded by :func:`load_checkpoint_strict`
    (``teacher``: the EMA teacher's weights into the student; ``whole``: both
    in place; ``required``: the key prefixes the caller reads, by default
    all).

    Raises:
        HPMError: The checkpoint is unsafe, damaged, holds NaN/inf or does
        not fit the model."""
    from mmpretrain.apis import get_model

    model = get_model(load_config(config), device=device)
    if checkpoint is not None:
        load_checkpoint_strict(model, checkpoint, teacher, required, whole)
    return model


def file_names(model: torch.nn.Module, names, teacher: bool = False) -> dict:
    """Each of ``names`` (``model``'s tensors, or key prefixes) -> its name
    in a checkpoint: as it is, or (``teacher``) the EMA teacher's for each
    part of ``model.student()`` (``teacher.module.<part>.``; HPM's
    ``neck`` is its ``scorer``; the student's for the others)."""
    if not teacher:
        return {k: k for k in names}
    ids = {id(m): n for n, m in model.named_modules()}
    part = {
        ids[id(m)]: p
        for p, m in getattr(model, 'student', dict)().items() if id(m) in ids
    }
    out = {}
    for k in names:
        head, _, rest = k.partition('.')
        out[k] = f'teacher.module.{part.get(head, head)}.{rest}' \
            if head in part or not part else k
    return out


def load_checkpoint_strict(
        model: torch.nn.Module,
        filename: str,
        teacher: bool = False,
        required_prefix=None,
        whole: bool = False,
        name: Optional[str] = None,
        fix: str = 'a checkpoint this config trained') -> dict:
    """Load a checkpoint into ``model``: in the parts a caller reads (the
    key prefixes ``required_prefix``; by default all), every tensor it
    expects with its shape and none it lacks
    (:func:`~hpm_mm.engine.safe_load.check_fills`), else refused in one
    line naming them by the file's names and ``fix``; the other parts
    loaded where they fit. NaN/inf is refused. ``teacher=True`` loads the
    EMA teacher's weights into the student's parts; ``whole=True`` loads
    both in place. Returns the model's keys not loaded (``missing``) and
    the file's not read (``unexpected``) (``filename`` may be a loaded
    checkpoint, ``name`` its file)."""
    state = checkpoint_state(model, filename)
    filename = name or filename
    own, ema = model.state_dict(), teacher and not whole
    names = file_names(model, [k for k in own if whole or k[:8] != 'teacher.'],
                       ema)
    prefixes = required_prefix or ''
    prefixes = (prefixes, ) if isinstance(prefixes, str) else tuple(prefixes)
    where = tuple(file_names(model, prefixes, ema).values()) \
        if required_prefix else ('', )  # the read parts, in the file
    side = '' if whole else 'teacher.module.' if teacher else 'teacher.'
    used = set(names.values())
    unexpected = [
        f for f in state
        if f not in used and f.startswith(side) == (whole or bool(teacher))
    ]
    reads = {f: own[k] for k, f in names.items() if k.startswith(prefixes)}
    check_fills(reads, {f: state[f] for f in [*used, *unexpected]
                        if f in state and f.startswith(where)},
                filename, fix + (', or the student (no --teacher)' if ema
                                 else ''), exact=True)  # yapf: disable
    loaded = {
        k: state[f]
        for k, f in names.items()
        if getattr(state.get(f), 'shape', None) == own[k].shape
    }
    check_finite(loaded, filename)
    model.load_state_dict(loaded, strict=False)
    missing = [k for k in names if k not in loaded]
    which = 'whole' if whole else 'teacher' if teacher else 'student'
    print_log(
        f'[checkpoint] {filename} ({which}): {len(loaded)} tensors loaded; '
        f'not loaded: {len(missing)} {missing[:3]}; the file\'s not read: '
        f'{len(unexpected)} {unexpected[:3]}',
        logger='current')
    return dict(missing=missing, unexpected=unexpected)
