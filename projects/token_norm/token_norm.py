"""A teacher score source from outside the repository: each patch token's
L2 norm in the EMA teacher's encoder output (docs/extending.md), and a mask
generator that reads it on HPM's easy-to-hard schedule."""
from mmpretrain.registry import MODELS

from hpm_mm.models import HPMMaskGenerator
from hpm_mm.models.teachers import TEACHER_SCORES


@TEACHER_SCORES.register_module(name='token_norm')
def token_norm(module, inputs, visible, patch_resolution):
    """(B, N) norm of the teacher's patch tokens, and the tokens."""
    latent = module['backbone'](inputs, visible, visible.shape[1])[0]
    return latent[:, 1:].norm(dim=-1), latent


@MODELS.register_module()
class TokenNormMaskGenerator(HPMMaskGenerator):
    """HPM's rule with the teacher's token norms as the hardness score."""

    score_source = 'token_norm'
