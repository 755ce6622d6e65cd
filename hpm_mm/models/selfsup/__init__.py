from .frameworks import HPMBEiT, HPMSimMIM
from .hpm import HPM

__all__ = ['HPM', 'HPMSimMIM', 'HPMBEiT']
