"""Mask the patches of highest pixel contrast, on HPM's easy-to-hard
schedule: a hand-made hardness score in place of the teacher's predicted
loss (docs/extending.md). Needs no EMA teacher."""
import torch
import torch.nn.functional as F
from mmpretrain.registry import MODELS

from hpm_mm.models import HPMMaskGenerator


@MODELS.register_module()
class ContrastMaskGenerator(HPMMaskGenerator):
    """HPM's rule (K = floor(alpha_t * masked) top-scored patches, the rest
    random) with each patch's pixel standard deviation as its score."""

    score_source = 'image'  # scores from image_scores(), no teacher

    def image_scores(self, inputs: torch.Tensor,
                     patch_resolution: tuple) -> torch.Tensor:
        """(B, C, H, W) normalised images -> (B, N) pixel std per patch."""
        p = inputs.shape[-1] // patch_resolution[1]
        patches = F.unfold(inputs, kernel_size=p, stride=p)  # (B, C*p*p, N)
        return patches.std(dim=1)
