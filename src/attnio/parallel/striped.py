"""Striped ring attention (Brandon et al., arXiv 2311.09431): the ring on the striped layout.

Layout: row r of the sequence on processor r mod P (``Nq``, ``Nkv`` multiples of P).  The key/
value blocks (every P-th row) rotate as in the ring, so the words are the ring's:

    sent = received = 2·B·kv_heads·d·Nkv·(P - 1)/P

and the work of processor p is ``B·H`` times the visible keys summed over the rows
``p, p + P, p + 2P, ...`` (an arithmetic progression of the trapezoid row counts,
:func:`~attnio.parallel.geometry.ap_pairs`): causal, processor p sees ``Σ_t (p + 1 + tP + off)``
keys, so neighbours differ by only ``N/P`` pairs a head.
"""

from __future__ import annotations

from typing import Any

from ..core.workload import Shape
from .base import CommCost, Mapspace
from .cluster import Cluster, Layout
from .sequence import seq_cost, seq_execute, seq_layout, seq_reasons

NAME = "striped"
KIND = "striped"
LAYOUT = "sequence-sharded, striped (row r on r mod P)"


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
