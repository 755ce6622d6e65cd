"""hpm_mm: Hard Patches Mining for Masked Image Modeling on OpenMMLab.

Importing the package checks that the OpenMMLab libraries are in the supported
ranges and registers the pretraining components into mmpretrain's registries.
Detection and segmentation modules live in :mod:`hpm_mm.det` and
:mod:`hpm_mm.seg`, imported only by the downstream configs.
"""
from importlib.metadata import PackageNotFoundError, version as _dist_version

from mmengine.utils import digit_version

from .version import __version__, version_info

# distribution -> (min inclusive, max exclusive)
SUPPORTED = {
    'mmengine': ('0.10.4', '1.0.0'),
    'mmcv': ('2.1.0', '2.2.0'),
    'mmpretrain': ('1.2.0', '1.3.0'),
    'mmdet': ('3.3.0', '3.4.0'),
    'mmsegmentation': ('1.2.2', '1.3.0'),
}
OPTIONAL = ('mmdet', 'mmsegmentation')  # needed by hpm_mm.det / hpm_mm.seg only


def check_versions(packages=None) -> None:
    """Raise ImportError naming installed vs required versions when out of range.

    Args:
        packages (Sequence[str], optional): Distributions to check. Defaults
            to all in :data:`SUPPORTED`, where a missing optional one (mmdet,
            mmsegmentation) is only an error once it is asked for by name.
    """
    for name in packages or SUPPORTED:
        low, high = SUPPORTED[name]
        try:
            version = _dist_version(name)
        except PackageNotFoundError as e:
            if packages is None and name in OPTIONAL:
                continue
            raise ImportError(
                f'hpm_mm needs {name}>={low},<{high}, which is not installed '
                f'({e}). Fix: bash tools/install.sh') from e
        if not digit_version(low) <= digit_version(version) < digit_version(
                high):
            raise ImportError(
                f'hpm_mm needs {name}>={low},<{high}, but {name}=={version} is '
                f'installed. Fix: pip install "{name}>={low},<{high}" '
                '(or bash tools/install.sh).')


check_versions()


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

__all__ = ['__version__', 'version_info', 'check_versions']
