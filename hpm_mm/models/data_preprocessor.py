import torch
from mmpretrain.models.utils import SelfSupDataPreprocessor
from mmpretrain.registry import MODELS


@MODELS.register_module()
class ChannelCheckedDataPreprocessor(SelfSupDataPreprocessor):
    """mmpretrain's :class:`SelfSupDataPreprocessor` that refuses images
    whose channel count does not match its ``mean``/``std`` (and so the
    model's input channels), in one line naming both.

    Without it, grayscale images into an RGB model stop with an IndexError in
    the channel swap, and RGB images into a grayscale model with a
    convolution's channel error deep in the encoder.
    """

    def forward(self, data: dict, training: bool = False) -> dict:
        inputs = data['inputs']
        first = inputs[0] if isinstance(inputs, (list, tuple)) else inputs
        if torch.is_tensor(first) and first.dim() >= 3:
            have = first.shape[-3]
            want = self.mean.shape[0] if self._enable_normalize else have
            if have != want:
                raise ValueError(
                    f'the images have {have} channel(s) but the model takes '
                    f'{want} (data_preprocessor mean/std). Fix: load them '
                    f"with color_type='{'grayscale' if want == 1 else 'color'}"
                    "' in LoadImageFromFile(Checked), or set the model's "
                    'in_channels and the data_preprocessor mean/std for '
                    f'{have}-channel images.')
        return super().forward(data, training)
