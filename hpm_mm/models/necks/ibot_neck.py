from typing import List, Optional, Union

import torch
import torch.nn as nn
import torch.nn.functional as F
from mmengine.model import BaseModule
from mmpretrain.registry import MODELS


@MODELS.register_module()
class iBOTNeck(BaseModule):
    """iBOT's projection head shared by the CLS and patch tokens (``iBOTHead``,
    ``shared_head=True``): an MLP of ``num_layers`` to a bottleneck, l2
    normalisation, a weight-normalised linear layer without bias to
    ``out_channels`` prototypes, each token on its own. ``norm_last_layer``
    fixes its row norms to 1; its gradients are zeroed during the first
    ``freeze_last_layer`` epochs (:meth:`set_epoch`). Defaults: iBOT's ViT-B.

    Args:
        in_channels (int): the encoder's width. Defaults to 768.
        hidden_channels (int): the MLP's width. Defaults to 2048.
        bottleneck_channels (int): the bottleneck's width. Defaults to 256.
        out_channels (int): prototypes. Defaults to 8192.
        num_layers (int): the MLP's layers. Defaults to 3.
        norm_last_layer (bool): whether the last layer's row norms are fixed to
            1. Defaults to True.
        freeze_last_layer (int): epochs the last layer's gradients are zeroed.
            Defaults to 1.
        init_cfg (dict, optional): the initialisation. Defaults to truncated
            normal, std 0.02.
    """

    def __init__(
        self,
        in_channels: int = 768,
        hidden_channels: int = 2048,
        bottleneck_channels: int = 256,
        out_channels: int = 8192,
        num_layers: int = 3,
        norm_last_layer: bool = True,
        freeze_last_layer: int = 1,
        init_cfg: Optional[Union[List[dict], dict]] = dict(
            type='TruncNormal', layer='Linear', std=0.02, bias=0)
    ) -> None:
        super().__init__(init_cfg=init_cfg)
        if num_layers < 1:
            raise ValueError(f'num_layers must be >= 1, got {num_layers}.')
        dims = [in_channels] + [hidden_channels] * (num_layers - 1)
        layers = []
        for d_in, d_out in zip(dims, dims[1:] + [bottleneck_channels]):
            layers += [nn.Linear(d_in, d_out), nn.GELU()]
        self.mlp = nn.Sequential(*layers[:-1])
        self.last_layer = nn.Linear(
            bottleneck_channels, out_channels, bias=False)
        self.last_layer_scale = None if norm_last_layer else nn.Parameter(
            torch.ones(out_channels, 1))
        self.freeze_last_layer = freeze_last_layer
        self.frozen = freeze_last_layer > 0
        # the parameters freeze_last_layer keeps fixed: their gradients zeroed
        for p in (self.last_layer.weight, self.last_layer_scale):
            if p is not None:
                p.register_hook(self._cancel_when_frozen)

    def _cancel_when_frozen(self, grad: torch.Tensor) -> torch.Tensor:
        return torch.zeros_like(grad) if self.frozen else grad

    def set_epoch(self, epoch: float) -> None:
        """Keep the last layer fixed while ``epoch < freeze_last_layer``."""
        self.frozen = epoch < self.freeze_last_layer

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Tokens (..., C) -> prototype logits (..., K)."""
        x = F.normalize(self.mlp(x), dim=-1)
        weight = F.normalize(self.last_layer.weight, dim=1)
        if self.last_layer_scale is not None:
            weight = weight * self.last_layer_scale
        return F.linear(x, weight)
