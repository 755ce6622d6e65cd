from .hpm_decoder import HPMPretrainDecoder
from .ibot_neck import iBOTNeck
from .loss_predictor import HPMLossPredictor
from .simmim_decoder import HPMSimMIMDecoder

__all__ = [
    'HPMPretrainDecoder', 'HPMLossPredictor', 'HPMSimMIMDecoder', 'iBOTNeck'
]
