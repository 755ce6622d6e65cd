from .hpm_decoder import HPMPretrainDecoder

__all__ = ['HPMPretrainDecoder']
