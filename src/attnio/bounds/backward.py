"""Lower bounds on the I/O of the attention backward pass (minimal: the trivial bound).

The backward pass reads Q, K, V, O, dO (and the forward's logsumexp L) and writes dQ, dK, dV.
Its count is the backward pass alone: fast memory starts empty, as in the forward.

* :func:`backward_trivial` - explicit: dO is read (every dO_il of a row that sees a key moves
  dV generically and no other input determines it), dQ, dK, dV written.

:func:`backward_applicable_to` lists the backward bounds for a Shape (the backward certificate).
(The stronger explicit backward bounds, Theorems D and E, and Li et al.'s Θ-form come with the
bounds work of issue 17; this module is their placeholder and keeps the same names.)

>>> [b.name for b in backward_applicable_to(Shape(1024, 1024, 64), 16384)]
['backward_trivial']
>>> backward_trivial_for(Shape(1024, 1024, 64)).value == 4 * 1024 * 64
True
"""

from __future__ import annotations

from ..core import masks
from ..core.workload import Shape
from .base import Bound, attention_shape, check_M

__all__ = ["backward_applicable_to", "backward_trivial", "backward_trivial_for"]


def backward_trivial_for(shape: Shape) -> Bound:
    """:func:`backward_trivial` of a Shape (all its heads)."""
    rc = masks.row_counts(shape)
    d = shape.d
    value = shape.n_heads * (rc.rows1 * d + shape.Nq * d) + shape.n_kv_heads * 2 * shape.Nkv * d
    return Bound(value, "trivial: dO read once, dQ, dK, dV written once",
                 ("every word of dQ, dK, dV is written at least once",
                  "every dO_il of a row that sees a key moves dV_jl (generic inputs) and is "
                  "not determined by the other inputs, so it is read",
                  "Q, K, V, O, L are not counted: O and L carry information about Q, K, V"),
                 True, name="backward_trivial", regime="any M")


def backward_trivial(Nq: int, Nkv: int, d: int, *, causal: object = False, heads: int = 1,
                     kv_heads: int | None = None, window: int | None = None) -> Bound:
    """dO read (rows that see a key), dQ, dK, dV written: ``2·Nq·d + 2·Nkv·d`` unmasked."""
    shape = attention_shape(Nq, d, Nkv=Nkv, causal=causal, heads=heads, kv_heads=kv_heads,
                            window=window)
    return backward_trivial_for(shape)


def backward_applicable_to(shape: Shape, M: int) -> list[Bound]:
    """Every backward bound whose preconditions hold for ``shape`` with M fast words."""
    check_M(M)
    return [backward_trivial_for(shape)]
