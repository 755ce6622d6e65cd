"""Which OpenMMLab stack hpm_mm runs on, judged by what Python imports.

Each library is judged by the ``__version__`` its imported module reports,
not by the name of the distribution that installed it: ``mmcv-lite`` (the
pure-Python build of mmcv, enough for pretraining) and community forks that
keep the import names pass when their version is in range.

Two install profiles (``tools/install.sh pretrain|full``):

- pretraining needs mmengine, mmcv (lite is enough: mmpretrain never imports
  ``mmcv.ops``) and mmpretrain; checked when ``hpm_mm`` is imported;
- detection and segmentation (:mod:`hpm_mm.det`, :mod:`hpm_mm.seg`) also
  need mmdet / mmseg and mmcv's compiled ops; checked when those modules are
  imported, with one line naming what is missing and the install command.
"""
import functools
import importlib
from importlib.metadata import packages_distributions
from typing import Optional, Sequence

# import name -> (min inclusive, max exclusive)
SUPPORTED = {
    'mmengine': ('0.10.4', '1.0.0'),
    'mmcv': ('2.1.0', '2.2.0'),
    'mmpretrain': ('1.2.0', '1.3.0'),
    'mmdet': ('3.3.0', '3.4.0'),
    'mmseg': ('1.2.2', '1.3.0'),
}
PRETRAIN = ('mmengine', 'mmcv', 'mmpretrain')  # checked on ``import hpm_mm``
FULL_INSTALL = 'bash tools/install.sh full'


class MissingCompiledOpsError(ImportError):
    """mmcv is importable but without its compiled ops (``mmcv._ext``)."""


def _version_tuple(version: str) -> tuple:
    from mmengine.utils import digit_version
    return digit_version(version)


def distribution_of(module: str) -> str:
    """The distribution(s) that installed an import name, e.g.
    ``'mmcv-lite'`` for ``mmcv``; ``'?'`` when unknown."""
    return ', '.join(packages_distributions().get(module, [])) or '?'


def check_versions(modules: Optional[Sequence[str]] = None) -> None:
    """Raise ImportError naming found vs required versions when a library is
    missing or out of range.

    Args:
        modules (Sequence[str], optional): Import names to check (keys of
            :data:`SUPPORTED`). Defaults to the pretraining stack
            (:data:`PRETRAIN`).
    """
    for name in modules or PRETRAIN:
        low, high = SUPPORTED[name]
        try:
            module = importlib.import_module(name)
        except ImportError as e:
            profile = '' if name in PRETRAIN else ' full'
            raise ImportError(
                f'hpm_mm needs {name}>={low},<{high}, which does not import '
                f'({e}). Fix: bash tools/install.sh{profile}') from e
        version = getattr(module, '__version__', None)
        if version is None or not (_version_tuple(low) <= _version_tuple(
                version) < _version_tuple(high)):
            raise ImportError(
                f'hpm_mm needs {name}>={low},<{high}, but the imported {name} '
                f'reports {version} (installed by {distribution_of(name)}). '
                'Fix: bash tools/install.sh '
                f'{"pretrain" if name in PRETRAIN else "full"}')


def require_compiled_ops(user: str) -> None:
    """Raise :class:`MissingCompiledOpsError` in one line when mmcv's
    compiled ops do not import.

    Args:
        user (str): What needs them (named in the message).
    """
    try:
        importlib.import_module('mmcv._ext')
    except (ImportError, OSError) as e:
        import mmcv
        raise MissingCompiledOpsError(
            f'{user} needs mmcv\'s compiled ops (mmcv._ext), which this '
            f'environment lacks: mmcv {mmcv.__version__} was installed by '
            f'{distribution_of("mmcv")} ({type(e).__name__}: {e}). The '
            f'pretraining profile does not build them. Fix: {FULL_INSTALL}'
        ) from None


class _CyclicHue(float):
    """A hue factor whose ``* 255`` is the hue shift as an int in 0..255.

    mmcv 2.1's ``adjust_hue`` shifts the uint8 hue channel by
    ``np.uint8(hue_factor * 255)``: NumPy 1 wraps a negative factor around
    (-0.06 -> 241, i.e. a shift of -15 modulo 256), NumPy 2 raises
    ``OverflowError: Python integer -15 out of bounds for uint8``. Handed
    this float instead, that line computes ``int(f * 255) % 256``: NumPy 1's
    value, on either NumPy. Everything else (the [-0.5, 0.5] check, both
    backends) sees the plain float.
    """

    def __mul__(self, other):
        return int(float(self) * other) % 256


def fix_mmcv_adjust_hue() -> None:
    """Make mmcv's ``adjust_hue`` (mmpretrain's ``ColorJitter``, used by the
    BEiT and iBOT recipes) work under NumPy 2 as under NumPy 1 (same
    images): the factor goes in as :class:`_CyclicHue`. Idempotent."""
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
    """Let mmengine's ``Runner.build_dataloader`` build a ``collate_fn`` dict
    that carries ``_scope_``.

    A config that inherits a package's base (``'mmpretrain::...'``,
    ``'hpm_mm::...'``) gets ``_scope_`` in each of its dicts; mmengine 0.10.7
    builds a dataloader's ``collate_fn`` as ``partial(fn, **rest_of_dict)``,
    so that key became an argument and the first batch failed
    (``default_collate() got an unexpected keyword argument '_scope_'``:
    every ImageNet pretraining config, and any ``hpm_mm::`` config built by
    mmengine's own Runner). Collate functions resolve in mmengine's
    ``FUNCTIONS`` whatever the scope, so the key is dropped. Can go when
    mmengine pops ``_scope_`` there (not as of 0.10.7 / onedl-mmengine
    0.10.12). Idempotent.
    """
    from mmengine.runner import Runner
    original = Runner.__dict__['build_dataloader'].__func__
    if getattr(original, '_hpm_scopeless', False):
        return

    @functools.wraps(original)
    def build_dataloader(dataloader, *args, **kwargs):
        if isinstance(dataloader, dict) and isinstance(
                dataloader.get('collate_fn'), dict) and \
                '_scope_' in dataloader['collate_fn']:
            dataloader = dict(dataloader)  # the config keeps its own
            collate = dict(dataloader['collate_fn'])
            collate.pop('_scope_')
            dataloader['collate_fn'] = collate
        return original(dataloader, *args, **kwargs)

    build_dataloader._hpm_scopeless = True
    Runner.build_dataloader = staticmethod(build_dataloader)


def register_config_scope() -> None:
    """Let mmengine resolve ``_base_ = 'hpm_mm::...'``.

    mmengine only resolves ``pkg::`` config paths of packages listed in its
    ``MODULE2PACKAGE``; the configs themselves ship in ``hpm_mm/.mim``.
    Also :func:`resolve_editable_installs`. Idempotent.
    """
    from mmengine.config import utils
    utils.MODULE2PACKAGE.setdefault('hpm_mm', 'hpm_mm')
    resolve_editable_installs()


def resolve_editable_installs() -> None:
    """Let ``pkg::`` config paths work for editable installs (``pip
    install -e``, PEP 660).

    mmengine 0.10.7's ``get_installed_path`` assumes a package lives in its
    distribution's folder (``site-packages/<pkg>``); an editable install
    keeps only its metadata there, so ``hpm_mm::...`` resolved to a path
    that does not exist (opencompass #1220 reports the same). When the path
    mmengine computes does not exist, take the imported package's folder;
    a path that exists is never changed. Can go when mmengine finds
    editable installs (not as of 0.10.7 / onedl-mmengine 0.10.12).
    Idempotent.
    """
    import importlib.util
    import os.path as osp

    from mmengine.config import config as config_module
    original = config_module.get_installed_path
    if getattr(original, '_hpm_mm_editable', False):
        return

    def get_installed_path(package: str) -> str:
        path = original(package)
        if not osp.isdir(path):
            spec = importlib.util.find_spec(package)
            if spec is not None and spec.origin is not None:
                return osp.dirname(spec.origin)
        return path

    get_installed_path._hpm_mm_editable = True
    config_module.get_installed_path = get_installed_path


#: HistoryBuffer's built-in statistics, which it pickles by reference
_DEFAULT_STATS = ('mean', 'min', 'max', 'current')


def _history_buffer_getstate(self) -> dict:
    """``HistoryBuffer.__getstate__`` without the built-in methods.

    Unlike mmengine's version it does not write into ``self.__dict__``.
    """
    from mmengine.logging import HistoryBuffer
    custom = {
        name: fn
        for name, fn in self._statistics_methods.items()
        if not (name in _DEFAULT_STATS and fn is getattr(HistoryBuffer, name))
    }
    state = {
        k: v
        for k, v in self.__dict__.items() if k != 'statistics_methods'
    }
    state['statistics_methods'] = custom
    return state


def picklable_history_buffer() -> None:
    """Checkpoints that load with ``weights_only=True``: mmengine 0.10.7's
    ``HistoryBuffer`` (in every checkpoint's message hub) pickles its four
    built-in statistics methods (``getattr(HistoryBuffer, 'min')`` etc.),
    which would need the builtin ``getattr`` allow-listed, i.e. arbitrary
    attribute access on load. Its state is written without them (they are
    re-added on load by its ``__setstate__``). Can go when mmengine's
    checkpoints load with ``weights_only=True`` by themselves (not as of
    0.10.7 / onedl-mmengine 0.10.12). Idempotent."""
    from mmengine.logging import HistoryBuffer
    HistoryBuffer.__getstate__ = _history_buffer_getstate


def register_checkpoint_safe_globals() -> None:
    """Every checkpoint load of mmengine (resume, ``load_from``, test,
    ``init_cfg=dict(type='Pretrained')``; local paths, http(s) URLs and the
    model-zoo schemes that resolve to them) through hpm_mm's one loader,
    :func:`hpm_mm.engine.checkpoint.load_file` (``weights_only=True`` and
    an allow-list of the types mmengine writes): mmengine 0.10.7 calls
    ``torch.load`` without ``weights_only``. Also
    :func:`picklable_history_buffer`, so that new checkpoints hold nothing
    outside the allow-list. Can go when mmengine loads with
    ``weights_only=True`` by itself (not as of 0.10.7 / onedl-mmengine
    0.10.12). Idempotent."""
    import torch
    add = getattr(torch.serialization, 'add_safe_globals', None)
    if add is None:
        return  # load_file refuses to load, in one line
    from mmengine.runner import checkpoint
    from mmengine.runner.checkpoint import CheckpointLoader

    from hpm_mm.engine.checkpoint import (checkpoint_safe_globals,
                                          load_from_local, load_from_openmmlab,
                                          load_from_url, refuse_scheme)
    picklable_history_buffer()
    add(checkpoint_safe_globals())
    for prefixes, loader in (('', load_from_local), (('http://', 'https://'),
                                                     load_from_url),
                             (('open-mmlab://', 'openmmlab://'),
                              load_from_openmmlab), (('pavi://', 's3://'),
                                                     refuse_scheme)):
        CheckpointLoader.register_scheme(
            prefixes=prefixes, loader=loader, force=True)
    # torchvision:// and mmcls:// resolve a name to a URL and call this
    # function of mmengine's module directly
    checkpoint.load_from_http = load_from_url
