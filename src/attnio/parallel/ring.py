"""Ring attention (Liu, Zaharia & Abbeel, arXiv 2310.01889), contiguous layout.

Layout: processor p holds query, key, value and output rows ``[p·N/P, (p+1)·N/P)`` of every
head (``Nq`` and ``Nkv`` multiples of P).  The queries stay; the key/value blocks rotate: at step
t = 0 .. P-1 processor p computes its queries against block (p - t) mod P, then passes that block
to p + 1.  Each of the P - 1 passes sends and receives the block's K and V rows of every
key/value head, ``2·B·kv_heads·(Nkv/P)·d`` words, so per processor (sent = received):

    sent = received = 2·B·kv_heads·d·Nkv·(P - 1)/P,   words per device = 4·B·kv_heads·d·Nkv·(P - 1)/P

about 4·N·d·h_kv whatever P: it does not shrink as P grows.  Nothing else moves (the outputs are
finished where they are owned).  The mask changes no word (every block is passed on) but the
work: processor p computes ``B·H·pairs(rows of p)``, which under a causal mask grows with p
(the last processor does about 2P - 1 times the first's share): the imbalance the zigzag and
striped layouts remove.  This is the u = 1 case of :mod:`~attnio.parallel.sequence`.
"""

from __future__ import annotations

from typing import Any

from ..core.workload import Shape
from .base import CommCost, Mapspace
from .cluster import Cluster, Layout
from .sequence import seq_cost, seq_execute, seq_layout, seq_reasons

NAME = "ring"
KIND = "contiguous"
LAYOUT = "sequence-sharded, contiguous"


def mapspace(shape: Shape, P: int) -> Mapspace:
    why = seq_reasons(shape, P, 1, KIND)
    return Mapspace(NAME, () if why else ({},), tuple(why))


def cost(shape: Shape, P: int, params: dict[str, Any] | None = None, *, work: bool = True
         ) -> CommCost:
    mapspace(shape, P).check(params)
    return seq_cost(shape, P, 1, KIND, NAME, {}, work)


def layout(shape: Shape, P: int, params: dict[str, Any] | None = None) -> Layout:
    return seq_layout(shape, P, 1, KIND)


def execute(cluster: Cluster, params: dict[str, Any] | None = None) -> None:
    seq_execute(cluster, 1, KIND)
