"""Detection modules for mmdet (imported by the detection configs only):
ViTDet's simple feature pyramid and a layer-decay constructor around
mmpretrain's ``ViTSAM`` backbone."""
from hpm_mm import check_versions, require_compiled_ops

require_compiled_ops('Detection (hpm_mm.det, mmdet\'s Mask R-CNN)')
check_versions(['mmdet'])

from .layer_decay import LayerDecayOptimWrapperConstructor  # noqa: E402
from .simple_fpn import SimpleFeaturePyramid  # noqa: E402

__all__ = ['SimpleFeaturePyramid', 'LayerDecayOptimWrapperConstructor']
