"""Count what would make a GPU wait for the host, on any device: ``.item()``,
``bool(tensor)``, data-dependent shapes (``nonzero``, boolean indexing)
and host/device copies, seen by the dispatcher on a CPU as on CUDA, so
the CPU tests hold a step's count::

    with HostSyncCounter() as syncs:
        model.train_step(data, optim_wrapper)
    syncs.count, syncs.ops  # e.g. 1, {'aten._local_scalar_dense': 1}"""
from collections import Counter
from typing import Dict, List

import torch
from torch.utils._python_dispatch import TorchDispatchMode

#: ops that read a value back to the host, or whose output size depends on
#: the data (the host waits for it to allocate the output)
SYNC_OPS = frozenset({
    'aten._local_scalar_dense', 'aten.is_nonzero', 'aten.item', 'aten.nonzero',
    'aten.nonzero_static', 'aten.masked_select', 'aten.unique', 'aten._unique',
    'aten._unique2', 'aten.unique_consecutive', 'aten.unique_dim',
    'aten.repeat_interleave', 'aten.equal', 'aten.allclose'
})


def _device_of(x):
    return x.device.type if isinstance(x, torch.Tensor) else None


class HostSyncCounter(TorchDispatchMode):
    """Record the ops run under it that synchronise a GPU with the host.

    Args:
        keep_stacks (bool): Keep where each happened (:attr:`calls`).
        device (str, optional): Only reads of tensors on this device count
            (default: every read, the CPU's stand-in)."""

    def __init__(self, keep_stacks: bool = False, device=None) -> None:
        super().__init__()
        # on a GPU, a read of a host tensor (an optimizer's step count) is
        # no sync: only reads of tensors on ``device`` count then
        self.device = torch.device(device).type if device else None
        self.ops: Dict[str, int] = Counter()
        self.keep_stacks = keep_stacks
        self.calls: List[tuple] = []

    @property
    def count(self) -> int:
        return sum(self.ops.values())

    def _sync(self, func, args, kwargs) -> bool:
        name = f'aten.{func.__name__.split(".")[0]}'
        if name in SYNC_OPS:
            first = args[0] if args else None
            return self.device is None or _device_of(first) in (self.device,
                                                                None)
        if name in ('aten.index', 'aten.index_put_', 'aten.index_put'):
            # boolean indexing: a bool mask as index is a nonzero
            indices = args[1] if len(args) > 1 else kwargs.get('indices')
            return any(
                isinstance(i, torch.Tensor) and i.dtype == torch.bool
                for i in (indices or []))
        if name in ('aten._to_copy', 'aten.copy_'):
            if name == 'aten._to_copy':
                src, dst = _device_of(args[0]), kwargs.get('device')
                dst = torch.device(dst).type if dst is not None else src
            else:
                dst, src = _device_of(args[0]), _device_of(args[1])
            return src is not None and dst is not None and src != dst and \
                'cpu' in (src, dst) and not kwargs.get('non_blocking', False)
        return False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if self._sync(func, args, kwargs):
            name = f'aten.{func.__name__.split(".")[0]}'
            self.ops[name] += 1
            if self.keep_stacks:
                import traceback
                self.calls.append(
                    (name, ''.join(traceback.format_stack(limit=12)[:-2])))
        return func(*args, **kwargs)
