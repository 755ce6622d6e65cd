"""Make mmengine checkpoints loadable under ``torch.load(weights_only=True)``.

torch >= 2.6 loads with ``weights_only=True`` by default, and mmengine 0.10.7
calls ``torch.load`` without the argument, so resuming fails on the objects
mmengine itself pickles into a checkpoint (``HistoryBuffer`` in the message
hub, NumPy arrays and scalars in its buffers). Rather than switching the
safety off for every file, hpm_mm (registered by
:func:`hpm_mm.compat.register_checkpoint_safe_globals`)

1. allow-lists exactly those types with
   ``torch.serialization.add_safe_globals``; anything else in a checkpoint is
   still refused by torch;
2. stops ``HistoryBuffer`` from pickling its four built-in statistics methods
   (:func:`hpm_mm.compat.picklable_history_buffer`: they would need the
   builtin ``getattr`` allow-listed, which reaches far more than a checkpoint
   needs; mmengine restores those four on load anyway; custom registered
   methods are still pickled).

Checkpoints written by mmengine without hpm_mm imported still contain
``getattr`` and are refused by ``weights_only`` loading; re-save them after
loading with ``weights_only=False`` if (and only if) you trust their source.
"""
import os
import os.path as osp
import re
from typing import List, Optional, Tuple

import torch
from mmengine.logging import print_log

from hpm_mm.errors import HPMError


def _version_tuple(version: str) -> tuple:
    """``'2.11.0+cu130'`` -> ``(2, 11)``."""
    return tuple(int(p) for p in re.findall(r'\d+', version)[:2])


# NumPy's pickle helpers are named in a checkpoint by the module of the
# NumPy that wrote it: ``numpy.core.multiarray`` (1.x) or
# ``numpy._core.multiarray`` (2.x)
_MULTIARRAY_NAMES = ('numpy.core.multiarray', 'numpy._core.multiarray')


def _numpy_globals() -> list:
    import numpy as np
    try:  # numpy >= 2 (numpy.core is a deprecated alias there)
        from numpy._core import multiarray
    except ImportError:
        multiarray = np.core.multiarray
    found = [np.ndarray, np.dtype]
    helpers = (multiarray._reconstruct, multiarray.scalar)
    if _version_tuple(torch.__version__) >= (2, 6):
        # under both names: a checkpoint written with NumPy 1 resumes
        # under NumPy 2 (e.g. a GPU image's) and the other way round
        found += [(fn, f'{module}.{fn.__name__}') for fn in helpers
                  for module in _MULTIARRAY_NAMES]
    else:  # (object, name) pairs came with torch 2.6
        found += list(helpers)
    # dtype classes, e.g. numpy.dtypes.Float64DType (numpy >= 1.25)
    dtypes = getattr(np, 'dtypes', None)
    if dtypes is not None:
        found += [
            getattr(dtypes, n) for n in dir(dtypes) if n.endswith('DType')
        ]
    return found


def checkpoint_safe_globals() -> list:
    """The types mmengine's runner writes into a checkpoint."""
    from mmengine.config import ConfigDict
    from mmengine.logging import HistoryBuffer
    return [HistoryBuffer, ConfigDict] + _numpy_globals()


#: the first torch with ``torch.serialization.add_safe_globals``, which the
#: one loader needs (setup.py and requirements/constraints.txt state it)
TORCH_FLOOR = (2, 4)


class UnsafeCheckpointError(HPMError):
    """A checkpoint that holds objects outside the allow-list."""


def load_file(path: str, map_location='cpu'):
    """The one checkpoint loader of hpm_mm: ``torch.load`` with
    ``weights_only=True`` passed explicitly, whatever torch's default
    (torch < 2.6, ``TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1``): only tensors,
    containers and the types of :func:`checkpoint_safe_globals` are
    unpickled; a file that holds anything else (code) is refused. An
    http(s) ``path`` is downloaded first (:func:`download_checkpoint`).

    Raises:
        UnsafeCheckpointError: The file holds other objects.
        RuntimeError: torch is older than :data:`TORCH_FLOOR`.
    """
    if _version_tuple(torch.__version__) < TORCH_FLOOR:
        raise RuntimeError(
            f'hpm_mm loads checkpoints with weights_only=True and an '
            f'allow-list, which needs torch >= {TORCH_FLOOR[0]}.'
            f'{TORCH_FLOOR[1]}; this is torch {torch.__version__}. Fix: '
            'bash tools/install.sh (or HPM_TORCH="torch==2.x ...").')
    if isinstance(path, str) and path.startswith(('http://', 'https://')):
        path = download_checkpoint(path)
    try:
        return torch.load(path, map_location=map_location, weights_only=True)
    except Exception as e:
        # a damaged file first: its bytes, not its objects, are the problem
        # (torch's legacy format, not a zip archive, is not damaged)
        problem = download_problem(path) if isinstance(path, str) else None
        if problem:  # cut short, byte-flipped, not a checkpoint at all
            raise HPMError(
                f'cannot load the checkpoint {path}: {problem}. Fix: give a '
                'complete one (an earlier checkpoint of the run, or copy '
                'the file again).') from None
        if type(e).__name__ == 'UnpicklingError' or \
                'Weights only load failed' in str(e):
            found = re.search(r'GLOBAL ([\w.]+)', str(e))
            what = f' ({found.group(1)})' if found else ''
            raise UnsafeCheckpointError(
                f'{path} holds objects outside the checkpoint allow-list'
                f'{what}, which could run code when loaded: refused. A '
                'checkpoint written by mmengine and hpm_mm holds none. If '
                'you trust its source, re-save its tensors with torch.load('
                'path, weights_only=False) yourself.') from None
        raise


def load_from_local(filename: str, map_location=None):
    """mmengine's local checkpoint loader, through :func:`load_file`."""
    filename = osp.expanduser(filename)
    if not osp.isfile(filename):
        raise FileNotFoundError(f'{filename} can not be found.')
    return load_file(filename, map_location)


#: the first bytes of torch's legacy (pre-zip) checkpoint format
LEGACY_MAGIC = b'\x80\x02\x8a\nl\xfc\x9cF\xf9 j\xa8P\x19.'


def download_problem(path: str) -> Optional[str]:
    """Why a downloaded file is not a checkpoint (an error page, a cut
    download), or None: a complete zip archive, or torch's legacy format."""
    problem = checkpoint_problem(path)
    if problem is None:
        return None
    with open(path, 'rb') as f:
        if f.read(len(LEGACY_MAGIC)) == LEGACY_MAGIC:
            return None
    return problem


def download_checkpoint(url: str, model_dir: Optional[str] = None) -> str:
    """The local copy of the checkpoint at ``url``: downloaded once into
    ``model_dir`` (default: torch hub's ``checkpoints/`` folder, where
    mmengine and torch keep theirs), by local rank 0 first under
    distributed training; nothing is unpickled here.

    The copy is named by the whole address (a hash of the URL, then the
    file name): ``.../runA/epoch_3.pth`` and ``.../runB/epoch_3.pth`` are
    two copies. A download that is no checkpoint (an error page, a cut
    transfer) is removed and named; a bad copy left by an earlier run is
    fetched again.

    Raises:
        HPMError: The download failed or is not a checkpoint (one line:
            the URL, the file and why).
    """
    import hashlib
    from urllib.parse import urlparse

    from mmengine.dist import get_dist_info
    model_dir = model_dir or osp.join(torch.hub.get_dir(), 'checkpoints')
    name = osp.basename(urlparse(url).path) or 'checkpoint.pth'
    key = hashlib.sha256(url.encode()).hexdigest()[:16]
    path = osp.join(model_dir, f'{key}-{name}')

    def fetch():
        if osp.isfile(path):
            if download_problem(path) is None:
                return
            os.remove(path)  # a bad copy: fetched again
        os.makedirs(model_dir, exist_ok=True)
        part = f'{path}.{os.getpid()}.part'
        try:
            torch.hub.download_url_to_file(url, part, progress=False)
        except Exception as e:
            if osp.exists(part):
                os.remove(part)
            raise HPMError(
                f'cannot download the checkpoint {url} ({type(e).__name__}: '
                f'{e}). Fix: check the address and the network, or download '
                'it yourself and pass its path.') from None
        problem = download_problem(part)
        if problem is not None:
            os.remove(part)
            raise HPMError(
                f'the download of {url} is not a checkpoint ({problem}); the '
                f'file ({path}) was removed. Fix: check the address (an '
                'error page or a moved file gives this), or download it '
                'yourself and pass its path.')
        os.replace(part, path)

    rank, world_size = get_dist_info()
    if rank == 0:
        fetch()
    if world_size > 1:
        torch.distributed.barrier()
        fetch()
    return path


def load_from_url(filename: str, map_location=None, model_dir=None, **_):
    """mmengine's http(s) checkpoint loader (``load_from=URL``, a backbone's
    ``init_cfg`` Pretrained, ``torchvision://``, ``open-mmlab://``,
    ``mmcls://``), through :func:`load_file`: mmengine's passes
    ``weights_only=False``, which runs whatever the file holds."""
    return load_file(download_checkpoint(filename, model_dir), map_location)


def load_from_openmmlab(filename: str, map_location=None):
    """mmengine's ``open-mmlab://`` / ``openmmlab://`` loader (a model-zoo
    name: a URL, or a file under mmengine's home), through
    :func:`load_file`."""
    from mmengine.runner.checkpoint import (_get_mmengine_home,
                                            get_deprecated_model_names,
                                            get_external_models)
    name = filename.split('://', 1)[1]
    name = get_deprecated_model_names().get(name, name)
    url = get_external_models()[name]
    if url.startswith(('http://', 'https://')):
        return load_from_url(url, map_location)
    return load_from_local(osp.join(_get_mmengine_home(), url), map_location)


def refuse_scheme(filename: str, map_location=None, **_):
    """The loader of a scheme hpm_mm cannot load safely (``pavi://``,
    ``s3://``): refused in one line instead of ``torch.load`` without
    ``weights_only``."""
    scheme = filename.split('://', 1)[0]
    raise HPMError(
        f'{filename}: hpm_mm does not load {scheme}:// checkpoints (its safe '
        'loader reads local files and http(s) addresses). Fix: copy the file '
        'to this machine and pass its path.')


def student_or_teacher_state(state_dict: dict,
                             teacher: bool = False,
                             model: Optional[torch.nn.Module] = None) -> dict:
    """The student's keys, or the EMA teacher's renamed to the student's.

    An HPM checkpoint keeps the student under ``backbone.`` / ``neck.`` /
    ``head.`` and the teacher's copy of the student's parts under
    ``teacher.module.<part>.``, the parts of ``model.student()``
    (``backbone``, ``predictor``, ...). Each part's keys go back to where
    that part lives in ``model`` (HPM's ``predictor`` is its ``neck``); without
    a model, ``teacher.module.`` is stripped.
    """
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


def checkpoint_state(model: torch.nn.Module, filename) -> dict:
    """The state dict of ``filename`` (through :func:`load_file`; or of a
    checkpoint already loaded, a dict) in ``model``'s keys: its
    ``state_dict`` entry, keys of earlier hpm_mm versions mapped by the
    model's ``upgrade_state_dict`` when it has one."""
    from mmengine.runner.checkpoint import _load_checkpoint  # load_file
    ckpt = filename if isinstance(filename, dict) else _load_checkpoint(
        filename, map_location='cpu')
    state = ckpt.get('state_dict', ckpt)
    upgrade = getattr(model, 'upgrade_state_dict', None)
    return upgrade(state) if upgrade is not None else state


def load_checkpoint_strict(model: torch.nn.Module,
                           filename: str,
                           teacher: bool = False,
                           required_prefix='backbone.',
                           whole: bool = False) -> dict:
    """Load a checkpoint and report missing/unexpected keys.

    Every parameter of the model under ``required_prefix`` (a prefix or a
    tuple of them: the hard-patch pictures need the loss predictor too)
    must be loaded; otherwise one error lists the missing keys. Other
    mismatches are printed. A checkpoint holding NaN/inf is refused.

    ``teacher=True`` loads the EMA teacher's weights into the student's
    parts (kNN of the teacher); ``whole=True`` loads the model as it was
    saved, student and EMA teacher each in its place (the pictures read the
    trained teacher's scores; by default the teacher's keys are left out
    and a model's teacher keeps its initial weights).

    Returns:
        dict: ``missing`` and ``unexpected`` key lists.
    """
    state = checkpoint_state(model, filename)
    if not whole:
        state = student_or_teacher_state(state, teacher, model)
    problem = nonfinite_tensors(state, filename)
    if problem:
        raise HPMError(f'{problem}. Fix: evaluate an earlier checkpoint '
                       'of the run (its training diverged).')
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
            f'{filename}, e.g. {required[:3]}. Is it a checkpoint of this '
            'architecture?')
    return dict(missing=missing, unexpected=unexpected)


def nonfinite_tensors(state_dict: dict,
                      name: str = 'the checkpoint') -> Optional[str]:
    """One line naming the tensors of ``state_dict`` holding NaN/inf, or
    None: a diverged checkpoint evaluates to chance, not to an error."""
    bad = [
        k for k, v in state_dict.items() if torch.is_tensor(v)
        and v.is_floating_point() and not bool(torch.isfinite(v).all())
    ]
    if not bad:
        return None
    return (f'{name} holds non-finite values (NaN/inf) in {len(bad)} '
            f'tensors, e.g. {", ".join(bad[:3])}')


def share_of_model(model: torch.nn.Module, state_dict: dict) -> float:
    """The fraction of ``model``'s weights (elements of its floating-point
    tensors) that ``state_dict`` holds under the same name and shape
    (after the ``module.`` prefix of wrapped models is dropped, as
    mmengine's loader does)."""
    own = {
        k: v
        for k, v in model.state_dict().items() if v.is_floating_point()
    }
    total = sum(v.numel() for v in own.values())
    shared = 0
    for k, v in state_dict.items():
        k = k[len('module.'):] if k.startswith('module.') else k
        if k in own and torch.is_tensor(v) and \
                tuple(v.shape) == tuple(own[k].shape):
            shared += own[k].numel()
    return shared / max(total, 1)


def checkpoint_mismatch(model: torch.nn.Module,
                        state_dict: dict,
                        name: str = 'the checkpoint') -> Optional[str]:
    """One line saying how ``state_dict`` fails to fill ``model``, or None.

    Missing keys and shape mismatches make it fail; keys the model does not
    have (a pretraining checkpoint's teacher or decoder) are only counted.
    """
    own = model.state_dict()
    missing = [k for k in own if k not in state_dict]
    shapes = [
        k for k in own if k in state_dict
        and tuple(state_dict[k].shape) != tuple(own[k].shape)
    ]
    if not missing and not shapes:
        return None
    extra = sum(1 for k in state_dict if k not in own)
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
            f'; {extra} keys of the file are not in the model')


def checkpoint_problem(path: str) -> Optional[str]:
    """Why ``path`` is not a complete checkpoint, or None.

    torch saves zip archives: a file cut short by a kill has no central
    directory, and a damaged one fails the members' CRC check. Nothing is
    unpickled.
    """
    import zipfile
    if not osp.isfile(path):
        return 'no such file'
    if osp.getsize(path) == 0:
        return 'empty file'
    try:
        with zipfile.ZipFile(path) as zf:
            bad = zf.testzip()
    except (zipfile.BadZipFile, OSError) as e:
        return f'truncated or not a torch checkpoint ({e})'
    if bad is not None:
        return f'corrupt member {bad}'
    return None


def _checkpoint_step(name: str) -> Optional[int]:
    m = re.fullmatch(r'(?:epoch|iter)_(\d+)\.pth', name)
    return int(m.group(1)) if m else None


def find_resume_checkpoint(work_dir: str) -> Tuple[Optional[str], List[str]]:
    """The newest complete checkpoint of ``work_dir`` to resume from.

    The complete ``epoch_N.pth`` / ``iter_N.pth`` with the largest N, or
    the file ``last_checkpoint`` names when it is not of that pattern (a
    checkpoint saved after a failed write of ``last_checkpoint`` is not
    trained again). mmengine writes an absolute path into
    ``last_checkpoint``: in a copied or moved work dir it names the original
    folder's file, so a path outside ``work_dir`` is read as the file of
    that name here.

    Returns:
        tuple: (path or None, ['<path>: <why skipped>', ...]).
    """
    skipped, candidates = [], []
    pointer = osp.join(work_dir, 'last_checkpoint')
    if osp.isfile(pointer):
        with open(pointer) as f:
            named = osp.join(work_dir, f.read().strip())  # relative: here
        here = osp.realpath(work_dir)
        if osp.dirname(osp.realpath(named)) != here:
            named = osp.join(work_dir, osp.basename(named))
        if _checkpoint_step(osp.basename(named)) is None:
            candidates.append(named)
    if osp.isdir(work_dir):
        found = [(s, n) for n in os.listdir(work_dir)
                 if (s := _checkpoint_step(n)) is not None]
        candidates += [
            osp.join(work_dir, n) for _, n in sorted(found, reverse=True)
        ]
    seen = set()
    for path in candidates:
        if path in seen:
            continue
        seen.add(path)
        problem = checkpoint_problem(path)
        if problem is None:
            return path, skipped
        skipped.append(f'{path}: {problem}')
    return None, skipped
