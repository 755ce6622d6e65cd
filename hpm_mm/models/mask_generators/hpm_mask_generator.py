import math
from typing import Dict, Optional

import torch
from mmpretrain.registry import MODELS

from .base import BaseMaskGenerator, MaskRatio


@MODELS.register_module()
class HPMMaskGenerator(BaseMaskGenerator):
    """Easy-to-hard mask generation (paper Sec. 3.3, Alg. S1), vectorised.

    At training progress ``p = t / T`` in [0, 1],
    ``alpha = alpha_0 + p * (alpha_T - alpha_0)``. Of the
    :meth:`num_masked` masked patches, ``K = floor(alpha * num_masked)`` are
    those with the highest scores (``mode='argmax'``; the lowest with
    ``'argmin'``) and the other ``num_masked - K`` are drawn uniformly from
    the remaining patches (or by the ``rest`` generator, e.g. BEiT's
    block-wise masking). Everything stays on the device: the top-K patches
    get key 2 and the rest a key in [0, 1] (uniform, or ``rest.keys``); an
    argsort then masks the largest keys.

    With per-image ratios (``mask_ratio=[(low, high), ...]``, iBOT) image
    i has ``counts[i]`` masked patches (:meth:`counts`), of which
    ``floor(alpha * counts[i])`` are its hardest; the rest generator lays
    the others for that count.

    The scores are the EMA teacher's predicted losses
    (``score_source = 'predicted_loss'``). Special cases:
    ``alpha_0 = alpha_T = 0`` is MAE's random masking (no scores needed, so
    no teacher is built); ``alpha_0 > alpha_T`` is hard-to-easy.

    Args:
        mask_ratio (float | list): gamma, the fraction of patches masked,
            or per-image ranges (see :class:`BaseMaskGenerator`).
            Defaults to 0.75.
        alpha_0 (float): alpha at the start of training. Defaults to 0.
        alpha_T (float): alpha at the end of training. Defaults to 0.5.
        mode (str): ``'argmax'`` masks the highest-scored patches,
            ``'argmin'`` the lowest. Defaults to ``'argmax'``.
        rest (dict, optional): A score-free mask generator (one with
            :meth:`~BaseMaskGenerator.keys`, e.g.
            ``dict(type='BlockwiseMaskGenerator')``) that picks the
            ``num_masked - K`` non-hard patches. Defaults to None: uniform
            at random, as in the paper.

    Example:
        >>> import torch
        >>> gen = HPMMaskGenerator(mask_ratio=0.75, alpha_0=0, alpha_T=1)
        >>> mask = gen(torch.rand(2, 16), progress=1.0)
        >>> mask.sum(1).tolist()
        [12.0, 12.0]
    """

    score_source = 'predicted_loss'

    def __init__(self,
                 mask_ratio: MaskRatio = 0.75,
                 alpha_0: float = 0.,
                 alpha_T: float = 0.5,
                 mode: str = 'argmax',
                 rest: Optional[dict] = None) -> None:
        super().__init__(mask_ratio)
        for name, a in (('alpha_0', alpha_0), ('alpha_T', alpha_T)):
            if not 0 <= a <= 1:
                raise ValueError(f'{name} must be in [0, 1], got {a}.')
        if mode not in ('argmax', 'argmin'):
            raise ValueError(
                f"mode must be 'argmax' or 'argmin', got {mode!r}.")
        self.alpha_0 = alpha_0
        self.alpha_T = alpha_T
        self.mode = mode
        self.rest = None
        if rest is not None:
            self.rest = MODELS.build(
                rest, default_args=dict(mask_ratio=mask_ratio))
            if self.rest.uses_scores:
                raise ValueError(f'rest= must be a score-free generator, got '
                                 f'{type(self.rest).__name__}.')

    @property
    def uses_scores(self) -> bool:
        """Whether any step of training masks by score."""
        return self.alpha_0 > 0 or self.alpha_T > 0

    def needs_scores(self, num_patches: int, progress: float) -> bool:
        return self.num_hard(num_patches, progress) > 0

    def alpha(self, progress: float) -> float:
        """alpha_t at ``progress`` t/T (clamped to [0, 1])."""
        p = min(max(float(progress), 0.), 1.)
        return self.alpha_0 + p * (self.alpha_T - self.alpha_0)

    def num_hard(self, num_patches: int, progress: float) -> int:
        """K = floor(alpha_t * num_masked) patches chosen by score (with
        per-image ratios: K of the image with the most masked patches)."""
        return int(
            math.floor(
                self.alpha(progress) * self.max_masked(num_patches) + 1e-6))

    def log_vars(self, num_patches: int, progress: float) -> Dict[str, float]:
        """``alpha``, and ``num_hard`` when every image has the same K."""
        if self.varies:
            return dict(alpha=self.alpha(progress))
        return dict(
            alpha=self.alpha(progress),
            num_hard=float(self.num_hard(num_patches, progress)))

    def forward(self,
                scores,
                progress,
                num_patches=None,
                batch_size=None,
                device=None) -> torch.Tensor:
        B, N, device = self._shape(scores, num_patches, batch_size, device)
        counts = self.counts(B, N, device)
        k = self.num_hard(N, progress)
        keys = torch.rand(B, N, device=device) if self.rest is None else \
            self.rest.keys(B, N, device, counts)
        if k > 0:
            if scores is None:
                raise ValueError(
                    f'alpha={self.alpha(progress):.3f} masks K={k} patches by '
                    f'score, but no {self.score_source} scores were given.')
            top = torch.topk(
                scores.detach().float(),
                k,
                dim=1,
                largest=self.mode == 'argmax').indices
            if counts is None:
                keys.scatter_(1, top, 2.0)
            else:  # the first floor(alpha * counts[i]) of row i
                k_i = torch.floor(self.alpha(progress) * counts + 1e-6)
                hard = torch.arange(k, device=keys.device) < k_i.unsqueeze(1)
                keys.scatter_(1, top,
                              torch.where(hard, 2.0, keys.gather(1, top)))
        return self._mask_largest(keys, counts)

    def extra_repr(self) -> str:
        return (f'mask_ratio={self.mask_ratio!r}, alpha_0={self.alpha_0}, '
                f'alpha_T={self.alpha_T}, mode={self.mode!r}')

    def check(self, num_patches: int) -> None:
        super().check(num_patches)
        if self.rest is not None:
            counts = torch.tensor([self.max_masked(num_patches)]) \
                if self.varies else None
            self.rest.keys(1, num_patches, None, counts)  # a grid that fits


@MODELS.register_module()
class AttentionMaskGenerator(HPMMaskGenerator):
    """Mask the patches the teacher's CLS token attends to most, mixed with
    random ones on HPM's easy-to-hard schedule (SBAM / AttMask style).

    The same rule as :class:`HPMMaskGenerator`, with the EMA teacher's
    last-block CLS-to-patch attention (mean over heads) as the score instead
    of its predicted loss. The teacher computes it during its full-image
    pass, so no extra forward pass runs (and its loss predictor does not
    run at all).

    Args:
        mask_ratio (float): gamma. Defaults to 0.75.
        alpha_0 (float): Defaults to 0.
        alpha_T (float): Defaults to 0.5.
        mode (str): ``'argmax'`` masks the most attended patches (AttMask's
            hard variant), ``'argmin'`` the least. Defaults to ``'argmax'``.
    """

    score_source = 'cls_attention'
