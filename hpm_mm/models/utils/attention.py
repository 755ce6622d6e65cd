"""mmpretrain's ViT attention with ``q, k, v`` unbound (``unbind`` instead of
indexing ``qkv``): the same outputs and gradients, without three
zero-filled gradients of the whole qkv tensor in the backward (~10% of a
decoder block's fwd+bwd on a CPU). Used by hpm_mm's own modules only."""
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
        x = self.proj(x.transpose(1, 2).reshape(B, N, self.embed_dims))
        return self.out_drop(self.gamma1(self.proj_drop(x)))


def unbind_qkv(module: nn.Module) -> nn.Module:
    """Make every mmpretrain ``MultiheadAttention`` inside ``module`` (but
    one with ``v_shortcut``, which hpm_mm never sets) an
    :class:`UnbindQKVAttention` (a subclass that adds no state: parameters,
    state-dict keys and results stay as they are); return ``module``."""
    for m in module.modules():
        if type(m) is MultiheadAttention and not m.v_shortcut:
            m.__class__ = UnbindQKVAttention
    return module
