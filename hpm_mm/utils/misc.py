from mmengine.config import Config
from mmengine.registry import init_default_scope


def build_model(cfg: Config):
    """Build ``cfg.model`` as the mmengine Runner does.

    The Runner copies the top-level ``data_preprocessor`` into the model
    config; a tool that builds the model alone must do the same, or the
    images reach the model un-normalised.
    """
    init_default_scope(cfg.get('default_scope', 'mmpretrain'))
    from mmpretrain.registry import MODELS
    model_cfg = cfg.model.copy()
    if cfg.get('data_preprocessor') is not None:
        model_cfg.setdefault('data_preprocessor', cfg.data_preprocessor)
    return MODELS.build(model_cfg)


def setup_cpu_distributed(cfg: Config) -> None:
    """Make ``--launcher pytorch`` work on machines without a GPU.

    mmengine's ``init_dist`` calls ``torch.cuda.set_device`` and its DDP
    wrapper passes ``device_ids=[LOCAL_RANK]``; both fail on a CPU. When
    there is no CUDA, this joins the process group with gloo first (mmengine
    then skips its own ``init_dist``) and wraps the model with
    ``device_ids=None``. Nothing changes where CUDA is available.
    """
    import torch
    import torch.distributed as dist
    if cfg.get('launcher', 'none') == 'none' or torch.cuda.is_available():
        return
    if not dist.is_initialized():
        dist.init_process_group(backend='gloo')
    wrapper = cfg.get('model_wrapper_cfg') or dict(
        type='MMDistributedDataParallel',
        broadcast_buffers=False,
        find_unused_parameters=cfg.get('find_unused_parameters', False))
    wrapper.setdefault('device_ids', None)
    cfg.model_wrapper_cfg = wrapper
