"""The one checkpoint loader: the file's bytes checked, then
``torch.load(weights_only=True)`` with an allow-list of the types mmengine
writes; and the one writer of a whole file (:func:`save_file`).
:func:`hpm_mm.compat.register_checkpoint_loader` routes mmengine's loads
(resume, ``load_from``, ``init_cfg`` Pretrained) through :func:`load_file`,
URLs through :mod:`hpm_mm.engine.download` (which downloads, then calls
it); docs/reliability.md says why and what it costs.
"""
import functools
import os
import os.path as osp
import pickle
import pickletools
import zipfile
from typing import Optional

import torch
from mmengine.utils import digit_version

# the strict-load rule lives below every layer that loads (a feature
# target's weights too); re-exported here, the loader's room
from hpm_mm.errors import CheckpointError, HPMError, check_fills  # noqa: F401

#: the first torch with ``torch.serialization.add_safe_globals``
TORCH_FLOOR = '2.4'
#: the first pickle of torch's legacy (pre-zip) format, after its protocol
#: (and a protocol 4's frame): its magic number
LEGACY_MAGIC = b'\x8a\nl\xfc\x9cF\xf9 j\xa8P\x19.'
# NumPy's pickle helpers are named by the module of the NumPy that wrote
# them: ``numpy.core.multiarray`` (1.x) or ``numpy._core.multiarray`` (2.x)
_MULTIARRAY_NAMES = ('numpy.core.multiarray', 'numpy._core.multiarray')
#: the fix for a damaged checkpoint
COMPLETE = 'a complete one (an earlier checkpoint, or copy the file again)'
#: the addresses mmengine hands to hpm_mm's loaders of hpm_mm.engine.download
URL_SCHEMES = ('http://', 'https://', 'open-mmlab://', 'openmmlab://',
               'torchvision://', 'mmcls://')


class UnsafeCheckpointError(CheckpointError, pickle.UnpicklingError):
    """A checkpoint that holds objects outside the allow-list."""


class CheckpointNotFoundError(CheckpointError, FileNotFoundError):
    """No checkpoint file at that path, nothing or a folder (a
    FileNotFoundError, as mmengine's loader raised)."""


def torch_below(version: str) -> bool:
    """Whether the running torch is older than ``version`` ('2.4')."""
    return digit_version(torch.__version__) < digit_version(version)


def refuse_old_torch_pretraining(model) -> None:
    """Pretraining on a torch without the allow-list (< 2.4) would write
    checkpoints it cannot resume safely: refused at the start, in one line
    (the transfer side runs there)."""
    from mmpretrain.models.selfsup import BaseSelfSupervisor
    from mmpretrain.registry import MODELS
    if not torch_below(TORCH_FLOOR) or not isinstance(model, dict):
        return
    cls = MODELS.get(model.get('type', ''))
    if isinstance(cls, type) and issubclass(cls, BaseSelfSupervisor):
        raise HPMError(f'pretraining ({model["type"]}) needs torch >= '
                       f'{TORCH_FLOOR}, not {torch.__version__}. Fix: a newer '
                       'torch (docs/install.md).')


def checkpoint_safe_globals() -> list:
    """The types mmengine's runner writes into a checkpoint: its
    ``HistoryBuffer`` and ``ConfigDict``, NumPy arrays, scalars and dtypes
    (and ``_codecs.encode``, protocol 2's bytes, which torch < 2.5 lacks);
    ``argparse.Namespace``, a plain attribute container, for the ``args``
    of the authors' and MAE's released checkpoints."""
    import argparse
    import codecs

    import numpy as np
    from mmengine.config import ConfigDict
    from mmengine.logging import HistoryBuffer
    try:  # numpy >= 2 (numpy.core is a deprecated alias there)
        from numpy._core import multiarray
    except ImportError:
        multiarray = np.core.multiarray
    found = [
        HistoryBuffer, ConfigDict, np.ndarray, np.dtype, argparse.Namespace
    ]
    helpers = (multiarray._reconstruct, multiarray.scalar)
    if not torch_below('2.6'):  # (object, name) pairs:
        found += [(fn, f'{module}.{fn.__name__}') for fn in helpers
                  for module in _MULTIARRAY_NAMES]  # either NumPy's files
    else:
        found += list(helpers)
    if torch_below('2.5'):
        found.append(codecs.encode)
    dtypes = getattr(np, 'dtypes', None)  # Float64DType, ... (>= 1.25)
    return found + [
        getattr(dtypes, n) for n in dir(dtypes) if n.endswith('DType')
    ]  # (dir(None) holds none)


def checkpoint_problem(path: str) -> Optional[str]:
    """Why ``path`` is not a complete, undamaged checkpoint, or None: the
    zip archive torch writes has a central directory (a cut file has none)
    and a CRC per member (a flipped bit fails it). Nothing is unpickled;
    torch's legacy format, which has no checksums, passes when its pickles
    are whole. Each file is read once (:func:`_problem`)."""
    if not osp.isfile(path):
        return 'no such file' if not osp.isdir(path) else 'a folder'
    st = os.stat(path)
    return _problem(
        osp.realpath(path), st.st_ino, st.st_size, st.st_mtime_ns,
        st.st_ctime_ns)


@functools.cache
def _problem(path: str, inode: int, size: int, *times) -> Optional[str]:
    """:func:`checkpoint_problem` of one version of a file: an overwrite or a
    rename over it changes the ctime or the inode, which no ``os.utime``
    restores."""
    if size == 0:
        return 'empty file'
    try:
        with zipfile.ZipFile(path) as zf:
            bad = zf.testzip()
        return None if bad is None else \
            f'damaged member {bad} (its CRC does not match)'
    except Exception as e:  # BadZipFile, OSError, a garbled name's
        legacy = _legacy_pickles(path)  # UnicodeDecodeError, ...
        if legacy:
            return None if legacy[1] else \
                'cut short or damaged (its pickles end early)'
        return ('truncated, damaged or not a torch checkpoint '
                f'({type(e).__name__}: {str(e)[:80]})')


def _legacy_pickles(path: str) -> Optional[tuple]:
    """(its pickles, whether all five end) of a file in torch's legacy
    (pre-zip) format, in sequence: magic number, protocol, system info,
    the object, its storage keys (the storages' bytes after them unread);
    None for another file. Nothing is unpickled."""
    with open(path, 'rb') as f:
        head = f.read(24)
        if head[:1] != b'\x80' or LEGACY_MAGIC not in head:
            return None
        f.seek(0)
        whole = True
        try:
            for _ in range(5):
                list(pickletools.genops(f))  # up to its STOP
        except Exception:  # cut short: the pickles up to the cut
            whole = False
        end = f.tell()
        f.seek(0)
        return f.read(end), whole


def _pickle_of(path: str) -> bytes:
    """Every pickle of a checkpoint, one after the other: a zip's ``.pkl``
    members (the tensors unread) or the legacy format's
    (:func:`_legacy_pickles`); b'' for another file."""
    try:
        with zipfile.ZipFile(path) as zf:
            return b''.join(
                zf.read(n) for n in zf.namelist() if n.endswith('.pkl'))
    except Exception:
        legacy = osp.isfile(path) and _legacy_pickles(path)
        return legacy[0] if legacy else b''


def disallowed_globals(path: str) -> list:
    """Every global the checkpoint's pickles name outside the allow-list
    (torch's own and :func:`checkpoint_safe_globals`), in order, found by
    reading their opcodes: nothing is unpickled."""
    import io

    from _compat_pickle import IMPORT_MAPPING, NAME_MAPPING
    from torch import _weights_only_unpickler as wou
    allowed = set(wou._get_allowed_globals())
    for g in list(torch.serialization.get_safe_globals()) + \
            checkpoint_safe_globals():
        allowed.add(g[1] if isinstance(g, tuple) else
                    f'{g.__module__}.{g.__qualname__}')
    found, data = [], _pickle_of(path)
    pickles = io.BytesIO(data)
    try:
        while pickles.tell() < len(data):  # one pickle after the other
            pushed, memo = [], {}
            for op, arg, _ in pickletools.genops(pickles):
                name = op.name
                if name in ('GLOBAL', 'INST'):  # (Python 2 names mapped)
                    module, _, attr = arg.partition(' ')
                    module, attr = NAME_MAPPING.get(
                        (module, attr),
                        (IMPORT_MAPPING.get(module, module), attr))
                    found.append(f'{module}.{attr}')
                elif name == 'STACK_GLOBAL' and len(pushed) >= 2:
                    found.append(f'{pushed[-2]}.{pushed[-1]}')
                elif name.startswith('EXT'):  # copyreg's registered globals
                    found.append(f'copyreg extension {arg}')
                if 'UNICODE' in name or name.endswith('STRING'):
                    pushed.append(arg)
                elif name.endswith('GET'):
                    pushed.append(memo.get(arg))
                elif name == 'MEMOIZE' and pushed:
                    memo[len(memo)] = pushed[-1]
                elif name.endswith('PUT') and pushed:
                    memo[arg] = pushed[-1]
                elif name != 'FRAME':
                    pushed.append(None)
    except Exception:  # a garbled pickle: what was found so far
        pass
    return list(dict.fromkeys(g for g in found if g not in allowed))


#: the one global a plain ``torch.save`` of mmengine's HistoryBuffers adds
HISTORY_GETATTR = 'builtins.getattr'


def _refusal(path: str, error: Exception) -> UnsafeCheckpointError:
    import re

    # no global named (an opcode torch's unpickler refuses): torch's reason
    said = re.findall(r'(?:Unsupported|Trying to load) [^\n]*', str(error))
    bad = disallowed_globals(path) or said[:1] or ['what torch refuses']
    what = ', '.join(bad)
    if torch_below(TORCH_FLOOR):
        return UnsafeCheckpointError(
            f'{path} holds objects beyond tensors ({what}): refused on torch '
            f'{torch.__version__}. Fix: load it with torch >= {TORCH_FLOOR}.')
    if bad == [HISTORY_GETATTR] and b'HistoryBuffer' in _pickle_of(path):
        return UnsafeCheckpointError(
            f'{path}: HistoryBuffers pickled with {HISTORY_GETATTR} (saved by '
            'a process without hpm_mm imported): refused. Fix: if you trust '
            'it, re-save it: python tools/misc/resave_checkpoint.py PATH')
    return UnsafeCheckpointError(
        f'{path} holds objects outside the checkpoint allow-list ({what}): '
        'refused. Fix: a checkpoint from a source you trust.')


def resave_checkpoint(path: str) -> bool:
    """Re-save, in place, a checkpoint whose only global outside the
    allow-list is :data:`HISTORY_GETATTR` (mmengine's HistoryBuffers saved
    by plain torch): loaded weights-only with exactly that one added, saved
    with hpm_mm's HistoryBuffer pickling (and torch's zip format). False
    for a file that loads as it is. Anything else (an address, no file, a
    damaged one, another global) is the loader's one line, nothing
    written."""
    if path.startswith(URL_SCHEMES):
        raise CheckpointError(f'{path}: an address, not re-saved (nothing '
                              'downloaded). Fix: download it, pass the file.')
    if disallowed_globals(path) != [HISTORY_GETATTR]:
        load_file(path)  # (the loader's refusal, or it loads as it is)
        return False
    with torch.serialization.safe_globals([getattr]):
        ckpt = load_file(path)
    save_file(ckpt, path)
    return True


def save_file(obj, path: str) -> None:
    """``torch.save(obj, path)`` whole or not at all
    (:func:`hpm_mm.engine.work_dir.write_outputs`: a stop, Ctrl-C or
    SIGTERM, leaves the file that was there and no part of it)."""
    from .work_dir import write_outputs
    write_outputs({path: lambda part: torch.save(obj, part)})


def load_file(path: str, map_location='cpu'):
    """Load a checkpoint safely (a URL is downloaded first): its
    bytes checked (:func:`checkpoint_problem`), then weights-only with the
    allow-list; ``TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD`` does not switch this off
    (a warning says so). torch < :data:`TORCH_FLOOR` loads tensors-only files.
    Raises :class:`CheckpointError` (damaged) or
    :class:`UnsafeCheckpointError`, one line naming the file."""
    path = osp.expanduser(os.fspath(path))
    if path.startswith(URL_SCHEMES):  # hpm_mm's URL loaders, by mmengine
        from mmengine.runner.checkpoint import CheckpointLoader
        return CheckpointLoader.load_checkpoint(path, map_location)
    _check(path)
    if os.environ.get('TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD', '') not in ('0', ''):
        import warnings  # (shown once: Python's default filter)
        warnings.warn('TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD is set; hpm_mm '
                      'loads checkpoints weights-only all the same')
    try:
        return torch.load(path, map_location=map_location, weights_only=True)
    except (pickle.UnpicklingError, RuntimeError) as e:
        if not isinstance(e, RuntimeError) or 'Weights only load' in str(e):
            raise _refusal(path, e) from None
        if not _legacy_pickles(path):
            raise
        raise CheckpointError(  # its storages cut short: no checksums
            f'cannot load the checkpoint {path}: cut short or damaged '
            f'({str(e).splitlines()[0]}). Fix: {COMPLETE}.') from None


def _check(path: str) -> None:
    """Refuse, in one line, a path that is no complete checkpoint file
    (:func:`checkpoint_problem`); nothing or a folder is a
    :class:`CheckpointNotFoundError`, as mmengine's loader raised."""
    problem = checkpoint_problem(path)
    missing = problem in ('no such file', 'a folder')
    error, fix = (CheckpointNotFoundError, 'the path of a checkpoint file') \
        if missing else (CheckpointError, COMPLETE)
    if problem and not missing and path.endswith('.py'):  # a config
        problem = 'it is a config file (.py), not a checkpoint'
        fix = 'the .pth a run wrote (e.g. WORK_DIR/epoch_N.pth)'
    if problem:
        raise error(f'cannot load the checkpoint {path}: {problem}. Fix: '
                    f'{fix}.')


#: mmengine's local checkpoint loader (its name): the one loader
load_from_local = load_file


def check_finite(state_dict: dict, name: str = 'the checkpoint') -> None:
    """Refuse, in one line naming them, tensors of ``state_dict`` holding
    NaN/inf: a diverged checkpoint evaluates to chance, not to an error."""
    bad = [
        k for k, v in state_dict.items() if torch.is_tensor(v)
        and v.is_floating_point() and not bool(torch.isfinite(v).all())
    ]
    if bad:
        raise HPMError(
            f'{name} holds non-finite values (NaN/inf) in {len(bad)} '
            f'tensors, e.g. {", ".join(bad[:3])}. Fix: an earlier one.')
