"""Which OpenMMLab stack hpm_mm runs on, and what ``import hpm_mm`` changes
in it for the whole process (each change, why and until when:
docs/install.md, "what import hpm_mm changes").

Libraries are judged by the ``__version__`` their modules report, so
``mmcv-lite`` and forks that keep the import names pass. Pretraining needs
mmengine, mmcv (lite) and mmpretrain (checked on ``import hpm_mm``);
:mod:`hpm_mm.det` / :mod:`hpm_mm.seg` also need mmdet / mmseg and mmcv's
compiled ops (checked when imported)."""
import functools
import importlib
from importlib.metadata import packages_distributions
from typing import Optional, Sequence

from hpm_mm.errors import FULL_INSTALL, MissingCompiledOpsError

# import name -> (min inclusive, max exclusive)
SUPPORTED = {
    'mmengine': ('0.10.4', '1.0.0'),
    'mmcv': ('2.1.0', '2.2.0'),
    'mmpretrain': ('1.2.0', '1.3.0'),
    'mmdet': ('3.3.0', '3.4.0'),
    'mmseg': ('1.2.2', '1.3.0'),
}
PRETRAIN = ('mmengine', 'mmcv', 'mmpretrain')  # checked on ``import hpm_mm``


def distribution_of(module: str) -> str:
    """The distribution(s) that installed an import name, e.g.
    ``'mmcv-lite'`` for ``mmcv``; ``'?'`` when unknown."""
    return ', '.join(packages_distributions().get(module, [])) or '?'


def check_versions(modules: Optional[Sequence[str]] = None) -> None:
    """Raise ImportError naming found vs required versions of ``modules`` (keys
    of :data:`SUPPORTED`; default :data:`PRETRAIN`) when one is missing or out
    of range."""
    for name in modules or PRETRAIN:
        low, high = SUPPORTED[name]
        try:
            module = importlib.import_module(name)
            from mmengine.utils import digit_version as v
            version = getattr(module, '__version__', None)
            found = f'the imported {name} reports {version} (installed by ' \
                f'{distribution_of(name)})'
        except ImportError as e:
            version, found = None, f'{name} does not import ({e})'
        if version is None or not v(low) <= v(version) < v(high):
            profile = 'pretrain' if name in PRETRAIN else 'full'
            raise ImportError(f'hpm_mm needs {name}>={low},<{high}, but '
                              f'{found}. Fix: bash tools/install.sh {profile}')


def require_compiled_ops(user: str) -> None:
    """Raise :class:`MissingCompiledOpsError` in one line naming ``user`` when
    mmcv's compiled ops do not import."""
    try:
        importlib.import_module('mmcv._ext')
    except (ImportError, OSError) as e:
        import mmcv
        raise MissingCompiledOpsError(
            f'{user} needs mmcv\'s compiled ops (mmcv._ext): mmcv '
            f'{mmcv.__version__} of {distribution_of("mmcv")} lacks them '
            f'({type(e).__name__}: {e}). Fix: {FULL_INSTALL}') from None


class _CyclicHue(float):
    """A hue factor whose ``* 255`` is ``int(f * 255) % 256``: mmcv 2.1's
    ``adjust_hue`` casts it to uint8, which NumPy 1 wraps and NumPy 2 refuses.
    """

    def __mul__(self, other):
        return int(float(self) * other) % 256


def fix_mmcv_adjust_hue() -> None:
    """mmcv's ``adjust_hue`` (mmpretrain's ``ColorJitter``: BEiT, iBOT) under
    NumPy 2 as under NumPy 1. Idempotent."""
    import mmcv
    from mmcv import image
    from mmcv.image import photometric
    original = photometric.adjust_hue
    if getattr(original, '_hpm_cyclic', False):
        return

    @functools.wraps(original)
    def adjust_hue(img, hue_factor, backend=None):
        return original(img, _CyclicHue(hue_factor), backend)

    adjust_hue._hpm_cyclic = True
    for module in (mmcv, image, photometric):
        module.adjust_hue = adjust_hue


def scopeless_collate_fn() -> None:
    """mmengine 0.10.7 builds a ``collate_fn`` dict as ``partial(fn, **rest)``,
    so the ``_scope_`` key of an inherited config (``mmpretrain::``,
    ``hpm_mm::``) became an argument and the first batch failed: it is
    dropped. Idempotent."""
    from mmengine.runner import Runner
    original = Runner.__dict__['build_dataloader'].__func__
    if getattr(original, '_hpm_scopeless', False):
        return

    @functools.wraps(original)
    def build_dataloader(dataloader, *args, **kwargs):
        collate = dataloader.get('collate_fn') \
            if isinstance(dataloader, dict) else None
        if isinstance(collate, dict) and '_scope_' in collate:
            collate = {k: v for k, v in collate.items() if k != '_scope_'}
            # a copy: the config keeps its own
            dataloader = dict(dataloader, collate_fn=collate)
        return original(dataloader, *args, **kwargs)

    build_dataloader._hpm_scopeless = True
    Runner.build_dataloader = staticmethod(build_dataloader)


def register_config_scope() -> None:
    """mmengine's config paths: ``_base_ = 'hpm_mm::...'`` resolves (its
    ``MODULE2PACKAGE``), also from an editable install (where
    ``site-packages/<pkg>`` does not exist, ``get_installed_path`` takes the
    imported package's folder), and a package's model index is read once per
    process (mmengine 0.10.7 parses every metafile and reloads pkg_resources
    for each ``pkg::`` base, ~0.3 s each). Idempotent."""
    import importlib.util
    import os.path as osp

    from mmengine.config import config, utils
    utils.MODULE2PACKAGE.setdefault('hpm_mm', 'hpm_mm')
    if hasattr(utils.load, 'cache_info'):
        return
    utils.load = functools.lru_cache(maxsize=None)(utils.load)
    found, installed, path_of = set(), config.is_installed, \
        config.get_installed_path

    def is_installed(package: str) -> bool:  # a missing one: asked again
        if package not in found and installed(package):
            found.add(package)
        return package in found

    def get_installed_path(package: str) -> str:
        path = path_of(package)
        if not osp.isdir(path):
            spec = importlib.util.find_spec(package)
            if spec is not None and spec.origin is not None:
                return osp.dirname(spec.origin)
        return path

    config.is_installed = is_installed
    config.get_installed_path = get_installed_path


def _history_buffer_getstate(self) -> dict:
    """``HistoryBuffer.__getstate__`` without its four built-in statistics
    methods, which it pickles by ``getattr`` (a weights-only load would have
    to allow arbitrary attribute access); its ``__setstate__`` adds them
    back."""
    from mmengine.logging import HistoryBuffer
    state = {k: v for k, v in vars(self).items() if k != 'statistics_methods'}
    state['statistics_methods'] = {
        name: fn
        for name, fn in self._statistics_methods.items()
        if fn is not getattr(HistoryBuffer, name, None)
    }
    return state


def register_checkpoint_loader() -> None:
    """Every mmengine checkpoint load of a local file, an http(s) URL or an
    ``open-mmlab://`` name through hpm_mm's one loader,
    :func:`hpm_mm.engine.safe_load.load_file` (mmengine 0.10.7 calls
    ``torch.load`` without ``weights_only``, and its own checkpoints fail
    to resume under torch >= 2.6's default: HistoryBuffer is not
    allow-listed). Other schemes (``s3://``, ``petrel://``, ``pavi://``)
    stay mmengine's. Idempotent."""
    import torch
    from mmengine.logging import HistoryBuffer
    from mmengine.runner import checkpoint
    from mmengine.runner.checkpoint import CheckpointLoader

    from hpm_mm.engine.download import load_from_http, load_from_openmmlab
    from hpm_mm.engine.safe_load import (checkpoint_safe_globals,
                                         load_from_local)
    HistoryBuffer.__getstate__ = _history_buffer_getstate
    add = getattr(torch.serialization, 'add_safe_globals', None)
    if add is not None:  # torch < 2.4: tensors-only files load
        add(checkpoint_safe_globals())
    register = functools.partial(CheckpointLoader.register_scheme, force=True)
    register('', load_from_local)
    register(('http://', 'https://'), load_from_http)
    register(('open-mmlab://', 'openmmlab://'), load_from_openmmlab)
    # torchvision:// and mmcls:// resolve a name to a URL and call this
    # function of mmengine's module directly
    checkpoint.load_from_http = load_from_http
