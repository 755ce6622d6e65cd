"""hpm_mm: Hard Patches Mining for Masked Image Modeling on OpenMMLab.
Importing it checks the pretraining stack and registers the components;
:mod:`hpm_mm.det` / :mod:`hpm_mm.seg` need the full install."""
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

# isort: off
# yapf: disable
from .compat import (SUPPORTED, MissingCompiledOpsError,  # noqa: E402
                     check_versions, fix_mmcv_adjust_hue,
                     register_checkpoint_loader, register_config_scope,
                     require_compiled_ops, scopeless_collate_fn)
from .version import __version__, version_info  # noqa: E402

check_versions()  # mmengine, mmcv (lite is enough), mmpretrain
fix_mmcv_adjust_hue()  # NumPy 2 (e.g. a GPU image's): ColorJitter's hue
scopeless_collate_fn()  # package-scoped configs' collate_fn dicts build
register_config_scope()  # hpm_mm:: config paths, editable installs too
register_checkpoint_loader()  # every checkpoint load: weights_only

from . import datasets, engine, evaluation, models  # noqa: E402,F401
from .errors import HPMError  # noqa: E402
# yapf: enable
# isort: on

__all__ = [
    '__version__', 'version_info', 'SUPPORTED', 'check_versions',
    'require_compiled_ops', 'MissingCompiledOpsError', 'HPMError'
]
