"""An example mask generator written against hpm_mm's contract
(``docs/extending.md``): mask patches near the image centre more often.

A prior instead of a learned score: on centred objects (Fashion-MNIST) the
centre holds the patches that are hard to reconstruct, which HPM learns to
find from its teacher. ``bias=0`` is MAE's random masking; a large bias
masks the central patches first.
"""
from typing import Dict

import torch
from mmpretrain.registry import MODELS

from hpm_mm.models import BaseMaskGenerator


@MODELS.register_module()
class CenterMaskGenerator(BaseMaskGenerator):
    """Random masking tilted towards the centre of the patch grid.

    Each patch gets the key ``u + bias * closeness`` with ``u`` uniform in
    [0, 1) and ``closeness`` in [0, 1] (1 at the centre, 0 at the farthest
    corner); the :meth:`num_masked` (or :meth:`counts`) largest keys are
    masked. Needs no scores.

    Args:
        mask_ratio (float | list): gamma, or per-image ranges (see
            :class:`BaseMaskGenerator`). Defaults to 0.75.
        bias (float): Strength of the tilt. Defaults to 1.0.
    """

    def __init__(self, mask_ratio: float = 0.75, bias: float = 1.0) -> None:
        super().__init__(mask_ratio)
        self.bias = bias

    def log_vars(self, num_patches: int, progress: float) -> Dict[str, float]:
        return dict(center_bias=float(self.bias))

    def forward(self, scores, progress, num_patches=None, batch_size=None,
                device=None) -> torch.Tensor:
        B, N, device = self._shape(scores, num_patches, batch_size, device)
        side = int(round(N**.5))
        pos = torch.arange(side, device=device, dtype=torch.float32)
        d = (pos - (side - 1) / 2).abs()
        dist = (d.view(-1, 1)**2 + d.view(1, -1)**2).sqrt().flatten()
        closeness = 1 - dist / dist.max().clamp(min=1e-6)
        keys = torch.rand(B, N, device=device) + self.bias * closeness
        return self._mask_largest(keys, self.counts(B, N, device))
