"""hpm_mm's ViT attention: mmpretrain's, with ``q, k, v`` unbound.

mmpretrain 1.2.0's ``MultiheadAttention.forward`` takes
``q, k, v = qkv[0], qkv[1], qkv[2]``; in the backward each index allocates a
zero-filled gradient of the whole ``(3, B, heads, N, head_dim)`` tensor and
the three are summed (on the main job's CPU step: 12 fills of 8.5M values).
``unbind`` gives the same three views and a backward that stacks the three
gradients: bit-identical outputs and gradients (tested), ~10% off the
fwd+bwd time of a 128-d decoder block on 2 AVX2 cores
(``.dev_scripts/profile_main_job.py`` measures it on the whole step).

Only hpm_mm's own modules use it (:class:`HPMViT`, :class:`HPMPretrainDecoder`,
:class:`HPMLossPredictor`): importing hpm_mm leaves mmpretrain's class as it
is. Can go once mmpretrain's own forward unbinds (not as of 1.2.0 /
onedl-mmpretrain 1.3.6).
"""
import torch.nn as nn
from mmpretrain.models.utils.attention import MultiheadAttention


class UnbindQKVAttention(MultiheadAttention):
    """:class:`mmpretrain.models.utils.MultiheadAttention` whose forward
    takes ``q, k, v`` by ``unbind``: same parameters, same numbers, a
    backward without three zero fills."""

    def forward(self, x):
        B, N, _ = x.shape
        q, k, v = self.qkv(x).reshape(B, N, 3, self.num_heads,
                                      self.head_dims).permute(2, 0, 3, 1,
                                                              4).unbind(0)
        attn_drop = self.attn_drop if self.training else 0.
        x = self.scaled_dot_product_attention(q, k, v, dropout_p=attn_drop)
        x = x.transpose(1, 2).reshape(B, N, self.embed_dims)
        x = self.proj(x)
        x = self.out_drop(self.gamma1(self.proj_drop(x)))
        if self.v_shortcut:
            x = v.squeeze(1) + x
        return x


def unbind_qkv(module: nn.Module) -> nn.Module:
    """Make every mmpretrain ``MultiheadAttention`` inside ``module`` an
    :class:`UnbindQKVAttention` (a subclass that adds no state: parameters,
    state-dict keys and results stay as they are); return ``module``."""
    for m in module.modules():
        if type(m) is MultiheadAttention:
            m.__class__ = UnbindQKVAttention
    return module
