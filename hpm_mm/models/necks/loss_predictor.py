from typing import List, Optional, Tuple, Union

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
    """HPM's loss predictor: per-patch predicted reconstruction losses from a
    token sequence in raster order, CLS token first.

    The one loss-predictor module of hpm_mm. :class:`HPMPretrainDecoder`
    holds one over its shared embedding (the encoder output with mask tokens
    and the decoder's position embedding: the authors' second decoder
    trunk); the frameworks whose encoder keeps every token (SimMIM, BEiT,
    iBOT: masked patches enter as a mask token) put one straight on the
    encoder output. A linear embedding (``in_proj``; identity without it),
    ``predictor_depth`` Transformer blocks, a norm, a linear layer to
    ``out_dims`` values per patch, averaged into one score (the authors'
    decoder predicts ``p * p * C`` values per patch and averages them).

    Args:
        embed_dim (int): Width of the tokens it reads. Defaults to 768.
        predictor_embed_dim (int): Width. Defaults to 512.
        predictor_depth (int): Blocks. Defaults to 2.
        predictor_num_heads (int): Heads. Defaults to 16.
        mlp_ratio (float): Defaults to 4.
        out_dims (int): Values per patch before the average. Defaults to 1.
        in_proj (bool): A linear embedding from ``embed_dim`` to
            ``predictor_embed_dim``; False needs the two equal (HPM's decoder
            when the predictor is as wide as the reconstructor). Defaults to
            True.
        norm_cfg (dict): Defaults to ``dict(type='LN', eps=1e-6)``.

    Example:
        >>> import torch
        >>> from hpm_mm.models import HPMLossPredictor
        >>> predictor = HPMLossPredictor(embed_dim=32, predictor_embed_dim=16,
        ...     predictor_depth=1, predictor_num_heads=2)
        >>> tuple(predictor(torch.rand(2, 17, 32)).shape)
        (2, 16)
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
            raise ValueError(
                f'in_proj=False reads {embed_dim}-d tokens into a {dim}-d '
                'predictor: set in_proj=True or make the widths equal.')
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

    def predict_scores(
            self,
            x: torch.Tensor,
            ids_restore: Optional[torch.Tensor] = None,
            patch_resolution: Optional[Tuple[int,
                                             int]] = None) -> torch.Tensor:
        """The teacher's scoring call on the encoder output (the interface of
        :meth:`HPMPretrainDecoder.predict_scores`); the tokens of a
        mask-token encoder are already in raster order at any grid, so the
        other arguments are unused."""
        return self(x)
