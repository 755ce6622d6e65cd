import math
from typing import Dict, Optional

import torch
from mmpretrain.registry import MODELS

from .base import BaseMaskGenerator, MaskRatio


@MODELS.register_module()
class HPMMaskGenerator(BaseMaskGenerator):
    """Easy-to-hard mask generation (paper Sec. 3.3, Alg. S1), vectorised.

    At progress ``p = t / T``, ``alpha = alpha_0 + p * (alpha_T - alpha_0)``;
    of the :meth:`num_masked` patches, ``K = floor(alpha * num_masked)`` are
    the highest-scored (``mode='argmin'``: lowest) and the rest uniform at
    random (or laid by ``rest``, a score-free generator with
    :meth:`~BaseMaskGenerator.keys`, e.g. BEiT's block-wise). All on the
    device: the top-K get key 2, the others a key in [0, 1], an argsort
    masks the largest. Per-image ratios (iBOT): ``floor(alpha * counts[i])``
    of image i's ``counts[i]``. ``alpha_0 = alpha_T = 0`` is MAE (no teacher
    is built). Defaults: gamma 0.75, alpha 0 -> 0.5, as the paper.

    Args:
        mask_ratio (float | tuple): gamma, the share of patches masked (a
            range: per image, mask-token encoders). Defaults to 0.75.
        alpha_0 (float): the hard share of the masked patches at the start.
            Defaults to 0., the paper's.
        alpha_T (float): the hard share at the end. Defaults to 0.5, the
            paper's.
        mode (str): 'argmax' (mask the hardest) or 'argmin' (the easiest, Tab.
            4). Defaults to 'argmax'.
        rest (dict, optional): a score-free generator that lays the patches
            that are not hard. Defaults to None: uniform at random.
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
        # a NaN score ranks last: CUDA's topk returns indices out of range
        # for NaN rows (a device assert in the scatter of forward)
        self.nan_score = float('-inf' if mode == 'argmax' else 'inf')
        self.rest = None if rest is None else MODELS.build(
            rest, default_args=dict(mask_ratio=mask_ratio))
        if self.rest is not None and self.rest.uses_scores:
            raise ValueError(f'rest={type(self.rest).__name__} reads scores. '
                             'Fix: a score-free generator.')

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
        return math.floor(
            self.alpha(progress) * self.max_masked(num_patches) + 1e-6)

    def log_vars(self, num_patches: int, progress: float) -> Dict[str, float]:
        """``alpha``, and ``num_hard`` when every image has the same K."""
        out = dict(alpha=self.alpha(progress))
        if not self.varies:
            out['num_hard'] = float(self.num_hard(num_patches, progress))
        return out

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
            self.rest.keys(B, N, device, counts)  # (B, N) in [0, 1]
        if k > 0:
            top = torch.topk(  # (B, K): the K hardest (argmin: easiest)
                scores.detach().float().nan_to_num(self.nan_score),
                k,
                dim=1,
                largest=self.mode == 'argmax').indices
            if counts is None:
                keys.scatter_(1, top, 2.0)  # (B, N): the hard ones above all
            else:  # the first floor(alpha * counts[i]) of row i
                k_i = torch.floor(self.alpha(progress) * counts + 1e-6)
                hard = torch.arange(k, device=keys.device) < k_i.unsqueeze(1)
                keys.scatter_(1, top,
                              torch.where(hard, 2.0, keys.gather(1, top)))
        return self._mask_largest(keys, counts)  # (B, N), 1 = masked

    def check(self, num_patches: int) -> None:
        super().check(num_patches)
        if self.rest is not None:
            counts = torch.tensor([self.max_masked(num_patches)]) \
                if self.varies else None
            self.rest.keys(1, num_patches, None, counts)  # a grid that fits


@MODELS.register_module()
class AttentionMaskGenerator(HPMMaskGenerator):
    """:class:`HPMMaskGenerator`'s rule on the teacher's last-block
    CLS-to-patch attention (mean over heads) instead of its predicted loss
    (SBAM / AttMask): read off the teacher's pass, no predictor run.

    Args:
        mask_ratio (float): gamma. Defaults to 0.75.
        alpha_0 (float): Defaults to 0.
        alpha_T (float): Defaults to 0.5.
        mode (str): ``'argmax'`` (most attended) or ``'argmin'``."""

    score_source = 'cls_attention'
