from .ema_teacher import EMATeacher
from .score_sources import TEACHER_SCORES

__all__ = ['EMATeacher', 'TEACHER_SCORES']
