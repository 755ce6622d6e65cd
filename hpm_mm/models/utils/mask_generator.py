import math
from typing import Optional

import torch
import torch.nn as nn
from mmpretrain.registry import MODELS


@MODELS.register_module()
class HPMMaskGenerator(nn.Module):
    """Easy-to-hard mask generation (paper Sec. 3.3, Alg. S1), vectorised.

    At training progress ``p = t / T`` in [0, 1],
    ``alpha = alpha_0 + p * (alpha_T - alpha_0)``. Of the
    ``num_mask = round(gamma * N)`` masked patches, ``K = floor(alpha *
    num_mask)`` are those with the highest teacher scores (``mode='argmax'``;
    the lowest with ``'argmin'``) and the other ``num_mask - K`` are drawn
    uniformly from the remaining patches. Everything stays on the device: the
    top-K patches get key 2 and the rest a uniform key in [0, 1); an argsort
    then masks the largest keys.

    Special cases: ``alpha_0 = alpha_T = 0`` is MAE's random masking (and no
    teacher is needed, see :attr:`uses_scores`); ``alpha_0 > alpha_T`` is
    hard-to-easy.

    Args:
        mask_ratio (float): gamma, the fraction of patches masked.
            Defaults to 0.75.
        alpha_0 (float): alpha at the start of training. Defaults to 0.
        alpha_T (float): alpha at the end of training. Defaults to 0.5.
        mode (str): ``'argmax'`` masks the hardest predicted patches,
            ``'argmin'`` the easiest. Defaults to ``'argmax'``.

    Example:
        >>> import torch
        >>> gen = HPMMaskGenerator(mask_ratio=0.75, alpha_0=0, alpha_T=1)
        >>> mask = gen(torch.rand(2, 16), progress=1.0)
        >>> mask.sum(1).tolist()
        [12.0, 12.0]
    """

    def __init__(self,
                 mask_ratio: float = 0.75,
                 alpha_0: float = 0.,
                 alpha_T: float = 0.5,
                 mode: str = 'argmax') -> None:
        super().__init__()
        if not 0 < mask_ratio < 1:
            raise ValueError(f'mask_ratio must be in (0, 1), got {mask_ratio}.')
        for name, a in (('alpha_0', alpha_0), ('alpha_T', alpha_T)):
            if not 0 <= a <= 1:
                raise ValueError(f'{name} must be in [0, 1], got {a}.')
        if mode not in ('argmax', 'argmin'):
            raise ValueError(
                f"mode must be 'argmax' or 'argmin', got {mode!r}.")
        self.mask_ratio = mask_ratio
        self.alpha_0 = alpha_0
        self.alpha_T = alpha_T
        self.mode = mode

    @property
    def uses_scores(self) -> bool:
        """Whether any step of training masks by teacher scores."""
        return self.alpha_0 > 0 or self.alpha_T > 0

    def alpha(self, progress: float) -> float:
        """alpha_t at ``progress`` t/T (clamped to [0, 1])."""
        p = min(max(float(progress), 0.), 1.)
        return self.alpha_0 + p * (self.alpha_T - self.alpha_0)

    def num_masked(self, num_patches: int) -> int:
        """round(gamma * N)."""
        return int(round(self.mask_ratio * num_patches))

    def num_hard(self, num_patches: int, progress: float) -> int:
        """K = floor(alpha_t * round(gamma * N)) patches chosen by score."""
        return int(
            math.floor(
                self.alpha(progress) * self.num_masked(num_patches) + 1e-6))

    def forward(self,
                scores: Optional[torch.Tensor],
                progress: float,
                num_patches: Optional[int] = None,
                batch_size: Optional[int] = None,
                device: Optional[torch.device] = None) -> torch.Tensor:
        """Draw a mask.

        Args:
            scores (torch.Tensor, optional): (B, N) teacher-predicted losses.
                May be None when :meth:`num_hard` is 0; then give
                ``num_patches``, ``batch_size`` and ``device``.
            progress (float): t/T in [0, 1].

        Returns:
            torch.Tensor: (B, N) float mask, 1 = masked, exactly
            round(gamma * N) ones per row.
        """
        if scores is not None:
            batch_size, num_patches = scores.shape
            device = scores.device
        k = self.num_hard(num_patches, progress)
        keys = torch.rand(batch_size, num_patches, device=device)
        if k > 0:
            if scores is None:
                raise ValueError(
                    f'alpha={self.alpha(progress):.3f} masks K={k} patches by '
                    'score, but no teacher scores were given.')
            top = torch.topk(
                scores.detach().float(), k, dim=1,
                largest=self.mode == 'argmax').indices
            keys.scatter_(1, top, 2.0)
        num_visible = num_patches - self.num_masked(num_patches)
        ids_masked = torch.argsort(keys, dim=1)[:, num_visible:]
        return torch.zeros_like(keys).scatter_(1, ids_masked, 1.0)

    def extra_repr(self) -> str:
        return (f'mask_ratio={self.mask_ratio}, alpha_0={self.alpha_0}, '
                f'alpha_T={self.alpha_T}, mode={self.mode!r}')
