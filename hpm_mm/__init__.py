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
                     check_versions, require_compiled_ops)
from .version import __version__, version_info  # noqa: E402

check_versions()  # mmengine, mmcv (lite is enough), mmpretrain


def _register_config_scope() -> None:
    """Let mmengine resolve ``_base_ = 'hpm_mm::...'``.

    mmengine only resolves ``pkg::`` config paths of packages listed in its
    ``MODULE2PACKAGE``; the configs themselves ship in ``hpm_mm/.mim``.
    """
    from mmengine.config import utils
    utils.MODULE2PACKAGE.setdefault('hpm_mm', 'hpm_mm')


_register_config_scope()

from .utils import register_checkpoint_safe_globals  # noqa: E402

register_checkpoint_safe_globals()

from . import datasets, engine, evaluation, models  # noqa: E402,F401

__all__ = [
    '__version__', 'version_info', 'SUPPORTED', 'check_versions',
    'require_compiled_ops', 'MissingCompiledOpsError'
]
