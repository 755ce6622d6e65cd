"""A model from a config, with a trained checkpoint loaded strictly."""
from typing import Optional, Sequence, Union

from mmengine.config import Config

from .config import load_config


def load_model(config: Union[str, Config],
               checkpoint: Optional[str] = None,
               teacher: bool = False,
               whole: bool = False,
               required: Union[str, Sequence[str]] = 'backbone.',
               device: Optional[str] = None):
    """The model of ``config`` (:func:`mmpretrain.apis.get_model`: the
    config's ``data_preprocessor`` included, in eval mode), with
    ``checkpoint`` loaded when given.

    Args:
        config (str | Config): A config file or a loaded config.
        checkpoint (str, optional): A checkpoint of this architecture,
            loaded through hpm_mm's safe loader; every weight under
            ``required`` must be in it, and a checkpoint holding NaN/inf is
            refused (:func:`~hpm_mm.engine.checkpoint.
            load_checkpoint_strict`).
        teacher (bool): Load the EMA teacher's weights into the student's
            parts (the teacher's encoder).
        whole (bool): Load student and teacher each in its place.
        required (str | Sequence[str]): Key prefixes the checkpoint must
            fill. Defaults to the encoder's.
        device (str, optional): Where the model goes.

    Example::

        from hpm_mm.apis import load_model
        model = load_model('configs/hpm/hpm_vit-mini-p4_1xb256-coslr-10e_'
                           'fmnist.py', 'work_dirs/hpm/epoch_10.pth')
        feats = model.extract_feat(images)  # the encoder's features

    Raises:
        HPMError: The checkpoint is unsafe or holds NaN/inf.
        KeyError: It does not fill the required weights.
    """
    from mmpretrain.apis import get_model

    from hpm_mm.engine.checkpoint import load_checkpoint_strict
    cfg = load_config(config) if isinstance(config, str) else config
    model = get_model(cfg, device=device)
    if checkpoint is not None:
        load_checkpoint_strict(
            model,
            checkpoint,
            teacher=teacher,
            required_prefix=required
            if isinstance(required, str) else tuple(required),
            whole=whole)
    return model
