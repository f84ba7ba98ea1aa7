"""The 2-D grid (Attention2D, arXiv 2503.15758), with an optional Ulysses split of the heads
(u x a x b): partial outputs merged by log-sum-exp.

Parameters: ``u`` (heads split over u processors, legal as for Ulysses; 1: no split), ``a``
query blocks and ``b`` key blocks, ``u·a·b = P`` and ``a·b >= 2`` (a·b = 1 is Ulysses).
Layout: contiguous sequence shards (``Nq``, ``Nkv`` multiples of P).  Processor
``p = q·u + k``: grid cell ``q = i·b + j`` (row i, column j), member k.  Cut each sequence into
``a·b`` grid chunks (cq = Nq/(ab) query rows, ck = Nkv/(ab) key rows); chunk q is held, after the
Ulysses all-to-all inside the group of u processors of cell q (as in
:mod:`~attnio.parallel.sequence`), by member k for its heads.  Query block i is the chunks
``i·b .. i·b + b - 1`` (the cells of grid row i); key block j the chunks ``j·a .. j·a + a - 1``.

1. Ulysses all-to-all in each cell's group (u > 1);
2. cell (i, j) gathers query block i from the b - 1 other cells of its row and key/value block j
   from the cells holding its chunks (a of them, itself among them iff ``q // a == q mod b``:
   δ_q = 1);
3. it computes its query block against its key block (its heads), a partial output with the
   log-sum-exp of every row;
4. it sends the partial outputs of the b - 1 other chunks of its row to their cells (d + 1 words
   a row), which merge them: a reduce-scatter;
5. the Ulysses all-to-all back (u > 1).

Per processor in cell q (H_u = H/u query heads, K_u key/value heads per member, B batch; sent =
received, by the symmetry of each step):

    Ulysses:   2·B·(Nq/P)·d·H_u·(u - 1) + 2·B·(u - 1)·(Nkv/P)·d·K_u
    Q:         B·(b - 1)·cq·d·H_u
    K, V:      2·B·(a - δ_q)·ck·d·K_u
    partials:  B·(b - 1)·cq·(d + 1)·H_u

The processors with δ_q = 0 (any, when a, b >= 2) carry the critical path.  With u = 1,
a = b = √P and N = Nq = Nkv the words per device are about ``4·(H + H_kv)·N·d/√P`` (Q gathered,
partials scattered: N·d·H/√P each way; K and V: 2·N·d·H_kv/√P each way), against the ring's
``4·N·d·H_kv``.  Work of cell (i, j):
``B·H_u·rect(query block i, key block j)``.

**Backward** (:func:`execute_backward`, on :class:`~attnio.parallel.backward.BackwardCluster`):
the same five steps with the backward's rows.  1. the Ulysses all-to-all moves Q, dO and the
statistics (2d + 2 words a row) and K, V; 2. cell (i, j) gathers Q, dO and the statistics of query
block i (b - 1 chunks) and K, V of key block j (a - δ_q chunks); 3. it adds every pair of its
block to its partial dQ of query block i and its partial dK, dV of key block j; 4. it sends the dQ
partials of the b - 1 other chunks of its row to their cells, and the dK, dV partials of the
a - δ_q other chunks of its key block to the cells holding them (a reduce-scatter each way);
5. the Ulysses all-to-all back moves the finished dQ rows and the dK, dV partials to their
owners.  Each step is symmetric (a cell receives from the cells it sends to, the same sizes), so
per processor in cell q, sent = received:

    Ulysses:    B·(Nq/P)·H_u·(u - 1)·(3d + 2) + 4·B·(u - 1)·(Nkv/P)·d·K_u
    query side: B·(b - 1)·cq·H_u·(3d + 2)       (Q, dO, statistics in; dQ partials out)
    key side:   4·B·(a - δ_q)·ck·d·K_u           (K, V in; dK, dV partials out)

and the work is the forward's.  With u = 1 and a = b = √P about ``(6·H + 8·H_kv)·N·d/√P`` words
per device, against the ring's backward ``8·N·d·H_kv`` (``4·N·d·H_kv`` each way).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..core.workload import Shape
from .base import CommCost, Mapspace, divisors, ulysses_reason
from .cluster import Cluster, Layout
from .geometry import rect_pairs
from .sequence import kv_per_member, layout_reasons, member_heads

NAME = "grid"
LAYOUT = "sequence-sharded, contiguous (the grid's blocks gathered from it)"


def mapspace(shape: Shape, P: int) -> Mapspace:
    reasons = list(layout_reasons(shape, P, P, "contiguous"))
    cands: list[dict[str, Any]] = []
    if not reasons:
        for u in divisors(P):
            why = ulysses_reason(shape, u)
            if why:
                reasons.append(why)
                continue
            for a in divisors(P // u):
                b = P // u // a
                if a * b >= 2:
                    cands.append({"u": u, "a": a, "b": b})
    if P == 1:
        reasons.insert(0, ("P", "P=1 has no grid of two or more cells"))
    return Mapspace(NAME, tuple(cands), tuple(reasons))


def _delta(a: int, b: int, q: int) -> int:
    return 1 if q // a == q % b else 0


def cost(shape: Shape, P: int, params: dict[str, Any] | None = None, *, work: bool = True
         ) -> CommCost:
    p = mapspace(shape, P).check(params)
    u, a, b = p["u"], p["a"], p["b"]
    B, d = shape.batch, shape.d
    Hu, Ku = shape.heads // u, kv_per_member(shape, u)
    cq, ck = shape.Nq // (a * b), shape.Nkv // (a * b)
    base = (2 * B * (shape.Nq // P) * d * Hu * (u - 1) + 2 * B * (u - 1) * (shape.Nkv // P) * d * Ku
            + B * (b - 1) * cq * d * Hu + B * (b - 1) * cq * (d + 1) * Hu)
    kv0, kv1 = (2 * B * (a - dl) * ck * d * Ku for dl in (0, 1))
    cell_ix = np.arange(a * b)
    n1 = int(np.count_nonzero(cell_ix // a == cell_ix % b))  # cells holding one of their key chunks
    peak = 2 * (base + (kv0 if n1 < a * b else kv1))
    total = P * base + u * ((a * b - n1) * kv0 + n1 * kv1)

    def per_processor() -> tuple[tuple[int, ...], tuple[int, ...]]:
        each = tuple(base + (kv1 if _delta(a, b, pp // u) else kv0) for pp in range(P))
        return each, each

    w = None
    if work:
        cell = []
        for q in range(a * b):
            i, j = divmod(q, b)
            cell.append(B * Hu * rect_pairs(shape, i * b * cq, (i + 1) * b * cq,
                                            j * a * ck, (j + 1) * a * ck))
        w = tuple(cell[pp // u] for pp in range(P))
    return CommCost(NAME, p, P, peak, total, per_processor, w)


def cost_backward(shape: Shape, P: int, params: dict[str, Any] | None = None) -> CommCost:
    """The backward pass's closed form (module docstring), with the forward's work."""
    p = mapspace(shape, P).check(params)
    u, a, b = p["u"], p["a"], p["b"]
    B, d = shape.batch, shape.d
    Hu, Ku = shape.heads // u, kv_per_member(shape, u)
    cq, ck = shape.Nq // (a * b), shape.Nkv // (a * b)
    base = (B * (shape.Nq // P) * Hu * (u - 1) * (3 * d + 2)
            + 4 * B * (u - 1) * (shape.Nkv // P) * d * Ku + B * (b - 1) * cq * Hu * (3 * d + 2))
    kv0, kv1 = (4 * B * (a - dl) * ck * d * Ku for dl in (0, 1))
    cell_ix = np.arange(a * b)
    n1 = int(np.count_nonzero(cell_ix // a == cell_ix % b))
    peak = 2 * (base + (kv0 if n1 < a * b else kv1))
    total = P * base + u * ((a * b - n1) * kv0 + n1 * kv1)

    def per_processor() -> tuple[tuple[int, ...], tuple[int, ...]]:
        each = tuple(base + (kv1 if _delta(a, b, pp // u) else kv0) for pp in range(P))
        return each, each

    return CommCost(NAME, p, P, peak, total, per_processor, cost(shape, P, p).work)


def footprint(shape: Shape, P: int, params: dict[str, Any] | None = None, *,
              backward: bool = False) -> tuple[int, ...]:
    """The most words of input rows each processor holds (the grid keeps what it gathers): its
    layout's rows, the Ulysses rows of its heads, and the gathered query and key blocks; a query
    row is d words forward, 2d + 2 backward (Q, dO, statistics), a key 2d (K, V)."""
    p = mapspace(shape, P).check(params)
    u, a, b = p["u"], p["a"], p["b"]
    B, d = shape.batch, shape.d
    Hu, Ku = shape.heads // u, kv_per_member(shape, u)
    mq, mk = shape.Nq // P, shape.Nkv // P
    cq, ck = shape.Nq // (a * b), shape.Nkv // (a * b)
    qw = 2 * d + 2 if backward else d
    rows_q = shape.n_heads * mq + B * Hu * mq * (u - 1) + B * Hu * (b - 1) * cq
    return tuple(qw * rows_q + 2 * d * (shape.n_kv_heads * mk + B * Ku * mk * (u - 1)
                                         + B * Ku * (a - _delta(a, b, pp // u)) * ck)
                 for pp in range(P))


def layout(shape: Shape, P: int, params: dict[str, Any] | None = None) -> Layout:
    mapspace(shape, P).check(params)
    return Layout.sequence(shape, P, "contiguous")


@dataclass(frozen=True)
class _Grid:
    """One run's placement (module docstring): u members per cell (Ulysses), a x b cells, the
    heads and K/V heads of member k, the row chunks of a cell and of a member."""

    u: int
    a: int
    b: int
    heads: list[Any]
    kvh: list[list[int]]
    cq: int
    ck: int
    mq: int
    mk: int

    @property
    def cells(self) -> int:
        return self.a * self.b

    def qchunk(self, q: int) -> range:
        return range(q * self.cq, (q + 1) * self.cq)

    def kchunk(self, q: int) -> range:
        return range(q * self.ck, (q + 1) * self.ck)


def _in_and_compute(cl: Any, params: dict[str, Any] | None, qside: tuple[str, ...]) -> _Grid:
    """Steps 1-3 of the forward and the backward schedule alike: Ulysses in (the ``qside``
    arrays and K, V of each member's heads), the gather of each cell's blocks, the compute."""
    shape, P = cl.shape, cl.P
    p = mapspace(shape, P).check(params)
    u, a, b = p["u"], p["a"], p["b"]
    heads = [member_heads(shape, u, k) for k in range(u)]
    g = _Grid(u, a, b, heads, [sorted({int(j) for j in cl.kv_head(h)}) for h in heads],
              shape.Nq // (a * b), shape.Nkv // (a * b), shape.Nq // P, shape.Nkv // P)
    qchunk, kchunk, kvh, mq, mk = g.qchunk, g.kchunk, g.kvh, g.mq, g.mk
    for q in range(g.cells):  # 1. Ulysses inside each cell
        for k in range(u):
            for k2 in range(u):
                if k2 != k:
                    src, dst = q * u + k2, q * u + k
                    for t in qside:
                        cl.send(src, dst, t, heads[k], qchunk(q)[k2 * mq:(k2 + 1) * mq])
                    for t in ("K", "V"):
                        cl.send(src, dst, t, kvh[k], kchunk(q)[k2 * mk:(k2 + 1) * mk])
    for q in range(g.cells):  # 2. gather the blocks
        i, j = divmod(q, b)
        for k in range(u):
            me = q * u + k
            for j2 in range(b):
                if j2 != j:
                    for t in qside:
                        cl.send((i * b + j2) * u + k, me, t, heads[k], qchunk(i * b + j2))
            for q2 in range(j * a, (j + 1) * a):
                if q2 != q:
                    for t in ("K", "V"):
                        cl.send(q2 * u + k, me, t, kvh[k], kchunk(q2))
    for q in range(g.cells):  # 3. compute
        i, j = divmod(q, b)
        for k in range(u):
            cl.compute(q * u + k, heads[k], range(i * b * g.cq, (i + 1) * b * g.cq),
                       range(j * a * g.ck, (j + 1) * a * g.ck))
    return g


def execute(cluster: Cluster, params: dict[str, Any] | None = None) -> None:
    g = _in_and_compute(cluster, params, ("Q",))
    u, b, heads, cells, qchunk, mq = g.u, g.b, g.heads, g.cells, g.qchunk, g.mq
    for q in range(cells):  # 4. reduce-scatter of the partial outputs
        i, j = divmod(q, b)
        for k in range(u):
            for j2 in range(b):
                if j2 != j:
                    cluster.send(q * u + k, (i * b + j2) * u + k, "part", heads[k],
                                 qchunk(i * b + j2))
    for q in range(cells):  # 5. Ulysses back
        for k in range(u):
            for k2 in range(u):
                if k2 != k:
                    cluster.send(q * u + k, q * u + k2, "O", heads[k],
                                 qchunk(q)[k2 * mq:(k2 + 1) * mq])


def execute_backward(cl: Any, params: dict[str, Any] | None = None) -> None:
    """The backward schedule (module docstring) on any cluster with the backward referee's
    interface (:class:`~attnio.parallel.backward.BackwardCluster` or the torch.distributed
    one)."""
    g = _in_and_compute(cl, params, ("Q", "dO", "stats"))
    u, a, b, heads, kvh, cells = g.u, g.a, g.b, g.heads, g.kvh, g.cells
    qchunk, kchunk, mq, mk = g.qchunk, g.kchunk, g.mq, g.mk
    for q in range(cells):  # 4. reduce-scatter of the partial gradients, both ways
        i, j = divmod(q, b)
        for k in range(u):
            me = q * u + k
            for j2 in range(b):
                if j2 != j:
                    cl.send(me, (i * b + j2) * u + k, "dQ", heads[k], qchunk(i * b + j2))
            for q2 in range(j * a, (j + 1) * a):
                if q2 != q:
                    for t in ("dK", "dV"):
                        cl.send(me, q2 * u + k, t, kvh[k], kchunk(q2))
    for q in range(cells):  # 5. Ulysses out
        for k in range(u):
            for k2 in range(u):
                if k2 != k:
                    src, dst = q * u + k, q * u + k2
                    cl.send(src, dst, "dQ", heads[k], qchunk(q)[k2 * mq:(k2 + 1) * mq])
                    for t in ("dK", "dV"):
                        cl.send(src, dst, t, kvh[k], kchunk(q)[k2 * mk:(k2 + 1) * mk])
