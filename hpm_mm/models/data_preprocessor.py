import torch
from mmpretrain.models.utils import SelfSupDataPreprocessor
from mmpretrain.registry import MODELS

from hpm_mm.errors import HPMError


def check_channels(preprocessor, data: dict) -> None:
    """Refuse, in one line naming both, images whose channel count does not
    match the preprocessor's ``mean``/``std`` (and so the model's input
    channels). Without it, grayscale images into an RGB model stop with an
    IndexError in the channel swap, and RGB images into a grayscale model
    with a convolution's channel error deep in the encoder."""
    if not getattr(preprocessor, '_enable_normalize', False):
        return
    inputs = data.get('inputs') if isinstance(data, dict) else None
    first = inputs[0] if isinstance(inputs, (list, tuple)) and inputs \
        else inputs
    if not (torch.is_tensor(first) and first.dim() >= 3):
        return
    have, want = first.shape[-3], preprocessor.mean.shape[0]
    if have != want:
        raise HPMError(
            f'the images have {have} channel(s) but the model takes '
            f'{want} (data_preprocessor mean/std). Fix: load them '
            f"with color_type='{'grayscale' if want == 1 else 'color'}"
            "' in LoadImageFromFile(Checked), or set the model's "
            'in_channels and the data_preprocessor mean/std for '
            f'{have}-channel images.')


def watch_channels(model) -> None:
    """Check every batch's channels (:func:`check_channels`) at the built
    model's data preprocessor, whichever class it is and whichever config
    key set it (``model.data_preprocessor`` or the top-level one): a forward
    pre-hook, added once; a mean/std of another length than the encoder's
    input channels is refused at once. The runners call it."""
    pre = getattr(model, 'data_preprocessor', None)
    embed = getattr(getattr(model, 'backbone', None), 'patch_embed', None)
    want = getattr(getattr(embed, 'projection', None), 'in_channels', None)
    mean = getattr(pre, 'mean', None)
    if want and torch.is_tensor(mean) and getattr(
            pre, '_enable_normalize', False) and mean.shape[0] != want:
        raise HPMError(
            f'data_preprocessor mean/std have {mean.shape[0]} value(s) but '
            f'the model takes {want}-channel images. Fix: one mean and one '
            "std value per channel (the model's patch_cfg.in_channels).")
    if not isinstance(pre, torch.nn.Module) or \
            getattr(pre, '_hpm_channels_watched', False) or \
            isinstance(pre, ChannelCheckedDataPreprocessor):
        return
    pre.register_forward_pre_hook(lambda m, args: check_channels(m, args[0])
                                  if args else None)
    pre._hpm_channels_watched = True


@MODELS.register_module()
class ChannelCheckedDataPreprocessor(SelfSupDataPreprocessor):
    """mmpretrain's :class:`SelfSupDataPreprocessor` that refuses images
    whose channel count does not match its ``mean``/``std``, in one line
    naming both (:func:`check_channels`). hpm_mm's runners check the built
    preprocessor of any model the same way (:func:`watch_channels`)."""

    def forward(self, data: dict, training: bool = False) -> dict:
        check_channels(self, data)
        return super().forward(data, training)
