"""Segmentation entry (the ADE20k configs import it): mmseg's UperNet and
MAE backbone as they are; importing this checks mmseg and mmcv's compiled
ops, so a pretraining install fails in one line."""
from hpm_mm import check_versions, require_compiled_ops

require_compiled_ops('Segmentation (hpm_mm.seg, mmseg\'s UperNet)')
check_versions(['mmseg'])
