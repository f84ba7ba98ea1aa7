"""The ring cut short by a sliding window: a schedule the bound suggests and the published rings
miss (they pass every block round the whole ring whatever the mask).

Layout: contiguous sequence shards, as :mod:`~attnio.parallel.ring` (``Nq``, ``Nkv`` multiples
of P; block size ``s = Nkv/P``).  Under a causal mask with a window of W keys, the query rows of
processor g see the keys ``kv_range(rows of g) = [lo_g, hi_g)``, i.e. key blocks
``lo_g // s .. (hi_g - 1) // s``.  When no processor needs a block after its own
(``(hi_g - 1) // s <= g``: true for the bottom-right diagonal with Nq = Nkv, and for top-left),
it needs only the blocks up to ``S = max_g (g - lo_g // s)`` hops behind it, so the ring runs
S + 1 compute steps and S passes instead of P - 1:

    sent = received = 2·B·kv_heads·S·(Nkv/P)·d,   words per device = 4·B·kv_heads·S·(Nkv/P)·d

with ``S ≈ ⌈(W - 1)/s⌉`` (at most P - 1).  At step t processor g computes its rows against block
(g - t) mod P; a wrapped block lies after every key g's rows see, so it adds no pair, and the
work is the ring's.  Needs a window (without one S = P - 1: the ring).

**Backward** (:func:`execute_backward`): the same S + 1 steps, each processor adding its query
rows' pairs against the block it holds into its dQ (which stays: the rows are its own) and into a
partial dK, dV of that block; after step t >= 1 it sends that partial straight to the block's
owner, (g - t) mod P (2·B·kv_heads·(Nkv/P)·d words), and the ring's passes carry K and V only.
(Letting the partial ride with the block and go home after the last step, as the full ring does,
would send one more block: S + 1 sends instead of S.)  Processor g receives the partials of its
block from g + 1 .. g + S, so sent = received:

    sent = received = 2·B·kv_heads·S·(Nkv/P)·d  (K, V)  +  2·B·kv_heads·S·(Nkv/P)·d  (dK, dV)

that is ``8·B·kv_heads·S·(Nkv/P)·d`` words per device, against the full ring's backward
``8·B·kv_heads·Nkv·d`` (about).
"""

from __future__ import annotations

from typing import Any

from ..core.workload import Shape, kv_range
from .base import CommCost, Mapspace
from .cluster import Cluster, Layout
from .sequence import block_pairs, seq_layout, seq_reasons

NAME = "window_ring"
KIND = "contiguous"
LAYOUT = "sequence-sharded, contiguous"


def hops(shape: Shape, P: int) -> int | None:
    """S, the blocks behind its own that some processor needs; None when one needs a later
    block."""
    q, s = shape.Nq // P, shape.Nkv // P
    S = 0
    for g in range(P):
        lo, hi = kv_range(shape, g * q, (g + 1) * q)
        if hi <= lo:
            continue
        if (hi - 1) // s > g:
            return None
        S = max(S, g - lo // s)
    return S


def mapspace(shape: Shape, P: int) -> Mapspace:
    why = seq_reasons(shape, P, 1, KIND)
    if not why and shape.window is None:
        why.append(("window", "window_ring needs a sliding window (without one it is the ring)"))
    if not why and hops(shape, P) is None:
        why.append(("causal", "a processor needs keys of a later block (bottom-right diagonal "
                              "with Nq < Nkv): the ring passes blocks forward only"))
    return Mapspace(NAME, () if why else ({},), tuple(why))


def cost(shape: Shape, P: int, params: dict[str, Any] | None = None, *, work: bool = True
         ) -> CommCost:
    mapspace(shape, P).check(params)
    S = hops(shape, P)
    assert S is not None
    each = 2 * shape.n_kv_heads * S * (shape.Nkv // P) * shape.d
    w = None
    if work:
        w = tuple(shape.n_heads * block_pairs(shape, P, g, KIND) for g in range(P))
    per = (each,) * P
    return CommCost(NAME, {}, P, 2 * each, P * each, lambda: (per, per), w)


def cost_backward(shape: Shape, P: int, params: dict[str, Any] | None = None) -> CommCost:
    """The backward pass's closed form (module docstring), with the forward's work."""
    fwd = cost(shape, P, params)
    each = 2 * fwd.total // P
    per = (each,) * P
    return CommCost(NAME, {}, P, 2 * each, P * each, lambda: (per, per), fwd.work)


def footprint(shape: Shape, P: int, params: dict[str, Any] | None = None, *,
              backward: bool = False) -> tuple[int, ...]:
    """The most words of input rows each processor holds: its own rows and at most two foreign
    key/value blocks at once, ``min(2, S)`` (it frees a block once it has passed it on); a query
    row is d words forward, 2d + 2 backward."""
    mapspace(shape, P).check(params)
    S = hops(shape, P)
    assert S is not None
    d = shape.d
    qw = 2 * d + 2 if backward else d
    each = (qw * shape.n_heads * (shape.Nq // P)
            + 2 * d * shape.n_kv_heads * (shape.Nkv // P) * (1 + min(2, S)))
    return (each,) * P


def layout(shape: Shape, P: int, params: dict[str, Any] | None = None) -> Layout:
    return seq_layout(shape, P, 1, KIND)


def execute(cluster: Cluster, params: dict[str, Any] | None = None) -> None:
    shape, P = cluster.shape, cluster.P
    S = hops(shape, P)
    if S is None:
        raise mapspace(shape, P).error()
    q, s = shape.Nq // P, shape.Nkv // P
    heads = list(range(shape.n_heads))
    kvh = list(range(shape.n_kv_heads))
    for t in range(S + 1):
        for g in range(P):
            b = (g - t) % P
            cluster.compute(g, heads, range(g * q, (g + 1) * q), range(b * s, (b + 1) * s))
        if t < S:
            for g in range(P):
                b = (g - t) % P
                for ten in ("K", "V"):
                    cluster.send(g, (g + 1) % P, ten, kvh, range(b * s, (b + 1) * s))
        _free(cluster, t, S, kvh, s)


def _free(cl: Any, t: int, S: int, kvh: list[int], s: int) -> None:
    """After pass t (1 <= t < S) every processor frees the foreign block it passed on."""
    if 1 <= t < S:
        for g in range(cl.P):
            b = (g - t) % cl.P
            for ten in ("K", "V"):
                cl.drop(g, ten, kvh, range(b * s, (b + 1) * s))


def execute_backward(cl: Any, params: dict[str, Any] | None = None) -> None:
    """The backward schedule (module docstring) on any cluster with the backward referee's
    interface."""
    shape, P = cl.shape, cl.P
    S = hops(shape, P)
    if S is None:
        raise mapspace(shape, P).error()
    q, s = shape.Nq // P, shape.Nkv // P
    heads = list(range(shape.n_heads))
    kvh = list(range(shape.n_kv_heads))
    for t in range(S + 1):
        for g in range(P):
            b = (g - t) % P
            cl.compute(g, heads, range(g * q, (g + 1) * q), range(b * s, (b + 1) * s))
        if t >= 1:  # the partial dK, dV of the block just used goes straight home
            for g in range(P):
                b = (g - t) % P
                for ten in ("dK", "dV"):
                    cl.send(g, b, ten, kvh, range(b * s, (b + 1) * s))
        if t < S:
            for g in range(P):
                b = (g - t) % P
                for ten in ("K", "V"):
                    cl.send(g, (g + 1) % P, ten, kvh, range(b * s, (b + 1) * s))
        _free(cl, t, S, kvh, s)
