from .autocast_optim_wrapper import AutocastOptimWrapper
from .frozen_aware_constructor import FrozenAwareOptimWrapperConstructor
from .guarded_optim_wrapper import (GuardedAmpOptimWrapper,
                                    GuardedOptimWrapper, NonFiniteGuardMixin)

__all__ = [
    'AutocastOptimWrapper', 'GuardedOptimWrapper', 'GuardedAmpOptimWrapper',
    'NonFiniteGuardMixin', 'FrozenAwareOptimWrapperConstructor'
]
