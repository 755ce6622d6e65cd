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
