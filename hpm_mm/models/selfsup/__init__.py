from .frameworks import HPMBEiT, HPMiBOT, HPMSimMIM
from .hpm import HPM

__all__ = ['HPM', 'HPMSimMIM', 'HPMBEiT', 'HPMiBOT']
