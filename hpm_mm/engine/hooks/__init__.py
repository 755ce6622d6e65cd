from .atomic_checkpoint_hook import AtomicCheckpointHook
from .console_progress_hook import ConsoleProgressHook
from .cuda_graph_step_hook import CUDAGraphStepHook
from .deferred_runtime_info_hook import DeferredRuntimeInfoHook
from .hard_patch_vis_hook import HardPatchVisHook
from .hpm_schedule_hook import HPMScheduleHook
from .knn_hook import KNNEvalHook
from .resume_hook import ResumeHook
from .time_limit_hook import TimeLimitHook

__all__ = [
    'HPMScheduleHook', 'KNNEvalHook', 'HardPatchVisHook',
    'AtomicCheckpointHook', 'ConsoleProgressHook', 'TimeLimitHook',
    'DeferredRuntimeInfoHook', 'CUDAGraphStepHook', 'ResumeHook'
]
