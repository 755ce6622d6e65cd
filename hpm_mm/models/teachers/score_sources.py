"""The teacher's score sources (``TEACHER_SCORES``), one registered function
per name a mask generator's ``score_source`` may give::

    @TEACHER_SCORES.register_module(name='my_source')
    def my_source(module, inputs, visible, patch_resolution):
        latent, _ = module['backbone'](inputs, visible, visible.shape[1])
        return scores, latent  # scores (B, N) on the teacher's grid

It runs under ``no_grad`` and the teacher's precision, in its one pass;
the teacher casts and resizes the scores (docs/extending.md)."""
from typing import Optional, Tuple

import torch
import torch.nn as nn
from mmengine.registry import Registry

from hpm_mm.errors import HPMError

TEACHER_SCORES = Registry(
    'teacher score source',
    scope='hpm_mm',
    locations=['hpm_mm.models.teachers.score_sources'])


def check_source(name: Optional[str]) -> None:
    """Refuse a source nothing registered, naming the registered ones (None:
    no source, nothing to check)."""
    if name is not None and TEACHER_SCORES.get(name) is None:
        raise HPMError(
            f'score_source {name!r} is not a registered teacher score source.'
            f' Fix: one of {sorted(TEACHER_SCORES.module_dict)}, or yours by '
            'TEACHER_SCORES.register_module in custom_imports.')


@TEACHER_SCORES.register_module(name='predicted_loss')
def predicted_loss(module: nn.ModuleDict, inputs: torch.Tensor,
                   visible: torch.Tensor,
                   patch_resolution: Optional[Tuple[int, int]]):
    """HPM's: the teacher's loss predictor on the full image."""
    latent, ids_restore = module['backbone'](inputs, visible, visible.shape[1])
    return module['scorer'].predict_scores(
        latent, ids_restore, patch_resolution=patch_resolution), latent


@TEACHER_SCORES.register_module(name='cls_attention')
def cls_attention(module: nn.ModuleDict, inputs: torch.Tensor,
                  visible: torch.Tensor,
                  patch_resolution: Optional[Tuple[int, int]]):
    """The last block's CLS-to-patch attention, mean over heads (AttMask's
    score), read off the q/k projections of the same pass (a forward hook
    on the last block's ``qkv``): no extra pass runs."""
    backbone = module['backbone']
    attn = backbone.layers[-1].attn
    seen = []
    handle = attn.qkv.register_forward_hook(lambda m, i, out: seen.append(out))
    try:
        latent = backbone(inputs, visible, visible.shape[1])[0]
    finally:
        handle.remove()
    B, L, _ = seen[0].shape
    qkv = seen[0].float().view(B, L, 3, attn.num_heads, attn.head_dims)
    q_cls, k = qkv[:, 0, 0], qkv[:, :, 1]  # (B, H, D), (B, L, H, D)
    logits = torch.einsum('bhd,blhd->bhl', q_cls, k) * attn.head_dims**-.5
    return logits.softmax(-1)[:, :, 1:].mean(1), latent
