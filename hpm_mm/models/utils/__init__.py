from .attention import UnbindQKVAttention, unbind_qkv

__all__ = ['UnbindQKVAttention', 'unbind_qkv']
