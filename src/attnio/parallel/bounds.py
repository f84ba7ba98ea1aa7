"""Lower bounds on the words a processor sends and receives, for attention over P processors,
forward and backward, without and with a local memory of L words (proofs, every constant
explicit: docs/parallel.md, "Lower bounds").

The model (:mod:`~attnio.parallel.cluster`): a required (query, key) pair of query head h (a
visible pair of a row that sees at least two keys; W of them over all heads) is processed by a
processor that holds, at that time, the whole query row, key row and value row; a processor
holds a row if its layout gave it the row or it received the row's d words.  The initial layout
is a balanced sequence shard: each processor holds at most ``⌈Nq/P⌉`` query rows and
``⌈Nkv/P⌉`` key and value rows of every head (what every scheme of this package starts from).
The backward pass (:mod:`~attnio.parallel.backward`) needs, for a pair, the query side's
``Q, dO`` and statistics (``2d + 2`` words a row) and the key side's ``K, V`` (2d); the
contribution of a pair to ``dQ[r]`` (``dK[c]``, ``dV[c]``) leaves the processor that computed
it only inside a partial of that row (d words; 2d for the two).

Notation: ``n`` key/value heads (batch folded in), group ``g = heads/kv_heads``, ``C_q`` the most
keys a query row sees, ``C_k = g·(the most query rows of a head that see one key)``,
``A_Q = n·g·⌈Nq/P⌉`` and ``A_KV = n·⌈Nkv/P⌉`` the rows a processor starts with,
``a = g·⌈Nq/P⌉``, ``b = ⌈Nkv/P⌉`` those of one group; ``α``, ``β`` the words a received query
row and key cost (forward d and 2d, backward 2d + 2 and 2d).

* **Linear caps, every processor** (Theorem 1): a processor that processes w pairs held at least
  w/C_q query rows and w/C_k keys, so it received at least
  ``Lin(w) = α·(w/C_q - A_Q)⁺ + β·(w/C_k - A_KV)⁺``; Lin is convex, the works sum to at least W,
  and the words sent equal the words received in all, so the busiest processor sends and
  receives at least ``2·Lin(W/P)``.  Order N·d·(H + h_kv)/P: Ulysses' count;
* **Rectangles, the busiest processor** (Theorem 2): in a group, the pairs it processes lie in
  (query rows held) x (keys held); summed over groups, with U query rows and V keys received,
  ``w <= (a + U)(b + V) + (n - 1)·a·b``; with the caps U >= U₀, V >= V₀ of Theorem 1 the least
  ``α'·U + β'·V`` is a closed form (forward ``α' = d``, ``β' = 2d``: words received; backward
  ``α' = 3d + 2``, ``β' = 4d``: received, and the partial gradients of the rows sent back), of
  order ``2·√(α'β')·√(W/P)``: N·d·√(h/P) when h < P, the 2-D grid's order;
* **Rectangles per group, every processor** (Theorem 3): in group j, with u_j query rows and v_j
  keys received, ``w_j <= (a + u_j)(b + v_j) <= a·b + u_j·(b + θ(Ȳ - b)) + v_j·(a + (1-θ)(X̄ - a))``
  for every θ in [0, 1] (``X̄ = g·Nq``, ``Ȳ = Nkv``: u_j <= X̄ - a, v_j <= Ȳ - b); summed over the
  n groups it is linear in the rows received, so ``Rect(w) = (w - n·a·b)⁺·min(α/(b + θ(Ȳ - b)),
  β/(a + (1-θ)(X̄ - a)))`` is convex and, as in Theorem 1, the busiest processor moves at least
  ``2·Rect(W/P)`` (θ balancing the two terms).  Order N·d·h/P when h >= P: whole heads;
* **A local memory of L words** (Theorem 4, memory-dependent, the segment argument of
  Irony-Toledo-Tiskin 2004 and Ballard-Demmel-Holtz-Lipshitz-Schwartz 2012): cut a processor's
  run into segments of L words received; in one segment it uses only rows in its memory at the
  segment's start or received in it, at most 2L words, so it processes at most
  ``F_L = min(L²/(μ_q·μ_k), 2L·C_q/μ_q, 2L·C_k/μ_k)`` pairs (``μ_q``, ``μ_k``: the words a
  query row and a key take in memory, forward d and 2d, backward 2d + 2 and 2d); a processor
  with w pairs received at least ``L·(w/F_L - 1)``, and the busiest moves at least
  ``2·L·(W/(P·F_L) - 1)``: about ``4·d²·W/(P·L) - 2L`` forward.

The bound is the largest of those that apply (each proven; :func:`bound` returns which binds).

>>> from attnio.core.workload import Shape
>>> bound(Shape(4096, 4096, 64, heads=32), 8).value   # Theorem 3: whole heads
4893355
>>> one = Shape(1 << 16, 1 << 16, 128)   # one head: P = 256 processors of 2·98,304 words
>>> bound(one, 256).value, bound(one, 256, memory=2 * 98304).value   # Theorems 2 and 4
(1384606, 5199190)
"""

from __future__ import annotations

import math
from fractions import Fraction

from ..bounds.base import Bound
from ..core import masks
from ..core.errors import ParameterError
from ..core.workload import Shape, cdiv
from .base import check_P
from .geometry import max_keys_per_row, max_rows_per_key

__all__ = ["bound", "busiest_bound", "group_bound", "initial_words", "linear_bound",
           "memory_bound"]

_MODEL = (
    "a processor processes a required pair (q_h,r, k_j,c) only while holding the whole rows "
    "q_h,r, k_j,c and v_j,c; a row is held if the initial layout put it there or all its d "
    "words were received",
    "messages carry input rows or partial outputs; a partial output gives no input row",
    "initial layout: at most ceil(Nq/P) query rows and ceil(Nkv/P) key/value rows of every "
    "head on each processor (a balanced sequence shard)",
    "the output's placement is not charged",
)
_BACKWARD = (
    "backward: a pair needs Q, dO and the statistics (lse, D) of its query row (2d + 2 words) "
    "and K, V of its key (2d); its contribution to dQ, dK, dV leaves the processor that "
    "computed it only inside a partial of that row (d words each), sent to the row's owner "
    "(the owner of its Q or K row)",
)


def _sizes(shape: Shape, P: int) -> dict[str, int]:
    g, n = shape.group, shape.n_kv_heads
    mq, mk = cdiv(shape.Nq, P), cdiv(shape.Nkv, P)
    return {"W": shape.n_heads * masks.row_counts(shape).pairs2, "Cq": max_keys_per_row(shape),
            "Ck": g * max_rows_per_key(shape), "AQ": n * g * mq, "AKV": n * mk,
            "a": g * mq, "b": mk, "n": n, "d": shape.d}


def _received(d: int, backward: bool) -> tuple[int, int]:
    """(α, β): the words a processor receives for a query row and for a key it did not hold."""
    return (2 * d + 2, 2 * d) if backward else (d, 2 * d)


def _moved(d: int, backward: bool) -> tuple[int, int]:
    """(α', β'): the words one processor sends plus receives for a query row and a key it
    processes and does not own (backward: the partial gradients go back, d and 2d)."""
    return (3 * d + 2, 4 * d) if backward else (d, 2 * d)


def _lin(s: dict[str, int], w: Fraction, alpha: int, beta: int) -> Fraction:
    if s["Cq"] == 0 or s["Ck"] == 0:
        return Fraction(0)
    return (alpha * max(Fraction(0), w / s["Cq"] - s["AQ"])
            + beta * max(Fraction(0), w / s["Ck"] - s["AKV"]))


def linear_bound(shape: Shape, P: int, *, backward: bool = False) -> Fraction:
    """Theorem 1: ``2·Lin(W/P)``, exact (a fraction)."""
    s = _sizes(shape, check_P(P))
    return 2 * _lin(s, Fraction(s["W"], P), *_received(s["d"], backward))


def busiest_bound(shape: Shape, P: int, *, backward: bool = False) -> float:
    """Theorem 2: the least ``α'·U + β'·V`` over ``U >= U₀, V >= V₀, (a + U)(b + V) >= t``,
    ``w = ⌈W/P⌉``, ``t = w - (n - 1)·a·b`` (a float, rounded down)."""
    s = _sizes(shape, check_P(P))
    a, b = s["a"], s["b"]
    al, be = _moved(s["d"], backward)
    if s["W"] == 0:
        return 0.0
    w = cdiv(s["W"], P)
    t = w - (s["n"] - 1) * a * b
    U0 = max(0.0, w / s["Cq"] - s["AQ"])
    V0 = max(0.0, w / s["Ck"] - s["AKV"])
    x0, y0 = a + U0, b + V0
    if x0 * y0 >= t:
        val = al * U0 + be * V0
    else:  # on the hyperbola xy = t: al·x + be·t/x is least at x = √(be·t/al)
        xs = math.sqrt(be * t / al)
        ys = t / xs
        if xs < x0:
            x, y = x0, t / x0
        elif ys < y0:
            x, y = t / y0, y0
        else:
            x, y = xs, ys
        val = al * (x - a) + be * (y - b)
    return max(0.0, val * (1 - 1e-12) - 1e-6)


def group_bound(shape: Shape, P: int, *, backward: bool = False) -> Fraction:
    """Theorem 3: ``2·Rect(W/P)`` at the balancing θ, exact (a fraction)."""
    s = _sizes(shape, check_P(P))
    a, b, n = s["a"], s["b"], s["n"]
    al, be = _received(s["d"], backward)
    free = Fraction(s["W"], P) - n * a * b
    if free <= 0:
        return Fraction(0)
    Xr, Yr = shape.group * shape.Nq - a, shape.Nkv - b  # rows a group can still receive
    den = al * Xr + be * Yr  # θ balancing al/(b + θ·Yr) = be/(a + (1 - θ)·Xr)
    theta = Fraction(0) if den == 0 else min(Fraction(1), max(
        Fraction(0), Fraction(al * (a + Xr) - be * b, den)))
    q_gain, k_gain = b + theta * Yr, a + (1 - theta) * Xr  # pairs per received row
    big = Fraction(10**30)
    per = min(Fraction(al) / q_gain if q_gain else big, Fraction(be) / k_gain if k_gain else big)
    return 2 * free * per


def initial_words(shape: Shape, P: int, *, backward: bool = False) -> int:
    """The words of input rows a processor of the balanced layout starts with (the least local
    memory a layout of this shape fits in)."""
    s = _sizes(shape, check_P(P))
    mq, mk = _received(s["d"], backward)
    return mq * s["AQ"] + mk * s["AKV"]


def memory_bound(shape: Shape, P: int, L: int, *, backward: bool = False) -> Fraction:
    """Theorem 4: ``2·L·(W/(P·F_L) - 1)`` (0 when negative), exact, for processors that hold at
    most L words of input rows at any time; L must be at least :func:`initial_words`."""
    from ..core.checks import check_int

    s = _sizes(shape, check_P(P))
    L = check_int("memory", L, minimum=1)
    need = initial_words(shape, P, backward=backward)
    if L < need:
        raise ParameterError(f"memory: L={L:,} words is less than the {need:,} words of input "
                             f"rows each processor starts with (the layout does not fit)",
                             param="memory")
    if s["W"] == 0:
        return Fraction(0)
    mq, mk = _received(s["d"], backward)
    F = min(Fraction(L * L, mq * mk), Fraction(2 * L * s["Cq"], mq),
            Fraction(2 * L * s["Ck"], mk))
    return max(Fraction(0), 2 * L * (Fraction(s["W"], P) / F - 1))


def bound(shape: Shape, P: int, *, memory: int | None = None, backward: bool = False) -> Bound:
    """The largest of Theorems 1-3 (and 4 with a local ``memory`` of L words): words sent plus
    received by the busiest processor, in the forward pass or (``backward``) the backward."""
    P = check_P(P)
    cands = [(math.ceil(linear_bound(shape, P, backward=backward)),
              "Theorem 1 (linear caps, all processors)"),
             (math.ceil(group_bound(shape, P, backward=backward)),
              "Theorem 3 (rectangles per group, all processors)"),
             (math.floor(busiest_bound(shape, P, backward=backward)),
              "Theorem 2 (rectangles, the busiest processor)")]
    if memory is not None:
        cands.append((math.ceil(memory_bound(shape, P, memory, backward=backward)),
                      f"Theorem 4 (local memory of {memory:,} words)"))
    value, which = max(cands, key=lambda c: c[0])  # ties: the first (as before)
    assumptions = _MODEL + (_BACKWARD if backward else ())
    if memory is not None:
        assumptions += (f"each processor holds at most L={memory:,} words of input rows at "
                        f"any time",)
    else:
        assumptions += ("no memory limit (memory-independent)",)
    return Bound(value, f"{which}; docs/parallel.md", assumptions, True,
                 name="cp_backward" if backward else "cp_forward",
                 regime=f"P={P}" + ("" if memory is None else f", L={memory}"))
