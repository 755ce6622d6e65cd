from .atomic_checkpoint_hook import AtomicCheckpointHook
from .hard_patch_vis_hook import HardPatchVisHook
from .hpm_schedule_hook import HPMScheduleHook
from .knn_hook import KNNEvalHook

__all__ = [
    'HPMScheduleHook', 'KNNEvalHook', 'HardPatchVisHook',
    'AtomicCheckpointHook'
]
