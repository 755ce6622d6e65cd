from .autocast_optim_wrapper import AutocastOptimWrapper, amp_optim_wrapper_cfg
from .frozen_aware_constructor import FrozenAwareOptimWrapperConstructor
from .guarded_optim_wrapper import (GuardedAmpOptimWrapper,
                                    GuardedOptimWrapper, NonFiniteGuardMixin)

__all__ = [
    'AutocastOptimWrapper', 'amp_optim_wrapper_cfg', 'GuardedOptimWrapper',
    'GuardedAmpOptimWrapper', 'NonFiniteGuardMixin',
    'FrozenAwareOptimWrapperConstructor'
]
