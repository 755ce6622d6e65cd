from typing import List, Optional, Tuple, Union

import torch
from mmpretrain.models.necks import MAEPretrainDecoder
from mmpretrain.models.utils import resize_pos_embed
from mmpretrain.registry import MODELS

from ..utils import unbind_qkv
from .loss_predictor import HPMLossPredictor


@MODELS.register_module()
class HPMPretrainDecoder(MAEPretrainDecoder):
    """HPM's two decoders: the reconstructor (exactly
    :class:`MAEPretrainDecoder`, whose arguments it takes) and the loss
    predictor (:attr:`predictor`, an :class:`HPMLossPredictor`), a separate
    trunk sharing ``decoder_embed``, ``mask_token`` and ``decoder_pos_embed``,
    as the authors' code; its ``p*p*C`` outputs averaged per patch.
    ``predictor_depth`` (0: none, Tab. 1's plain-MAE rows),
    ``predictor_embed_dim`` (narrower: a projection after the shared embedding)
    and ``predictor_num_heads`` default to the decoder's.

    Args:
        num_patches (int): patches per image. Defaults to 196.
        patch_size (int): the patch side, pixels. Defaults to 16.
        in_chans (int): image channels. Defaults to 3.
        embed_dim (int): the encoder's width. Defaults to 768.
        decoder_embed_dim (int): the decoders' width. Defaults to 512.
        decoder_depth (int): the reconstructor's blocks. Defaults to 8.
        decoder_num_heads (int): its heads. Defaults to 16.
        mlp_ratio (int): the blocks' MLP ratio. Defaults to 4.
        norm_cfg (dict): the norm. Defaults to LN with eps 1e-6.
        predict_feature_dim (int, optional): outputs per patch for feature
            targets. Defaults to None: the pixels.
        predictor_depth (int, optional): the loss predictor's blocks; 0: none.
            Defaults to None: the reconstructor's.
        predictor_embed_dim (int, optional): its width (narrower: a projection
            after the shared embedding). Defaults to None: the decoder's.
        predictor_num_heads (int, optional): its heads. Defaults to None: the
            decoder's.
        init_cfg (dict, optional): the initialisation. Defaults to None.
    """

    def __init__(self,
                 num_patches: int = 196,
                 patch_size: int = 16,
                 in_chans: int = 3,
                 embed_dim: int = 768,
                 decoder_embed_dim: int = 512,
                 decoder_depth: int = 8,
                 decoder_num_heads: int = 16,
                 mlp_ratio: int = 4,
                 norm_cfg: dict = dict(type='LN', eps=1e-6),
                 predict_feature_dim: Optional[int] = None,
                 predictor_depth: Optional[int] = None,
                 predictor_embed_dim: Optional[int] = None,
                 predictor_num_heads: Optional[int] = None,
                 init_cfg: Optional[Union[List[dict], dict]] = None) -> None:
        super().__init__(num_patches, patch_size, in_chans, embed_dim,
                         decoder_embed_dim, decoder_depth, decoder_num_heads,
                         mlp_ratio, norm_cfg, predict_feature_dim, init_cfg)
        unbind_qkv(self)  # hpm_mm's attention: same numbers, faster backward
        depth = decoder_depth if predictor_depth is None else predictor_depth
        dim = predictor_embed_dim or decoder_embed_dim
        self.predictor = HPMLossPredictor(
            embed_dim=decoder_embed_dim,
            predictor_embed_dim=dim,
            predictor_depth=depth,
            predictor_num_heads=predictor_num_heads or decoder_num_heads,
            mlp_ratio=mlp_ratio,
            out_dims=patch_size**2 * in_chans,
            in_proj=dim != decoder_embed_dim,
            norm_cfg=norm_cfg) if depth != 0 else None

    def embed(self,
              x: torch.Tensor,
              ids_restore: torch.Tensor,
              patch_resolution: Optional[tuple] = None) -> torch.Tensor:
        """The shared part: embed, add mask tokens, restore the order, add the
        position embedding (interpolated to ``patch_resolution`` where it is
        not the square grid of ``num_patches``: the low-resolution teacher).
        Returns (B, 1 + N, C_dec)."""
        x = self.decoder_embed(x)  # (B, 1 + visible, C_dec)
        B, L, C = x.shape
        mask_tokens = self.mask_token.expand(B, ids_restore.shape[1] + 1 - L,
                                             -1)
        x_ = torch.cat([x[:, 1:], mask_tokens], dim=1)  # (B, N, C_dec)
        # raster order: visible and mask tokens at their patches
        x_ = torch.gather(x_, 1, ids_restore.unsqueeze(-1).expand(-1, -1, C))
        pos_embed = self.decoder_pos_embed
        if patch_resolution is not None:
            side = int(self.num_patches**.5)
            pos_embed = resize_pos_embed(pos_embed, (side, side),
                                         tuple(patch_resolution), 'bicubic', 1)
        return torch.cat([x[:, :1], x_], dim=1) + pos_embed

    def reconstruct(self, x: torch.Tensor) -> torch.Tensor:
        """Reconstructor trunk: (B, 1 + N, C_dec) -> (B, N, p*p*C)."""
        for blk in self.decoder_blocks:
            x = blk(x)
        return self.decoder_pred(self.decoder_norm(x))[:, 1:]

    def predict_scores(
            self,
            x: torch.Tensor,
            ids_restore: torch.Tensor,
            patch_resolution: Optional[tuple] = None) -> torch.Tensor:
        """The loss-predictor path alone (the teacher's scoring pass), on
        :meth:`embed`'s arguments (``ids_restore`` from :class:`HPMViT`):
        (B, N) predicted per-patch losses."""
        return self.predictor(self.embed(x, ids_restore, patch_resolution))

    def forward(
            self, x: torch.Tensor,
            ids_restore: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """Both trunks on the encoder output (B, 1 + visible, C) with
        ``ids_restore`` (B, N): ``(pred (B, N, p*p*C), scores (B, N) or
        None)``."""
        x = self.embed(x, ids_restore)
        scores = None if self.predictor is None else self.predictor(x)
        return self.reconstruct(x), scores
