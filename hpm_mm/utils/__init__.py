from .checkpoint import (checkpoint_mismatch, checkpoint_problem,
                         checkpoint_state, find_resume_checkpoint,
                         load_checkpoint_strict, nonfinite_tensors,
                         register_checkpoint_safe_globals, share_of_model,
                         student_or_teacher_state)
from .misc import build_model, setup_cpu_distributed

__all__ = [
    'register_checkpoint_safe_globals', 'load_checkpoint_strict',
    'student_or_teacher_state', 'build_model', 'setup_cpu_distributed',
    'checkpoint_mismatch', 'checkpoint_problem', 'checkpoint_state',
    'find_resume_checkpoint', 'nonfinite_tensors', 'share_of_model'
]
