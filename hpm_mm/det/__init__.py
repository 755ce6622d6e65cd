"""Detection modules for mmdet (imported only by detection configs).

The backbone is mmpretrain's ``ViTSAM`` (``type='mmpretrain.ViTSAM'``): a
plain ViT with windowed attention, a few global blocks and decomposed
relative position, i.e. ViTDet's backbone, which installed mmdet does not
ship (``projects/ViTDet`` is not part of the package). This package adds
ViTDet's simple feature pyramid and a layer-decay optimizer constructor,
both registered into mmdet's registries.
"""
from hpm_mm import check_versions, require_compiled_ops

require_compiled_ops('Detection (hpm_mm.det, mmdet\'s Mask R-CNN)')
check_versions(['mmdet'])

from .layer_decay import LayerDecayOptimWrapperConstructor  # noqa: E402
from .multi_level import MultiLevelViTAdapter  # noqa: E402
from .simple_fpn import SimpleFeaturePyramid  # noqa: E402

__all__ = [
    'SimpleFeaturePyramid', 'MultiLevelViTAdapter',
    'LayerDecayOptimWrapperConstructor'
]
