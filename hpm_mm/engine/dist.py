"""Distributed launches on any machine: a worker ends with its launcher,
and ``launcher='pytorch'`` works without a GPU (gloo, no device ids)."""
import os

from mmengine.config import Config


def die_with_launcher() -> None:
    """Let the kernel end this worker (SIGTERM) when the process that
    launched it dies: a ``kill -9`` of ``tools/dist_train.sh``'s torchrun
    would otherwise leave its workers training to the end as orphans
    (Linux ``prctl(PR_SET_PDEATHSIG)``; elsewhere nothing changes)."""
    import ctypes
    import signal
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # 1: PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # no prctl (not Linux): nothing to set
        return
    if os.getppid() == 1:  # the launcher died before the line above
        os.kill(os.getpid(), signal.SIGTERM)


def setup_cpu_distributed(launcher: str, cfg: Config) -> None:
    """``launcher='pytorch'`` without a GPU: join the process group with gloo
    (mmengine's ``init_dist`` sets a CUDA device) and wrap the model with
    ``device_ids=None``; a torchrun worker ends with its launcher
    (:func:`die_with_launcher`)."""
    import torch
    if (launcher or 'none') == 'none':
        return
    if launcher == 'pytorch':  # torchrun's workers end with it
        die_with_launcher()
    if torch.cuda.is_available():
        return
    if not torch.distributed.is_initialized():
        torch.distributed.init_process_group(backend='gloo')
    wrapper = cfg.get('model_wrapper_cfg') or dict(
        type='MMDistributedDataParallel',
        broadcast_buffers=False,
        find_unused_parameters=cfg.get('find_unused_parameters', False))
    wrapper.setdefault('device_ids', None)
    cfg.model_wrapper_cfg = wrapper
