"""Segmentation entry (imported by the ADE20k configs).

mmseg's UperNet and MAE backbone are used as they are; importing this
module only checks what they need — mmseg in the supported range and mmcv's
compiled ops (which mmseg's decode heads import) — so a pretraining-only
install fails in one line naming the install command, before mmseg's own
import error deep in its model zoo.
"""
from hpm_mm import check_versions, require_compiled_ops

require_compiled_ops('Segmentation (hpm_mm.seg, mmseg\'s UperNet)')
check_versions(['mmseg'])
