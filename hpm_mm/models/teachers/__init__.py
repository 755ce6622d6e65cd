from .ema_teacher import EMATeacher

__all__ = ['EMATeacher']
