from typing import List, Sequence, Tuple

import torch
import torch.nn as nn
from mmcv.cnn import build_norm_layer
from mmdet.registry import MODELS
from mmengine.model import BaseModule


@MODELS.register_module()
class MultiLevelViTAdapter(BaseModule):
    """The MAE paper's multi-scale adaptation of a plain ViT for Mask R-CNN
    (the HPM paper's text): the maps at the ends of 4 block subsets
    (``out_indices``, stride 16) brought to strides 4, 8, 16, 32 (2 transposed
    convs, 1, identity, max pooling), for mmdet's ``FPN``.

    Args:
        in_channels (int): The ViT's width.
        scale_factors (Sequence[float]): Defaults to (4.0, 2.0, 1.0, 0.5).
        norm_cfg (dict): Between the x4 branch's convs. Defaults to SyncBN.
        init_cfg (dict, optional): The initialisation. Defaults to None.
    """

    def __init__(self,
                 in_channels: int,
                 scale_factors: Sequence[float] = (4.0, 2.0, 1.0, 0.5),
                 norm_cfg: dict = dict(type='SyncBN', requires_grad=True),
                 init_cfg=None) -> None:
        super().__init__(init_cfg=init_cfg)
        self.stages = nn.ModuleList()
        dim = in_channels
        for scale in scale_factors:
            if scale == 4.0:
                layers: List[nn.Module] = [
                    nn.ConvTranspose2d(dim, dim, 2, stride=2),
                    build_norm_layer(norm_cfg, dim)[1],
                    nn.GELU(),
                    nn.ConvTranspose2d(dim, dim, 2, stride=2)
                ]
            elif scale == 2.0:
                layers = [nn.ConvTranspose2d(dim, dim, 2, stride=2)]
            elif scale == 1.0:
                layers = [nn.Identity()]
            elif scale == 0.5:
                layers = [nn.MaxPool2d(kernel_size=2, stride=2)]
            else:
                raise ValueError(f'scale_factor {scale} is not supported; '
                                 'use 4.0, 2.0, 1.0 or 0.5.')
            self.stages.append(nn.Sequential(*layers))

    def forward(self, inputs: Tuple[torch.Tensor]) -> Tuple[torch.Tensor]:
        """One (B, C, H/16, W/16) map per subset -> the same maps at the
        strides of ``scale_factors`` (4, 8, 16, 32)."""
        if len(inputs) != len(self.stages):
            raise ValueError(
                f'MultiLevelViTAdapter has {len(self.stages)} levels but got '
                f'{len(inputs)} feature maps. Fix: backbone out_indices, e.g. '
                '[2, 5, 8, 11].')
        return tuple(stage(x) for stage, x in zip(self.stages, inputs))
