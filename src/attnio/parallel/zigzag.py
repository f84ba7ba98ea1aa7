"""Zigzag ring attention (the load-balanced causal ring of ring-flash-attention and USP; Brandon
et al., arXiv 2311.09431 discuss the balance): the ring of :mod:`~attnio.parallel.ring` on the
zigzag layout.

Layout: the sequence is cut into 2P equal chunks (``Nq``, ``Nkv`` multiples of 2P); processor p
holds chunks p and 2P - 1 - p (one early, one late).  The key/value blocks (two chunks each)
rotate exactly as in the ring, so the words are the ring's:

    sent = received = 2·B·kv_heads·d·Nkv·(P - 1)/P

What changes is the work under a causal mask: processor p computes ``B·H·(pairs(chunk p) +
pairs(chunk 2P-1-p))``; with the bottom-right (or top-left, Nq = Nkv) diagonal the two chunks'
row sums are ``c·(p·c) + c(c+1)/2`` and ``c·((2P-1-p)·c) + c(c+1)/2`` (c the chunk), whose sum
``c²(2P - 1) + c(c+1)`` is the same for every p: the work is balanced exactly.
"""

from __future__ import annotations

from typing import Any

from ..core.workload import Shape
from .base import CommCost, Mapspace
from .cluster import Cluster, Layout
from .sequence import seq_cost, seq_execute, seq_layout, seq_reasons

NAME = "zigzag"
KIND = "zigzag"
LAYOUT = "sequence-sharded, zigzag (chunks p and 2P-1-p of 2P)"


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
