from .hpm_schedule_hook import HPMScheduleHook
from .knn_hook import KNNEvalHook

__all__ = ['HPMScheduleHook', 'KNNEvalHook']
