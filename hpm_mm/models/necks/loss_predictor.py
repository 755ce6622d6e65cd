from typing import List, Optional, Tuple, Union

import torch
import torch.nn as nn
from mmcv.cnn import build_norm_layer
from mmengine.model import BaseModule
from mmpretrain.models.backbones.vision_transformer import \
    TransformerEncoderLayer
from mmpretrain.registry import MODELS


@MODELS.register_module()
class HPMLossPredictor(BaseModule):
    """HPM's loss predictor for encoders that keep every token (SimMIM,
    BEiT, iBOT: masked patches enter as a mask token).

    The encoder output already holds a token per patch, in raster order and
    with its position, so the predictor is the trunk of HPM's decoder
    without the mask-token and position embedding: a linear embedding,
    ``depth`` Transformer blocks, a norm and a linear layer to one score
    per patch. The student's predictor sees the masked image; the EMA
    teacher's copy scores the full one (:meth:`predict_scores`, the
    interface of :meth:`HPMPretrainDecoder.predict_scores`).

    Args:
        embed_dim (int): Encoder width. Defaults to 768.
        predictor_embed_dim (int): Width. Defaults to 512.
        predictor_depth (int): Blocks. Defaults to 2.
        predictor_num_heads (int): Heads. Defaults to 16.
        mlp_ratio (float): Defaults to 4.
        norm_cfg (dict): Defaults to ``dict(type='LN', eps=1e-6)``.
    """

    def __init__(self,
                 embed_dim: int = 768,
                 predictor_embed_dim: int = 512,
                 predictor_depth: int = 2,
                 predictor_num_heads: int = 16,
                 mlp_ratio: float = 4.,
                 norm_cfg: dict = dict(type='LN', eps=1e-6),
                 init_cfg: Optional[Union[List[dict], dict]] = None) -> None:
        super().__init__(init_cfg=init_cfg)
        if predictor_depth < 1:
            raise ValueError(
                f'predictor_depth must be >= 1, got {predictor_depth}.')
        dim = predictor_embed_dim
        self.embed = nn.Linear(embed_dim, dim)
        self.blocks = nn.ModuleList([
            TransformerEncoderLayer(
                dim, predictor_num_heads, int(mlp_ratio * dim),
                qkv_bias=True, norm_cfg=norm_cfg)
            for _ in range(predictor_depth)
        ])
        self.norm = build_norm_layer(norm_cfg, dim)[1]
        self.pred = nn.Linear(dim, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Encoder output (B, 1 + N, C) -> predicted losses (B, N)."""
        x = self.embed(x)
        for blk in self.blocks:
            x = blk(x)
        return self.pred(self.norm(x))[:, 1:, 0]

    def predict_scores(self,
                       x: torch.Tensor,
                       ids_restore: Optional[torch.Tensor] = None,
                       patch_resolution: Optional[Tuple[int, int]] = None
                       ) -> torch.Tensor:
        """The teacher's scoring call; the tokens are already in raster
        order at any grid, so the other arguments are unused."""
        return self(x)
