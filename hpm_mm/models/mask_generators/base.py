import math
from typing import Dict, Optional, Sequence, Tuple, Union

import torch
import torch.nn as nn
from mmpretrain.registry import MODELS

#: The score source of a generator that computes its scores from the images
#: itself (:meth:`BaseMaskGenerator.image_scores`); no teacher is built for
#: it.
IMAGE_SCORES = 'image'

#: A fixed gamma, or per-image ranges ``[(low, high), ...]`` (see
#: :class:`BaseMaskGenerator`).
MaskRatio = Union[float, Sequence[Tuple[float, float]]]


@MODELS.register_module()
class BaseMaskGenerator(nn.Module):
    """The mask-generator contract (docs/extending.md, with a worked example).

    At progress ``p = t / T`` a generator hides patches of each image:
    :meth:`forward` gives a (B, N) float mask, **1 = masked**, on the device,
    with no read back to the host; :meth:`num_masked` ones per row
    (per-image ranges, iBOT: ``counts[i]`` in row i). :attr:`score_source`
    names the scores it reads (None; a teacher source of
    :data:`~hpm_mm.models.teachers.TEACHER_SCORES`; ``'image'``: its own
    :meth:`image_scores`); :meth:`needs_scores` says when; :meth:`log_vars`
    gives scalars to log (``alpha``, ``num_hard``).

    Args:
        mask_ratio (float | list): gamma: ``N - int(N * (1 - gamma))``
            patches masked (as the authors and mmpretrain's MAE count), or
            per-image ranges ``[(low, high), ...]`` (each image picks a range,
            then gamma in it: iBOT's ``[(0, 0), (0.1, 0.5)]``). Defaults to
            0.75."""

    #: None, a teacher score source (registered in ``TEACHER_SCORES``), or
    #: :data:`IMAGE_SCORES` (:meth:`image_scores`).
    score_source: Optional[str] = None

    def __init__(self, mask_ratio: MaskRatio = 0.75) -> None:
        super().__init__()
        self.ratio_ranges = self._ranges(mask_ratio)
        self.mask_ratio = mask_ratio
        # on the model's device, so drawing counts copies nothing per step
        self.register_buffer(
            'ratio_table',
            None
            if self.ratio_ranges is None else torch.tensor(self.ratio_ranges),
            persistent=False)

    @staticmethod
    def _ranges(mask_ratio) -> Optional[Tuple[Tuple[float, float], ...]]:
        """None for a fixed ratio; the checked per-image ranges else."""
        if isinstance(mask_ratio, (int, float)):
            if not 0 < mask_ratio < 1:
                raise ValueError(
                    f'mask_ratio must be in (0, 1), got {mask_ratio}.')
            return None
        try:
            ranges = tuple((float(lo), float(hi)) for lo, hi in mask_ratio)
        except (TypeError, ValueError):
            ranges = ()
        if not ranges or not all(0 <= lo <= hi < 1 for lo, hi in ranges):
            raise ValueError(
                f'mask_ratio={mask_ratio!r}: use a float in (0, 1) or ranges '
                '[(low, high), ...] with 0 <= low <= high < 1.')
        return ranges

    @property
    def varies(self) -> bool:
        """Whether the number of masked patches differs between images."""
        return self.ratio_ranges is not None

    @property
    def uses_scores(self) -> bool:
        """Whether :meth:`forward` reads scores at any progress."""
        return self.score_source is not None

    def needs_scores(self, num_patches: int, progress: float) -> bool:
        """Whether :meth:`forward` reads scores at this progress."""
        return self.uses_scores

    def num_masked(self, num_patches: int) -> int:
        """Masked patches per image: ``N - int(N * (1 - gamma))`` (a fixed
        ratio; per-image ratios: :meth:`counts`)."""
        return num_patches - int(num_patches * (1 - self.mask_ratio))

    def max_masked(self, num_patches: int) -> int:
        """The most patches any image has masked."""
        if not self.varies:
            return self.num_masked(num_patches)
        hi = max(hi for _, hi in self.ratio_ranges)
        return num_patches - math.floor(num_patches * (1 - hi) + 1e-6)

    def counts(
            self,
            batch_size: int,
            num_patches: int,
            device: Optional[torch.device] = None) -> Optional[torch.Tensor]:
        """(B,) masked patches of each image, drawn on the device from the
        per-image ranges; None for a fixed ratio (every image
        :meth:`num_masked`)."""
        if not self.varies:
            return None
        ranges = self.ratio_table.to(device)
        pick = torch.randint(len(ranges), (batch_size, ), device=device)
        lo, hi = ranges[pick].unbind(1)
        ratio = lo + torch.rand(batch_size, device=device) * (hi - lo)
        return num_patches - torch.floor(num_patches *
                                         (1 - ratio) + 1e-6).long()

    def check(self, num_patches: int) -> None:
        """Raise when this generator would mask no patch or every patch of
        an N-patch image (called by the algorithm at build time)."""
        k = self.max_masked(num_patches)
        if not 0 < k < num_patches:
            raise ValueError(
                f'mask_ratio={self.mask_ratio!r} masks {k} of {num_patches} '
                f'patches. Fix: a mask_ratio in [{1 / num_patches:.3g}, '
                f'{1 - 1 / num_patches:.3g}].')

    def log_vars(self, num_patches: int, progress: float) -> Dict[str, float]:
        """Scalars to log at this progress. Defaults to none."""
        return {}

    def image_scores(self, inputs: torch.Tensor,
                     patch_resolution: Tuple[int, int]) -> torch.Tensor:
        """Per-patch scores of the images themselves
        (``score_source='image'``), (B, h * w) in raster order, higher masked
        first; called under ``no_grad`` with the normalised images and the (h,
        w) patch grid."""
        raise NotImplementedError(
            f"{type(self).__name__}: score_source='image' needs image_scores.")

    def forward(self,
                scores: Optional[torch.Tensor],
                progress: float,
                num_patches: Optional[int] = None,
                batch_size: Optional[int] = None,
                device: Optional[torch.device] = None) -> torch.Tensor:
        """A (B, N) mask, 1 = masked, at ``progress`` t/T, from ``scores`` (B,
        N) or, without them, of ``num_patches`` x ``batch_size`` on ``device``.
        The default serves score-free generators: the largest of their
        :meth:`keys`.
        """
        B, N, device = self._shape(scores, num_patches, batch_size, device)
        counts = self.counts(B, N, device)
        return self._mask_largest(self.keys(B, N, device, counts), counts)

    @staticmethod
    def _shape(scores, num_patches, batch_size, device):
        """(B, N, device) of the scores when given."""
        given = batch_size, num_patches, device
        return given if scores is None else (*scores.shape, scores.device)

    def keys(self,
             batch_size: int,
             num_patches: int,
             device: Optional[torch.device] = None,
             counts: Optional[torch.Tensor] = None) -> torch.Tensor:
        """(B, N) masking priorities in [0, 1]: the :meth:`num_masked` (or
        ``counts[i]``, see :meth:`counts`) largest are masked. Generators
        that need no scores implement it, so :class:`HPMMaskGenerator` can
        draw its non-hard patches with them (``rest=``); those whose keys do
        not depend on the count ignore ``counts``."""
        raise NotImplementedError(
            f'{type(self).__name__} has no keys(): it cannot be rest=.')

    def _mask_largest(self,
                      keys: torch.Tensor,
                      counts: Optional[torch.Tensor] = None) -> torch.Tensor:
        """Mask the :meth:`num_masked` (or ``counts[i]``) largest keys of
        each row."""
        if counts is None:
            num_visible = keys.shape[1] - self.num_masked(keys.shape[1])
            ids_masked = torch.argsort(keys, dim=1)[:, num_visible:]
            return torch.zeros_like(keys).scatter_(1, ids_masked, 1.0)
        order = torch.argsort(keys, dim=1, descending=True)
        rank = torch.arange(keys.shape[1], device=keys.device)
        return torch.zeros_like(keys).scatter_(
            1, order, (rank < counts.unsqueeze(1)).to(keys.dtype))


@MODELS.register_module()
class RandomMaskGenerator(BaseMaskGenerator):
    """MAE's random masking: :meth:`num_masked` patches per image, uniformly at
    random; no scores (HPM builds no teacher with it).

    Example:
        >>> gen = RandomMaskGenerator(mask_ratio=0.75)
        >>> gen(None, 0., num_patches=16, batch_size=2).sum(1).tolist()
        [12.0, 12.0]"""

    def keys(self,
             batch_size,
             num_patches,
             device=None,
             counts=None) -> torch.Tensor:
        return torch.rand(batch_size, num_patches, device=device)
