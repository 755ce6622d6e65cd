from typing import List, Sequence, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F
from mmcv.cnn import ConvModule, build_norm_layer
from mmdet.registry import MODELS
from mmengine.model import BaseModule


@MODELS.register_module()
class SimpleFeaturePyramid(BaseModule):
    """ViTDet's simple feature pyramid (Li et al., ECCV 2022): from the last
    stride-16 map, ``scale_factors`` 4 / 2 / 1 / 0.5 (transposed convs,
    identity, max pooling), each then a 1x1 and a 3x3 conv with ``norm_cfg``
    (``mmpretrain.LN2d``) to ``out_channels``; ``num_outs=5`` adds P6. Strides
    match mmdet's FPN.

    Args:
        in_channels (int): the ViT's width.
        out_channels (int): channels of every level. Defaults to 256.
        scale_factors (Sequence[float]): the levels from the stride-16 map.
            Defaults to (4, 2, 1, 0.5): strides 4 to 32.
        num_outs (int): levels out; 5 adds P6 by max pooling. Defaults to 5.
        norm_cfg (dict): the convs' norm. Defaults to ``mmpretrain.LN2d`` with
            eps 1e-6, ViTDet's.
        init_cfg (dict, optional): the initialisation. Defaults to None.
    """

    def __init__(self,
                 in_channels: int,
                 out_channels: int = 256,
                 scale_factors: Sequence[float] = (4.0, 2.0, 1.0, 0.5),
                 num_outs: int = 5,
                 norm_cfg: dict = dict(type='mmpretrain.LN2d', eps=1e-6),
                 init_cfg=None) -> None:
        super().__init__(init_cfg=init_cfg)
        if num_outs not in (len(scale_factors), len(scale_factors) + 1):
            raise ValueError(f'num_outs must be {len(scale_factors)} or '
                             f'{len(scale_factors) + 1}, got {num_outs}.')
        self.num_outs = num_outs
        self.stages = nn.ModuleList()
        conv = dict(norm_cfg=norm_cfg, act_cfg=None)  # every 1x1 and 3x3
        for scale in scale_factors:
            dim = in_channels
            if scale == 4.0:
                layers: List[nn.Module] = [
                    nn.ConvTranspose2d(dim, dim // 2, 2, stride=2),
                    build_norm_layer(norm_cfg, dim // 2)[1],
                    nn.GELU(),
                    nn.ConvTranspose2d(dim // 2, dim // 4, 2, stride=2)
                ]
                dim = dim // 4
            elif scale == 2.0:
                layers = [nn.ConvTranspose2d(dim, dim // 2, 2, stride=2)]
                dim = dim // 2
            elif scale == 1.0:
                layers = []
            elif scale == 0.5:
                layers = [nn.MaxPool2d(kernel_size=2, stride=2)]
            else:
                raise ValueError(f'scale_factor {scale} is not supported; '
                                 'use 4.0, 2.0, 1.0 or 0.5.')
            layers += [
                ConvModule(dim, out_channels, 1, **conv),
                ConvModule(out_channels, out_channels, 3, padding=1, **conv)
            ]
            self.stages.append(nn.Sequential(*layers))

    def forward(self, inputs: Tuple[torch.Tensor]) -> Tuple[torch.Tensor]:
        """(B, C, H/16, W/16) -> strides 4, 8, 16, 32 (and 64)."""
        x = inputs[-1]
        outs = [stage(x) for stage in self.stages]
        if self.num_outs > len(outs):
            outs.append(F.max_pool2d(outs[-1], 1, stride=2))
        return tuple(outs)
