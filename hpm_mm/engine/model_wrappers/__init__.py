from .ddp import HPMDistributedDataParallel
from .fsdp import HPMFullyShardedDataParallel

__all__ = ['HPMDistributedDataParallel', 'HPMFullyShardedDataParallel']
