import torch.nn as nn
from mmpretrain.models.necks import SimMIMLinearDecoder
from mmpretrain.registry import MODELS


@MODELS.register_module()
class HPMSimMIMDecoder(SimMIMLinearDecoder):
    """mmpretrain's SimMIM linear decoder (1x1 conv + pixel shuffle) for any
    number of image channels (mmpretrain's writes 3).

    Args:
        in_channels (int): Encoder width.
        encoder_stride (int): Patch size.
        out_channels (int): Image channels. Defaults to 3.
    """

    def __init__(self,
                 in_channels: int,
                 encoder_stride: int,
                 out_channels: int = 3) -> None:
        super().__init__(in_channels, encoder_stride)
        self.decoder[0] = nn.Conv2d(
            in_channels, encoder_stride**2 * out_channels, kernel_size=1)
