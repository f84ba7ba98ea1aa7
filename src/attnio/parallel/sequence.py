"""The engine shared by the ring family and Ulysses: heads split over u processors, a ring over
r = P/u blocks of the sequence (docs/parallel.md, "The schedules").

Processor ``p = g·u + k``: ring position g in [0, r), Ulysses member k in [0, u).  The sequence
(of Nq query rows, and of Nkv key rows alike) is cut into r ring blocks of a layout kind
(contiguous, zigzag or striped: :func:`~attnio.parallel.cluster.sequence_rows`), and block g's
rows are dealt in order to the u members of group g, m = Nq/P query rows (and Nkv/P key rows)
each.  Member k owns query heads ``[k·H/u, (k+1)·H/u)`` of every batch element, which use
``K_u = kv_heads/u`` key/value heads (``kv_heads % u == 0``) or one (``u % kv_heads == 0``:
the key/value head is replicated on the u/kv_heads members that share it).

1. **Ulysses all-to-all** (u > 1): in each group, member k' sends member k its m query rows of
   k's heads and its Nkv/P key and value rows of k's key/value heads;
2. **ring**, r steps: at step t every processor computes its heads' query rows of block g
   against the key/value block (g - t) mod r it holds, then (t < r - 1) passes that block on to
   ring position g + 1 (same member);
3. **Ulysses all-to-all back** (u > 1): member k sends member k' the finished output rows of
   k's heads on k''s m rows.

After each pass (t >= 1) a processor frees the foreign block it passed on, so it holds at most
two foreign blocks at once, the one it computes with and the one arriving (double buffering):
:func:`seq_footprint`.

Counts (words; B = batch, H = heads, d head dimension), the same on every processor, sent =
received:

    Q and O:  2·B·(N_q/P)·d·H·(u - 1)/u          (steps 1 and 3)
    K and V:  2·B·(u - 1)·(N_kv/P)·d·K_u          (step 1)
    ring:     2·B·(r - 1)·(N_kv/r)·d·K_u          (step 2)

and the work of processor (g, k) is ``B·(H/u)·pairs(block g)``, the visible pairs of block g's
query rows with all keys (:func:`~attnio.parallel.geometry.ap_pairs`: one arithmetic
progression for contiguous and striped blocks, two for zigzag).
"""

from __future__ import annotations

from typing import Any

from ..core.workload import Shape
from .base import CommCost, ulysses_reason
from .cluster import Cluster, Layout, sequence_rows
from .geometry import ap_pairs

__all__ = ["block_pairs", "layout_reasons", "seq_cost", "seq_execute", "seq_layout"]


def kv_per_member(shape: Shape, u: int) -> int:
    """Key/value heads one member needs (per batch element)."""
    kv = shape.kv_heads
    assert kv is not None
    return kv // u if kv % u == 0 else 1


def layout_reasons(shape: Shape, P: int, r: int, kind: str) -> list[tuple[str, str]]:
    """Why the sequence layout (``kind`` over r ring blocks, P/r parts each) does not cover the
    sequences in equal parts."""
    out = []
    for name, n in (("Nq", shape.Nq), ("Nkv", shape.Nkv)):
        flag = name = "N" if shape.Nq == shape.Nkv else name
        if n % P:
            out.append((flag, f"{name}={n} is not a multiple of P={P}: the {kind} layout "
                              f"gives each processor an equal part of the sequence"))
        elif kind == "zigzag" and n % (2 * r):
            out.append((flag, f"{name}={n} is not a multiple of 2·{r}: the zigzag layout cuts "
                              f"the sequence into 2·{r} equal chunks"))
        if out:
            break
    return out


def seq_reasons(shape: Shape, P: int, u: int, kind: str) -> list[tuple[str, str]]:
    out = layout_reasons(shape, P, P // u, kind)
    why = ulysses_reason(shape, u)
    if why:
        out.append(why)
    return out


def seq_layout(shape: Shape, P: int, u: int, kind: str) -> Layout:
    return Layout.sequence(shape, P, kind, G=P // u)


def block_pairs(shape: Shape, r: int, g: int, kind: str) -> int:
    """Visible pairs (one head) of ring block g's query rows with every key."""
    n = shape.Nq
    if kind == "contiguous":
        s = n // r
        return ap_pairs(shape, g * s, 1, s)
    if kind == "zigzag":
        s = n // (2 * r)
        return ap_pairs(shape, g * s, 1, s) + ap_pairs(shape, (2 * r - 1 - g) * s, 1, s)
    return ap_pairs(shape, g, r, n // r)


def seq_cost(shape: Shape, P: int, u: int, kind: str, name: str, params: dict[str, Any],
             work: bool = True) -> CommCost:
    r = P // u
    B, H, d = shape.batch, shape.heads, shape.d
    Ku = kv_per_member(shape, u)
    mq, mk = shape.Nq // P, shape.Nkv // P
    each = (2 * B * mq * d * (H // u) * (u - 1)            # Q out, O back
            + 2 * B * (u - 1) * mk * d * Ku                # K, V to the heads' members
            + 2 * B * (r - 1) * (shape.Nkv // r) * d * Ku)  # the ring
    w = None
    if work:
        per_block = [B * (H // u) * block_pairs(shape, r, g, kind) for g in range(r)]
        w = tuple(per_block[p // u] for p in range(P))
    per = (each,) * P
    return CommCost(name, dict(params), P, 2 * each, P * each, lambda: (per, per), w)


def seq_footprint(shape: Shape, P: int, u: int, backward: bool = False) -> tuple[int, ...]:
    """The most words of input rows each processor holds: its layout's rows, the Ulysses rows of
    its heads (``B·(H/u)·(Nq/P)·(u - 1)`` query rows, ``B·K_u·(Nkv/P)·(u - 1)`` keys) and at
    most two foreign ring blocks at once (``B·K_u·(Nkv/r)·min(2, r - 1)`` keys: the one it
    computes with and the one arriving; it frees a foreign block once it has passed it on); a
    query row is d words forward, 2d + 2 backward (Q, dO, statistics), a key 2d (K, V)."""
    r = P // u
    B, d = shape.batch, shape.d
    Ku = kv_per_member(shape, u)
    mq, mk = shape.Nq // P, shape.Nkv // P
    rows_q = shape.n_heads * mq + B * (shape.heads // u) * mq * (u - 1)
    keys = (shape.n_kv_heads * mk + B * Ku * mk * (u - 1)
            + B * Ku * (shape.Nkv // r) * min(2, r - 1))
    each = (2 * d + 2 if backward else d) * rows_q + 2 * d * keys
    return (each,) * P


def member_heads(shape: Shape, u: int, k: int) -> list[int]:
    """The query heads (numbered b·heads + h) member k owns."""
    per = shape.heads // u
    return [b * shape.heads + h for b in range(shape.batch)
            for h in range(k * per, (k + 1) * per)]


def seq_execute(cluster: Cluster, u: int, kind: str) -> None:
    shape, P = cluster.shape, cluster.P
    r = P // u
    heads = [member_heads(shape, u, k) for k in range(u)]
    kvh = [sorted({int(j) for j in cluster.kv_head(h)}) for h in heads]
    qb = [sequence_rows(shape.Nq, r, g, kind) for g in range(r)]
    kb = [sequence_rows(shape.Nkv, r, g, kind) for g in range(r)]
    mq, mk = shape.Nq // P, shape.Nkv // P

    def part(rows, k, m):
        return rows[k * m:(k + 1) * m]

    for g in range(r):  # 1. Ulysses: sequence parts -> heads
        for k in range(u):
            for k2 in range(u):
                if k2 != k:
                    src, dst = g * u + k2, g * u + k
                    cluster.send(src, dst, "Q", heads[k], part(qb[g], k2, mq))
                    for ten in ("K", "V"):
                        cluster.send(src, dst, ten, kvh[k], part(kb[g], k2, mk))
    for t in range(r):  # 2. the ring
        for g in range(r):
            for k in range(u):
                cluster.compute(g * u + k, heads[k], qb[g], kb[(g - t) % r])
        if t < r - 1:
            for g in range(r):
                for k in range(u):
                    for tt in ("K", "V"):
                        cluster.send(g * u + k, ((g + 1) % r) * u + k, tt, kvh[k],
                                     kb[(g - t) % r])
            if t >= 1:  # each frees the foreign block it passed on (double buffering)
                for g in range(r):
                    for k in range(u):
                        for tt in ("K", "V"):
                            cluster.drop(g * u + k, tt, kvh[k], kb[(g - t) % r])
    for g in range(r):  # 3. Ulysses back: finished outputs to their owners
        for k in range(u):
            for k2 in range(u):
                if k2 != k:
                    cluster.send(g * u + k, g * u + k2, "O", heads[k], part(qb[g], k2, mq))
