from .autocast_optim_wrapper import (AutocastOptimWrapper,
                                     amp_optim_wrapper_cfg)

__all__ = ['AutocastOptimWrapper', 'amp_optim_wrapper_cfg']
