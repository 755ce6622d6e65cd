from .fsdp import HPMFSDPStrategy, HPMFullyShardedDataParallel

__all__ = ['HPMFullyShardedDataParallel', 'HPMFSDPStrategy']
