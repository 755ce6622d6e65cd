from typing import Optional, Tuple

import torch
from mmpretrain.models.selfsup.mae import MAEViT
from mmpretrain.models.utils import resize_pos_embed
from mmpretrain.registry import MODELS

from ..utils import unbind_qkv


@MODELS.register_module()
class HPMViT(MAEViT):
    """MAE's ViT (:class:`mmpretrain.models.MAEViT`) whose mask is chosen
    outside it (HPM's mask generator): ``mask`` (B, N), 1 = masked (removed),
    the same count per row. ``mask_ratio`` is unused; ``out_type`` defaults to
    ``'raw'`` (no unused parameters in pretraining)."""

    #: Whether masked patches are dropped (so every image needs the same
    #: number masked) rather than kept as a mask token.
    drops_masked = True

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        unbind_qkv(self)  # hpm_mm's attention: same numbers, faster backward

    def forward(self,
                x: torch.Tensor,
                mask: Optional[torch.Tensor] = None,
                num_visible: Optional[int] = None) -> tuple:
        """Encode the visible patches (``mask``, 1 = masked; ``num_visible``
        saves reading it back), or, without a mask, the plain ViT forward.
        Images of another size than ``img_size`` get an interpolated position
        embedding (the low-resolution teacher). Returns ``(latent (B, 1 +
        visible, C), ids_restore (B, N))`` (MAE's convention), else the ViT's
        tuple."""
        if mask is None:
            return super(MAEViT, self).forward(x)
        tokens, pos_embed = self.embed_patches(x, mask)  # (B, N, C)
        tokens = tokens + pos_embed[:, 1:, :]
        B, N, C = tokens.shape
        if num_visible is None:
            num_visible = int(N - mask[0].sum().item())
        # stable sort: visible patches (0) first, each group in raster order
        ids_shuffle = torch.argsort(mask.to(torch.uint8), dim=1, stable=True)
        ids_restore = torch.argsort(ids_shuffle, dim=1)  # (B, N)
        ids_keep = ids_shuffle[:, :num_visible]  # (B, visible)
        # (B, visible, C): the visible patches, in raster order
        tokens = torch.gather(tokens, 1,
                              ids_keep.unsqueeze(-1).expand(-1, -1, C))
        return self.encode(tokens, pos_embed), ids_restore

    def embed_patches(self, x: torch.Tensor,
                      mask: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """Patch tokens (B, N, C) and the position embedding interpolated to
        the input's grid (1, 1 + N, C); checks the mask's shape."""
        tokens, grid = self.patch_embed(x)
        pos_embed = resize_pos_embed(self.pos_embed, self.patch_resolution,
                                     grid, self.interpolate_mode, 1)
        if mask.shape != tokens.shape[:2]:
            raise ValueError(
                f'mask must be {tuple(tokens.shape[:2])} for this input, got '
                f'{tuple(mask.shape)}. Fix: images of {self.img_size[0]}x'
                f'{self.img_size[1]}, the size the model was built for.')
        return tokens, pos_embed

    def encode(self, tokens: torch.Tensor,
               pos_embed: torch.Tensor) -> torch.Tensor:
        """Prepend the cls token, run the blocks and the final norm."""
        cls_token = (self.cls_token + pos_embed[:, :1, :]).expand(
            tokens.shape[0], -1, -1)
        tokens = self.drop_after_pos(torch.cat((cls_token, tokens), dim=1))
        for layer in self.layers:
            tokens = layer(tokens)
        return self.norm1(tokens)


@MODELS.register_module()
class MaskTokenViT(HPMViT):
    """:class:`HPMViT` for the frameworks that keep masked patches as a learnt
    ``mask_token`` (SimMIM, BEiT, iBOT): it replaces them before the position
    embedding and every token runs through the blocks; the other parameters
    are :class:`HPMViT`'s, so every framework's encoder converts alike."""

    drops_masked = False

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.mask_token = torch.nn.Parameter(
            torch.zeros(1, 1, self.embed_dims))

    def init_weights(self) -> None:
        super().init_weights()
        torch.nn.init.trunc_normal_(self.mask_token, std=.02)

    def forward(self,
                x: torch.Tensor,
                mask: Optional[torch.Tensor] = None,
                num_visible: Optional[int] = None):
        """Encode every patch, the masked ones as ``mask_token``: ``(latent (B,
        1 + N, C), None)``; without a mask the ViT's tuple."""
        if mask is None:
            return super(MAEViT, self).forward(x)
        tokens, pos_embed = self.embed_patches(x, mask)
        w = mask.to(tokens.dtype).unsqueeze(-1)
        tokens = tokens * (1 - w) + self.mask_token.to(tokens.dtype) * w
        return self.encode(tokens + pos_embed[:, 1:, :], pos_embed), None
