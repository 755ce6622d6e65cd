"""hpm_mm: Hard Patches Mining for Masked Image Modeling on OpenMMLab.

Importing the package checks that the pretraining stack (mmengine, mmcv or
mmcv-lite, mmpretrain) is in the supported ranges (:mod:`hpm_mm.compat`) and
registers the pretraining components into mmpretrain's registries. Detection
and segmentation modules live in :mod:`hpm_mm.det` and :mod:`hpm_mm.seg`,
imported only by the downstream configs; they also need mmdet / mmseg and
mmcv's compiled ops (``bash tools/install.sh full``).
"""
import warnings

# Two import-time warnings of the stack that every run would print, these
# messages only (set before hpm_mm's first mmengine import): mmengine 0.10.7
# imports pkg_resources, which setuptools deprecates (fixed in mmengine's
# unreleased main); under mmcv-lite (the pretraining profile) mmcv warns that
# its deformable-attention op is missing, which pretraining never uses
# (hpm_mm.det / hpm_mm.seg check the compiled ops themselves).
warnings.filterwarnings(
    'ignore', message='pkg_resources is deprecated', category=UserWarning)
warnings.filterwarnings(
    'ignore', message='Fail to import ``MultiScaleDeformableAttention``')

from .compat import (SUPPORTED, MissingCompiledOpsError,  # noqa: E402
                     check_versions, fix_mmcv_adjust_hue,
                     require_compiled_ops, scopeless_collate_fn,
                     unbind_attention_qkv)
from .version import __version__, version_info  # noqa: E402

check_versions()  # mmengine, mmcv (lite is enough), mmpretrain
fix_mmcv_adjust_hue()  # NumPy 2 (e.g. a GPU image's): ColorJitter's hue
unbind_attention_qkv()  # same numbers, a backward without 3 zero fills
scopeless_collate_fn()  # package-scoped configs' collate_fn dicts build


def _register_config_scope() -> None:
    """Let mmengine resolve ``_base_ = 'hpm_mm::...'``.

    mmengine only resolves ``pkg::`` config paths of packages listed in its
    ``MODULE2PACKAGE``; the configs themselves ship in ``hpm_mm/.mim``.
    """
    from mmengine.config import utils
    utils.MODULE2PACKAGE.setdefault('hpm_mm', 'hpm_mm')
    _resolve_editable_installs()


def _resolve_editable_installs() -> None:
    """Let ``pkg::`` config paths work for editable installs (``pip
    install -e``, PEP 660).

    mmengine 0.10.7's ``get_installed_path`` assumes a package lives in its
    distribution's folder (``site-packages/<pkg>``); an editable install
    keeps only its metadata there, so ``hpm_mm::...`` resolved to a path
    that does not exist (opencompass #1220 reports the same). When the path
    mmengine computes does not exist, take the imported package's folder;
    a path that exists is never changed.
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


_register_config_scope()

from .utils import register_checkpoint_safe_globals  # noqa: E402

register_checkpoint_safe_globals()

from . import datasets, engine, evaluation, models  # noqa: E402,F401

__all__ = [
    '__version__', 'version_info', 'SUPPORTED', 'check_versions',
    'require_compiled_ops', 'MissingCompiledOpsError'
]
