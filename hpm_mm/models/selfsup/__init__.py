from .hpm import HPM

__all__ = ['HPM']
