from .frozen_aware_constructor import FrozenAwareOptimWrapperConstructor
from .guarded_optim_wrapper import (AutocastOptimWrapper,
                                    GuardedAmpOptimWrapper,
                                    GuardedOptimWrapper, NonFiniteGuardMixin)

__all__ = [
    'AutocastOptimWrapper', 'GuardedOptimWrapper', 'GuardedAmpOptimWrapper',
    'NonFiniteGuardMixin', 'FrozenAwareOptimWrapperConstructor'
]
