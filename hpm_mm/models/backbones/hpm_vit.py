from typing import Optional, Tuple, Union

import torch
from mmpretrain.models.selfsup.mae import MAEViT
from mmpretrain.models.utils import resize_pos_embed
from mmpretrain.registry import MODELS

from ..utils import unbind_qkv


@MODELS.register_module()
class HPMViT(MAEViT):
    """MAE ViT whose mask is chosen outside the backbone.

    HPM picks the mask from the teacher's predicted losses, so unlike
    :class:`mmpretrain.models.MAEViT` this backbone never draws a mask itself.
    Mask convention (as in MAE): ``mask`` is (B, N), **1 = masked (removed),
    0 = visible**, with the same number of visible patches in every row.

    Args:
        All arguments of :class:`mmpretrain.models.MAEViT`, except that
        ``mask_ratio`` is unused (the mask generator owns it) and ``out_type``
        defaults to ``'raw'`` so pretraining builds no unused parameters.

    Example:
        >>> import torch
        >>> from hpm_mm.models import HPMViT
        >>> vit = HPMViT(arch=dict(embed_dims=32, num_layers=1, num_heads=2,
        ...              feedforward_channels=64), img_size=32, patch_size=8)
        >>> vit.init_weights()
        >>> mask = torch.zeros(2, 16)
        >>> mask[:, :12] = 1
        >>> x, ids_restore = vit(torch.rand(2, 3, 32, 32), mask, 4)
        >>> tuple(x.shape), tuple(ids_restore.shape)
        ((2, 5, 32), (2, 16))
    """

    #: Whether masked patches are dropped (so every image needs the same
    #: number masked) rather than kept as a mask token.
    drops_masked = True

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        unbind_qkv(self)  # hpm_mm's attention: same numbers, faster backward

    def forward(
        self,
        x: torch.Tensor,
        mask: Optional[torch.Tensor] = None,
        num_visible: Optional[int] = None,
    ) -> Union[Tuple[torch.Tensor, ...], Tuple[torch.Tensor, torch.Tensor]]:
        """Encode the visible patches, or the whole image.

        Args:
            x (torch.Tensor): Images, (B, C, H, W). With a mask, H and W may
                differ from ``img_size`` (multiples of the patch size): the
                position embedding is then interpolated to the patch grid,
                as for HPM's low-resolution teacher.
            mask (torch.Tensor, optional): (B, N), 1 = masked. ``None`` runs
                the plain ViT forward (feature extraction, ``out_type``).
            num_visible (int, optional): Visible patches per image. Pass it
                when known (the mask generator knows it) to avoid reading the
                mask back to the host. Defaults to counting row 0 of ``mask``.

        Returns:
            With ``mask``: ``(latent, ids_restore)`` where latent is
            (B, 1 + num_visible, C) (cls token first, after the final norm)
            and ids_restore (B, N) restores raster order for the decoder
            (MAE's convention: visible tokens first, then mask tokens).
            Without ``mask``: the tuple of :class:`VisionTransformer`.
        """
        if mask is None:
            return super(MAEViT, self).forward(x)
        tokens, pos_embed = self.embed_patches(x, mask)
        B, N, C = tokens.shape
        if num_visible is None:
            num_visible = int(N - mask[0].sum().item())
        # stable sort: visible patches (0) first, each group in raster order
        ids_shuffle = torch.argsort(mask.to(torch.uint8), dim=1, stable=True)
        ids_restore = torch.argsort(ids_shuffle, dim=1)
        ids_keep = ids_shuffle[:, :num_visible]
        tokens = torch.gather(tokens, 1,
                              ids_keep.unsqueeze(-1).expand(-1, -1, C))
        return self.encode(tokens, pos_embed), ids_restore

    def embed_patches(
        self,
        x: torch.Tensor,
        mask: torch.Tensor,
        mask_token: Optional[torch.Tensor] = None
    ) -> Tuple[torch.Tensor, torch.Tensor]:
        """Patch tokens plus position embedding (interpolated to the input's
        grid), (B, N, C), and that position embedding; checks the mask.
        With ``mask_token``, masked patches are replaced by it first."""
        B = x.shape[0]
        tokens, grid = self.patch_embed(x)
        pos_embed = resize_pos_embed(self.pos_embed, self.patch_resolution,
                                     grid, self.interpolate_mode, 1)
        N = tokens.shape[1]
        if mask.shape != (B, N):
            built = tuple(r * s for r, s in zip(
                self.patch_resolution, self.patch_embed.projection.stride))
            raise ValueError(
                f'mask must be (B, N) = ({B}, {N}) for this '
                f'{x.shape[-2]}x{x.shape[-1]} input, got '
                f'{tuple(mask.shape)}. The model was built for '
                f'{built[0]}x{built[1]} images: resize/crop to that size in '
                'the train pipeline, or set backbone.img_size and '
                'neck.num_patches to match the data.')
        if mask_token is not None:
            w = mask.to(tokens.dtype).unsqueeze(-1)
            tokens = tokens * (1 - w) + mask_token.to(tokens.dtype) * w
        return tokens + pos_embed[:, 1:, :], pos_embed

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
    """The same ViT for frameworks that keep masked patches as a learnt
    mask token (SimMIM, BEiT, iBOT) instead of dropping them.

    Masked patch tokens are replaced by ``mask_token`` before the position
    embedding is added (as BEiT/SimMIM), and every token runs through the
    blocks. Apart from ``mask_token`` the parameters are
    :class:`HPMViT`'s (absolute sin-cos position embedding, no layer scale,
    no relative position bias), so every framework's encoder goes through
    the same converters and fine-tune configs.

    Args:
        All arguments of :class:`HPMViT`.

    Example:
        >>> import torch
        >>> from hpm_mm.models import MaskTokenViT
        >>> vit = MaskTokenViT(arch=dict(embed_dims=32, num_layers=1,
        ...     num_heads=2, feedforward_channels=64), img_size=32,
        ...     patch_size=8)
        >>> vit.init_weights()
        >>> x, _ = vit(torch.rand(2, 3, 32, 32), torch.ones(2, 16))
        >>> tuple(x.shape)
        (2, 17, 32)
    """

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
        """Encode every patch, the masked ones as ``mask_token``.

        Args:
            x (torch.Tensor): Images, (B, C, H, W).
            mask (torch.Tensor, optional): (B, N), 1 = masked; None runs the
                plain ViT forward (feature extraction, ``out_type``).
            num_visible (int, optional): Unused (every token is kept).

        Returns:
            With ``mask``: ``(latent, None)``, latent (B, 1 + N, C) in raster
            order after the final norm. Without: :class:`VisionTransformer`'s
            tuple.
        """
        if mask is None:
            return super(MAEViT, self).forward(x)
        tokens, pos_embed = self.embed_patches(x, mask, self.mask_token)
        return self.encode(tokens, pos_embed), None
