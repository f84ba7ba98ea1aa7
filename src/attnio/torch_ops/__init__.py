"""PyTorch kernels for approximate attention with ``scaled_dot_product_attention``'s signature.

* :func:`poly_attention` - the polynomial method (Alman & Song, arXiv 2302.13214) with a proven
  error: the same polynomial and features as the simulator's ``approx_poly`` (:mod:`attnio.approx`),
  so in float64 both give the same output to rounding; :func:`poly_plan` says what it will run
  (degree, features r, predicted time against SDPA) before it runs, and a cost guard
  (``on_slow``, :class:`SlowApproximationWarning`) stops silent cost explosions.
* :func:`based_attention` - Based's degree-2 Taylor feature map (arXiv 2402.18668), a baseline.
* :func:`favor_attention` - Performer's FAVOR+ positive orthogonal random features
  (arXiv 2009.14794), a baseline.

All three are linear attention ``O = diag(phi(Q) z)^-1 phi(Q) W`` computed by one engine
(:mod:`._engine`): blocked over n (memory ``O(chunk * r + r * Ev)`` per head, never ``O(n r)``),
causal by the chunked form (in-tile weights exact, a running r x (Ev+1) state across tiles),
batched over batch, heads and tiles, with hand-written backward passes (custom
``torch.autograd.Function``\\ s) that recompute features instead of storing them.

Tensors follow SDPA: ``(..., Hq, L, E)`` queries, ``(..., H, S, E)`` keys, ``(..., H, S, Ev)``
values (``enable_gqa`` for H < Hq); float32/float64, and bfloat16/float16 computed in float32.
``is_causal`` means what SDPA's means, top-left aligned (query i sees keys j <= i, also when
L != S); ``causal_align="bottom_right"`` gives the project's and flash-attn's alignment (j <= i +
S - L).  By default a plan predicted slower than SDPA (by 1.25x), one no degree can meet, or one above
``memory_limit`` falls back to exact SDPA with a warning (``on_slow="exact"``).
:class:`PolyAttention` is an ``nn.Module`` with bounded q/k projections.  The engine runs one
piece of work per torch thread (:mod:`._parallel`).  ``torch`` is imported lazily: it is an
optional extra (``attnio[torch]``).
"""

from __future__ import annotations

from ._api import based_attention, favor_attention, poly_attention, poly_plan
from ._plan import PolyPlan, SlowApproximationWarning

try:  # the custom operator torch.compile calls must exist before tracing starts
    import torch as _t  # noqa: F401
except ImportError:  # the optional extra is missing: poly_attention says so when called
    pass
else:
    from ._compiled import poly_op as _poly_op

    _poly_op()

__all__ = ["PolyAttention", "PolyPlan", "SlowApproximationWarning", "based_attention",
           "favor_attention", "poly_attention", "poly_plan"]


def __getattr__(name):
    if name == "PolyAttention":  # an nn.Module: needs torch at class creation
        from ._core import torch_module

        torch_module()
        from ._module import PolyAttention

        return PolyAttention
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
