"""USP, Ulysses x ring (Fang & Zhao, arXiv 2405.07719): heads split over u processors, a ring
over r = P/u groups; LoongTrain's double ring (arXiv 2406.18485) moves the same words.

Parameters: ``u``, a divisor of P with 1 < u < P (u = 1 is :mod:`~attnio.parallel.ring`,
u = P :mod:`~attnio.parallel.ulysses`), legal for the heads as Ulysses' is with u in place of P;
``ring``, the layout of the r ring blocks (``contiguous`` or ``zigzag``, the latter balancing
the causal work as in :mod:`~attnio.parallel.zigzag`).  Processor ``p = g·u + k`` (ring position
g, member k; :mod:`~attnio.parallel.sequence`).  Per processor (sent = received):

    Q and O:   2·B·(Nq/P)·d·H·(u - 1)/u
    K and V:   2·B·(u - 1)·(Nkv/P)·d·K_u          (the all-to-all inside the group)
    ring:      2·B·(r - 1)·(Nkv/r)·d·K_u          (r - 1 passes of a block of Nkv/r rows)

with ``K_u = kv_heads/u`` (or 1 when u is a multiple of kv_heads).  The ring term
≈ 2·B·Nkv·d·K_u is u times smaller than the plain ring's; the Ulysses terms need only u heads.
Work of (g, k): ``B·(H/u)·pairs(ring block g)``.
"""

from __future__ import annotations

from typing import Any

from ..core.workload import Shape
from .base import CommCost, Mapspace, divisors
from .cluster import Cluster, Layout
from .sequence import seq_cost, seq_execute, seq_layout, seq_reasons

NAME = "usp"
LAYOUT = "sequence-sharded: ring blocks (contiguous or zigzag) dealt to u members"
RINGS = ("contiguous", "zigzag")


def mapspace(shape: Shape, P: int) -> Mapspace:
    cands, reasons = [], []
    rings = RINGS[::-1] if shape.causal else RINGS  # causal: zigzag first (balanced work)
    for u in divisors(P)[1:-1]:
        for kind in rings:
            why = seq_reasons(shape, P, u, kind)
            if why:
                reasons.extend(why)
            else:
                cands.append({"u": u, "ring": kind})
    if len(divisors(P)) <= 2:
        reasons.insert(0, ("P", f"P={P} has no divisor u with 1 < u < P (USP needs both a "
                                f"Ulysses and a ring degree above 1)"))
    return Mapspace(NAME, tuple(cands), tuple(reasons))


def cost(shape: Shape, P: int, params: dict[str, Any] | None = None, *, work: bool = True
         ) -> CommCost:
    p = mapspace(shape, P).check(params)
    return seq_cost(shape, P, p["u"], p["ring"], NAME, p, work)


def layout(shape: Shape, P: int, params: dict[str, Any] | None = None) -> Layout:
    p = mapspace(shape, P).check(params)
    return seq_layout(shape, P, p["u"], p["ring"])


def execute(cluster: Cluster, params: dict[str, Any] | None = None) -> None:
    p = mapspace(cluster.shape, cluster.P).check(params)
    seq_execute(cluster, p["u"], p["ring"])
