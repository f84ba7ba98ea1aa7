"""``PolyAttention``: a multi-head attention layer whose q and k entries are bounded by
construction, so that ``poly_attention``'s entry bound holds for every input and its plan is
the same at every step."""

from __future__ import annotations

import math

from ..core.errors import ParameterError
from ._api import poly_attention

try:  # the class needs torch's base class; without torch attnio.torch_ops.PolyAttention says so
    import torch
    _Module = torch.nn.Module
except ImportError:  # pragma: no cover - the optional extra is missing
    torch = None  # type: ignore[assignment]
    _Module = object  # type: ignore[assignment,misc]

__all__ = ["PolyAttention"]


class PolyAttention(_Module):
    """Multi-head (or grouped-query) self-attention through :func:`poly_attention`, with bounded
    query and key projections: ``q = B tanh(x W_q)``, ``k = B tanh(x W_k)``, ``v = x W_v``, so
    every entry of q and k lies in [-B, B] and the score range is ``R = B^2 sqrt(head_dim)``
    (at the default scale): the degree and the feature count ``r = C(head_dim + g, g)`` are
    fixed when the layer is built (``self.plan_for(n)`` shows them) and the error guarantee
    holds for every input.  The recipe for training such a model is in docs/approximate.md §6.

    Parameters
    ----------
    embed_dim : int
        Model width D (input and output ``(batch, n, D)``).
    num_heads : int
        Query heads; ``head_dim = embed_dim // num_heads`` unless given.
    kv_heads : int, optional
        Key/value heads (grouped-query attention when fewer than ``num_heads``).
    head_dim : int, optional
        E per head (small E is what makes the method pay: r grows like E^g).
    entry_bound : float, default 0.5
        B.  At head_dim 8, B = 0.5 gives R = 0.71 (degree 4 at eps = 1e-3, r = 495).
    eps : float, default 1e-3
        The polynomial's relative error (see poly_attention).
    is_causal : bool, default False
        Causal self-attention (forward's ``is_causal`` overrides it per call).
    bias : bool, default True
        Biases of the four projections.
    **kwargs
        Passed on to poly_attention (``on_slow``, ``variant``, ``memory_limit``, ...).
    """

    def __init__(self, embed_dim: int, num_heads: int, *, kv_heads: int | None = None,
                 head_dim: int | None = None, entry_bound: float = 0.5, eps: float = 1e-3,
                 is_causal: bool = False, bias: bool = True, **kwargs):
        super().__init__()
        for name, val in (("embed_dim", embed_dim), ("num_heads", num_heads)):
            if isinstance(val, bool) or not isinstance(val, int) or val < 1:
                raise ParameterError(f"{name} must be an integer >= 1, got {val!r}", param=name)
        kv = num_heads if kv_heads is None else kv_heads
        if isinstance(kv, bool) or not isinstance(kv, int) or kv < 1 or num_heads % kv:
            raise ParameterError(f"kv_heads must divide num_heads = {num_heads}, got {kv_heads!r}",
                                 param="kv_heads")
        E = embed_dim // num_heads if head_dim is None else head_dim
        if isinstance(E, bool) or not isinstance(E, int) or E < 1:
            raise ParameterError(f"head_dim must be an integer >= 1 (embed_dim // num_heads "
                                 f"by default), got {E!r}", param="head_dim")
        b = float(entry_bound)
        if not (math.isfinite(b) and b > 0):
            raise ParameterError(f"entry_bound must be a finite number > 0, got {entry_bound!r}",
                                 param="entry_bound")
        self.embed_dim, self.num_heads, self.kv_heads, self.head_dim = embed_dim, num_heads, kv, E
        self.entry_bound, self.eps, self.is_causal, self.kwargs = b, eps, is_causal, kwargs
        self.q_proj = torch.nn.Linear(embed_dim, num_heads * E, bias=bias)
        self.k_proj = torch.nn.Linear(embed_dim, kv * E, bias=bias)
        self.v_proj = torch.nn.Linear(embed_dim, kv * E, bias=bias)
        self.out_proj = torch.nn.Linear(num_heads * E, embed_dim, bias=bias)

    def qkv(self, x):
        """The bounded q, k and v, ``(batch, heads, n, head_dim)``."""
        B, n, _ = x.shape
        E, b = self.head_dim, self.entry_bound
        q = (b * torch.tanh(self.q_proj(x))).view(B, n, self.num_heads, E).transpose(1, 2)
        k = (b * torch.tanh(self.k_proj(x))).view(B, n, self.kv_heads, E).transpose(1, 2)
        v = self.v_proj(x).view(B, n, self.kv_heads, E).transpose(1, 2)
        return q, k, v

    def forward(self, x, *, is_causal: bool | None = None):
        q, k, v = self.qkv(x)
        o = poly_attention(q, k, v, is_causal=self.is_causal if is_causal is None else is_causal,
                           enable_gqa=self.kv_heads != self.num_heads, eps=self.eps,
                           entry_bound=self.entry_bound, **self.kwargs)
        B, _, n, _ = o.shape
        return self.out_proj(o.transpose(1, 2).reshape(B, n, -1))

    def plan_for(self, n: int, batch: int = 1):
        """poly_plan on meta tensors of this layer's shapes at sequence length n."""
        from ._api import poly_plan

        q = torch.empty(batch, self.num_heads, n, self.head_dim, device="meta")
        k = torch.empty(batch, self.kv_heads, n, self.head_dim, device="meta")
        return poly_plan(q, k, eps=self.eps, entry_bound=self.entry_bound,
                         is_causal=self.is_causal, enable_gqa=self.kv_heads != self.num_heads)

    def extra_repr(self) -> str:
        return (f"embed_dim={self.embed_dim}, num_heads={self.num_heads}, kv_heads="
                f"{self.kv_heads}, head_dim={self.head_dim}, entry_bound={self.entry_bound}, "
                f"eps={self.eps}, is_causal={self.is_causal}")
