from .autocast_optim_wrapper import (AutocastOptimWrapper,
                                     amp_optim_wrapper_cfg)
from .nonfinite import guarded_train_step, update_unless_nonfinite

__all__ = [
    'AutocastOptimWrapper', 'amp_optim_wrapper_cfg', 'update_unless_nonfinite',
    'guarded_train_step'
]
