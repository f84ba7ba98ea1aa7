"""Memory-independent lower bounds on the words a processor sends and receives, for attention
over P processors (proofs, every constant explicit: docs/parallel.md, "Lower bounds").

The model (:mod:`~attnio.parallel.cluster`): a required (query, key) pair of query head h (a
visible pair of a row that sees at least two keys; W of them over all heads) is processed by a
processor that holds, at that time, the whole query row, key row and value row; a processor
holds a row if its layout gave it the row or it received the row's d words.  The initial layout
is a balanced sequence shard: each processor holds at most ``⌈Nq/P⌉`` query rows and
``⌈Nkv/P⌉`` key and value rows of every head (what every scheme of this package starts from).

Notation: ``n`` key/value heads (batch folded in), group ``g = heads/kv_heads``, ``C_q`` the most
keys a query row sees, ``C_k = g·(the most query rows of a head that see one key)``,
``A_Q = n·g·⌈Nq/P⌉`` and ``A_KV = n·⌈Nkv/P⌉`` the rows a processor starts with,
``a = g·⌈Nq/P⌉``, ``b = ⌈Nkv/P⌉`` those of one group.

* **Linear caps, every processor** (Theorem 1): a processor that processes w pairs held at least
  w/C_q query rows and w/C_k keys, so it received at least
  ``Lin(w) = d·(w/C_q - A_Q)⁺ + 2d·(w/C_k - A_KV)⁺``; Lin is convex, the works sum to at least W,
  and the words sent equal the words received in all, so the busiest processor sends and
  receives at least ``2·Lin(W/P)``.  Order N·d·(H + h_kv)/P: Ulysses' count;
* **Rectangles, the busiest processor** (Theorem 2): in a group, the pairs it processes lie in
  (query rows held) x (keys held); summed over groups, with U query rows and V keys received,
  ``w <= (a + U)(b + V) + (n - 1)·a·b``; with the caps U >= U₀, V >= V₀ of Theorem 1 the least
  ``d·U + 2d·V`` is a closed form, of order ``2√2·d·√(W/P)``: N·d·√(h/P) when h < P, the 2-D
  grid's order;
* **Rectangles per group, every processor** (Theorem 3): in group j, with u_j query rows and v_j
  keys received, ``w_j <= (a + u_j)(b + v_j) <= a·b + u_j·(b + θ(Ȳ - b)) + v_j·(a + (1-θ)(X̄ - a))``
  for every θ in [0, 1] (``X̄ = g·Nq``, ``Ȳ = Nkv``: u_j <= X̄ - a, v_j <= Ȳ - b); summed over the
  n groups it is linear in the rows received, so ``Rect(w) = (w - n·a·b)⁺·min(d/(b + θ(Ȳ - b)),
  2d/(a + (1-θ)(X̄ - a)))`` is convex and, as in Theorem 1, the busiest processor moves at least
  ``2·Rect(W/P)`` (θ balancing the two terms).  Order N·d·h/P when h >= P: whole heads.

The bound is the largest of the three (each proven; :func:`bound` returns which binds).

>>> from attnio.core.workload import Shape
>>> bound(Shape(4096, 4096, 64, heads=32), 8).value   # Theorem 3: whole heads
4893355
"""

from __future__ import annotations

import math
from fractions import Fraction

from ..bounds.base import Bound
from ..core import masks
from ..core.workload import Shape, cdiv
from .base import check_P
from .geometry import max_keys_per_row, max_rows_per_key

__all__ = ["bound", "busiest_bound", "group_bound", "linear_bound"]

_MODEL = (
    "a processor processes a required pair (q_h,r, k_j,c) only while holding the whole rows "
    "q_h,r, k_j,c and v_j,c; a row is held if the initial layout put it there or all its d "
    "words were received",
    "messages carry input rows or partial outputs; a partial output gives no input row",
    "initial layout: at most ceil(Nq/P) query rows and ceil(Nkv/P) key/value rows of every "
    "head on each processor (a balanced sequence shard)",
    "no memory limit (memory-independent); the output's placement is not charged",
)


def _sizes(shape: Shape, P: int) -> dict[str, int]:
    g, n = shape.group, shape.n_kv_heads
    mq, mk = cdiv(shape.Nq, P), cdiv(shape.Nkv, P)
    return {"W": shape.n_heads * masks.row_counts(shape).pairs2, "Cq": max_keys_per_row(shape),
            "Ck": g * max_rows_per_key(shape), "AQ": n * g * mq, "AKV": n * mk,
            "a": g * mq, "b": mk, "n": n, "d": shape.d}


def _lin(s: dict[str, int], w: Fraction) -> Fraction:
    d = s["d"]
    if s["Cq"] == 0 or s["Ck"] == 0:
        return Fraction(0)
    return (d * max(Fraction(0), w / s["Cq"] - s["AQ"])
            + 2 * d * max(Fraction(0), w / s["Ck"] - s["AKV"]))


def linear_bound(shape: Shape, P: int) -> Fraction:
    """Theorem 1: ``2·Lin(W/P)``, exact (a fraction)."""
    s = _sizes(shape, check_P(P))
    return 2 * _lin(s, Fraction(s["W"], P))


def busiest_bound(shape: Shape, P: int) -> float:
    """Theorem 2: the least ``d·U + 2d·V`` over ``U >= U₀, V >= V₀, (a + U)(b + V) >= t``,
    ``w = ⌈W/P⌉``, ``t = w - (n - 1)·a·b`` (a float, rounded down)."""
    s = _sizes(shape, check_P(P))
    d, a, b = s["d"], s["a"], s["b"]
    if s["W"] == 0:
        return 0.0
    w = cdiv(s["W"], P)
    t = w - (s["n"] - 1) * a * b
    U0 = max(0.0, w / s["Cq"] - s["AQ"])
    V0 = max(0.0, w / s["Ck"] - s["AKV"])
    x0, y0 = a + U0, b + V0
    if x0 * y0 >= t:
        val = d * U0 + 2 * d * V0
    else:
        xs, ys = math.sqrt(2.0 * t), math.sqrt(t / 2.0)
        if xs < x0:
            x, y = x0, t / x0
        elif ys < y0:
            x, y = t / y0, y0
        else:
            x, y = xs, ys
        val = d * (x - a) + 2 * d * (y - b)
    return max(0.0, val * (1 - 1e-12) - 1e-6)


def group_bound(shape: Shape, P: int) -> Fraction:
    """Theorem 3: ``2·Rect(W/P)`` at the balancing θ, exact (a fraction)."""
    s = _sizes(shape, check_P(P))
    d, a, b, n = s["d"], s["a"], s["b"], s["n"]
    free = Fraction(s["W"], P) - n * a * b
    if free <= 0:
        return Fraction(0)
    Xr, Yr = shape.group * shape.Nq - a, shape.Nkv - b  # rows a group can still receive
    den = Xr + 2 * Yr
    theta = Fraction(0) if den == 0 else min(Fraction(1), max(Fraction(0),
                                                               Fraction(Xr + a - 2 * b, den)))
    q_gain, k_gain = b + theta * Yr, a + (1 - theta) * Xr  # pairs per received row
    per = min(Fraction(d) / q_gain if q_gain else Fraction(10**30),
              Fraction(2 * d) / k_gain if k_gain else Fraction(10**30))
    return 2 * free * per


def bound(shape: Shape, P: int) -> Bound:
    """The largest of Theorems 1-3: words sent plus received by the busiest processor."""
    P = check_P(P)
    lin = math.ceil(max(linear_bound(shape, P), group_bound(shape, P)))
    busy = busiest_bound(shape, P)
    lin_i = lin
    if lin_i >= busy:
        value, which = lin_i, ("Theorem 1 (linear caps, all processors)"
                               if lin == math.ceil(linear_bound(shape, P))
                               else "Theorem 3 (rectangles per group, all processors)")
    else:
        value, which = math.floor(busy), "Theorem 2 (rectangles, the busiest processor)"
    return Bound(value, f"{which}; docs/parallel.md", _MODEL, True, name="cp_memory_independent",
                 regime=f"P={P}")
