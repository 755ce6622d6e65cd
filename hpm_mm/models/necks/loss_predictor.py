from typing import List, Optional, Union

import torch
import torch.nn as nn
from mmcv.cnn import build_norm_layer
from mmengine.model import BaseModule
from mmpretrain.models.backbones.vision_transformer import \
    TransformerEncoderLayer
from mmpretrain.registry import MODELS

from ..utils import unbind_qkv


@MODELS.register_module()
class HPMLossPredictor(BaseModule):
    """HPM's loss predictor: one score per patch from a token sequence (raster
    order, CLS first): a linear embedding (``in_proj``; False needs the widths
    equal), ``predictor_depth`` Transformer blocks, a norm and a linear layer
    to ``out_dims`` values per patch, averaged (the authors predict
    ``p * p * C`` and average). HPM's decoder holds one over its shared
    embedding; the mask-token frameworks put one on the encoder output.

    Args:
        embed_dim (int): the width of the tokens it reads. Defaults to 768.
        predictor_embed_dim (int): its width. Defaults to 512.
        predictor_depth (int): its Transformer blocks (>= 1). Defaults to 2.
        predictor_num_heads (int): its heads. Defaults to 16.
        mlp_ratio (float): the blocks' MLP ratio. Defaults to 4.
        out_dims (int): values per patch, averaged to the score (the authors:
            p*p*C). Defaults to 1.
        in_proj (bool): whether a linear layer embeds the tokens (False needs
            equal widths). Defaults to True.
        norm_cfg (dict): the norm. Defaults to LN with eps 1e-6.
        init_cfg (dict, optional): the initialisation. Defaults to None.
    """

    def __init__(self,
                 embed_dim: int = 768,
                 predictor_embed_dim: int = 512,
                 predictor_depth: int = 2,
                 predictor_num_heads: int = 16,
                 mlp_ratio: float = 4.,
                 out_dims: int = 1,
                 in_proj: bool = True,
                 norm_cfg: dict = dict(type='LN', eps=1e-6),
                 init_cfg: Optional[Union[List[dict], dict]] = None) -> None:
        super().__init__(init_cfg=init_cfg)
        if predictor_depth < 1:
            raise ValueError(
                f'predictor_depth must be >= 1, got {predictor_depth}.')
        dim = predictor_embed_dim
        if not in_proj and embed_dim != dim:
            raise ValueError(f'in_proj=False with widths {embed_dim} != '
                             f'{dim}. Fix: in_proj=True.')
        self.embed = nn.Linear(embed_dim, dim) if in_proj else nn.Identity()
        self.blocks = nn.ModuleList([
            TransformerEncoderLayer(
                dim,
                predictor_num_heads,
                int(mlp_ratio * dim),
                qkv_bias=True,
                norm_cfg=norm_cfg) for _ in range(predictor_depth)
        ])
        self.norm = build_norm_layer(norm_cfg, dim)[1]
        self.pred = nn.Linear(dim, out_dims)
        unbind_qkv(self)  # hpm_mm's attention: same numbers, faster backward

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Tokens (B, 1 + N, C) -> predicted losses (B, N)."""
        x = self.embed(x)
        for blk in self.blocks:
            x = blk(x)
        return self.pred(self.norm(x))[:, 1:].mean(-1)

    def predict_scores(self, x: torch.Tensor, *args, **kwargs) -> torch.Tensor:
        """The teacher's scoring call on the encoder output (the interface of
        :meth:`HPMPretrainDecoder.predict_scores`); the tokens of a
        mask-token encoder are already in raster order at any grid, so its
        other arguments (``ids_restore``, ``patch_resolution``) are unused."""
        return self(x)
