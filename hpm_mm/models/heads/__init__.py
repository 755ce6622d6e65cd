from .framework_heads import HPMBEiTHead, HPMiBOTHead, HPMSimMIMHead
from .hpm_head import HPMFeaturePretrainHead, HPMPretrainHead

__all__ = [
    'HPMPretrainHead', 'HPMFeaturePretrainHead', 'HPMSimMIMHead',
    'HPMBEiTHead', 'HPMiBOTHead'
]
