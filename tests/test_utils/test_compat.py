"""The upstream patches of hpm_mm.compat keep the numbers they patch."""
import torch

import hpm_mm  # noqa: F401  (applies the patches)


def test_unbound_qkv_attention_is_bit_identical():
    """mmpretrain's MultiheadAttention with q, k, v unbound gives exactly
    the outputs and gradients of its own indexing forward."""
    from mmpretrain.models.utils.attention import MultiheadAttention
    assert MultiheadAttention.forward is not \
        MultiheadAttention._mmpretrain_forward
    torch.manual_seed(0)
    attn = MultiheadAttention(embed_dims=16, num_heads=4, v_shortcut=False)
    x = torch.randn(3, 7, 16)
    results = []
    for forward in (MultiheadAttention._mmpretrain_forward,
                    MultiheadAttention.forward):
        attn.zero_grad()
        xi = x.clone().requires_grad_()
        y = forward(attn, xi)
        (y.sin().sum()).backward()
        results.append((y.detach(), xi.grad, attn.qkv.weight.grad.clone()))
    for a, b in zip(*results):
        assert torch.equal(a, b)
