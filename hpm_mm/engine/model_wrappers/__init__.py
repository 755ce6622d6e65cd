from .fsdp import HPMFullyShardedDataParallel

__all__ = ['HPMFullyShardedDataParallel']
