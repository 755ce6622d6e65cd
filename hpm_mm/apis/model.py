"""A model from a config, with a trained checkpoint loaded strictly."""
from typing import Optional, Sequence, Union

import torch
from mmengine.config import Config
from mmengine.logging import print_log

from hpm_mm.engine.safe_load import check_finite, checkpoint_state
from .config import load_config


def load_model(config: Union[str, Config],
               checkpoint: Optional[str] = None,
               teacher: bool = False,
               whole: bool = False,
               required: Union[str, Sequence[str]] = 'backbone.',
               device: Optional[str] = None):
    """The model of ``config`` (:func:`mmpretrain.apis.get_model`, in eval
    mode), with ``checkpoint`` loaded by :func:`load_checkpoint_strict`
    (``teacher``: the EMA teacher's weights into the student; ``whole``: both
    in place; ``required``: key prefixes it must fill).

    Raises:
        HPMError: The checkpoint is unsafe, damaged or holds NaN/inf.
        KeyError: It does not fill the required weights."""
    from mmpretrain.apis import get_model

    cfg = load_config(config)
    model = get_model(cfg, device=device)
    if checkpoint is not None:
        load_checkpoint_strict(
            model,
            checkpoint,
            teacher=teacher,
            required_prefix=required
            if isinstance(required, str) else tuple(required),
            whole=whole)
    return model


def student_or_teacher_state(state_dict: dict,
                             teacher: bool = False,
                             model: Optional[torch.nn.Module] = None) -> dict:
    """The student's keys, or the EMA teacher's (``teacher.module.<part>.``)
    renamed to where each part of ``model.student()`` lives in ``model``
    (HPM's ``predictor`` is its ``neck``; without a model, stripped)."""
    prefix = 'teacher.module.'
    if not teacher:
        return {
            k: v
            for k, v in state_dict.items() if not k.startswith('teacher.')
        }
    where = {}
    if model is not None and hasattr(model, 'student'):
        names = {id(m): n for n, m in model.named_modules()}
        where = {
            part: names[id(m)]
            for part, m in model.student().items() if id(m) in names
        }
    out = {}
    for k, v in state_dict.items():
        if k.startswith(prefix):
            part, _, rest = k[len(prefix):].partition('.')
            out[f'{where.get(part, part)}.{rest}'] = v
    if not out:
        raise ValueError('--teacher was asked for, but the checkpoint has no '
                         f"'{prefix}*' keys (not an HPM checkpoint with an "
                         'EMA teacher). Evaluate the student instead.')
    return out


def load_checkpoint_strict(model: torch.nn.Module,
                           filename: str,
                           teacher: bool = False,
                           required_prefix='backbone.',
                           whole: bool = False,
                           name: Optional[str] = None) -> dict:
    """Load a checkpoint into ``model``: every weight under ``required_prefix``
    must be in it (else one error), other mismatches are printed, NaN/inf is
    refused. ``teacher=True`` loads the EMA teacher's weights into the
    student's parts; ``whole=True`` loads both in place. Returns the
    ``missing`` and ``unexpected`` keys (``filename`` may be a loaded
    checkpoint, ``name`` its file)."""
    state = checkpoint_state(model, filename)
    filename = name or filename
    if not whole:
        state = student_or_teacher_state(state, teacher, model)
    check_finite(state, filename)
    result = model.load_state_dict(state, strict=False)
    missing = [
        k for k in result.missing_keys if whole or not k.startswith('teacher.')
    ]
    unexpected = list(result.unexpected_keys)
    required = [k for k in missing if k.startswith(required_prefix)]
    loaded = sum(1 for k in model.state_dict()
                 if k.startswith(required_prefix) and k not in missing)
    prefixes = '/'.join(
        f'{p}*'
        for p in ((required_prefix,
                   ) if isinstance(required_prefix, str) else required_prefix))
    which = 'whole' if whole else 'teacher' if teacher else 'student'
    lines = [
        f'[checkpoint] {filename} ({which}): {loaded} {prefixes} tensors '
        f'loaded, {len(missing)} missing, {len(unexpected)} unexpected'
    ]
    lines += [f'  missing: {k}' for k in missing[:20]]
    lines += [f'  unexpected: {k}' for k in unexpected[:20]]
    print_log('\n'.join(lines), logger='current')
    if required:
        raise KeyError(
            f'{len(required)} {prefixes} keys of the model are not in '
            f'{filename}, e.g. {required[:3]}: another architecture?')
    return dict(missing=missing, unexpected=unexpected)
