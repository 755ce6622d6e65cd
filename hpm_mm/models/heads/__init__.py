from .hpm_head import HPMPretrainHead

__all__ = ['HPMPretrainHead']
