"""DeepSpeed-Ulysses (Jacobs et al., arXiv 2309.14509): all-to-all from sequence-sharded to
head-sharded, attention on whole sequences, all-to-all back.

Layout: contiguous sequence shards (``Nq``, ``Nkv`` multiples of P).  Needs ``heads`` a multiple
of P, and ``kv_heads`` a multiple of P or a divisor of P (then each processor's query heads share
one key/value head, which is sent to each of the P/kv_heads processors that use it, as DeepSpeed
and Megatron replicate key/value heads).  Processor k gets query heads ``[k·H/P, (k+1)·H/P)``
and ``K_P`` key/value heads (kv_heads/P, or 1).  Per processor (sent = received):

    Q:     B·(Nq/P)·d·H·(P - 1)/P        its rows of the other processors' heads, and back
    K, V:  2·B·(P - 1)·(Nkv/P)·d·K_P
    O:     B·(Nq/P)·d·H·(P - 1)/P

so words per device = 2·B·d·(P - 1)/P·(2·Nq·H/P + 2·Nkv·K_P) ≈ 4·N·d·(H + h_kv)/P: it falls as
1/P, but only while the heads go round (P <= heads), and GQA with kv_heads < P pays the
replication (K_P = 1 instead of kv_heads/P).  The work of processor k is ``B·(H/P)·pairs(all
rows)``: balanced under every mask.  This is the r = 1 case of :mod:`~attnio.parallel.sequence`.
"""

from __future__ import annotations

from typing import Any

from ..core.workload import Shape
from .base import CommCost, Mapspace
from .cluster import Cluster, Layout
from .sequence import seq_cost, seq_execute, seq_layout, seq_reasons

NAME = "ulysses"
KIND = "contiguous"
LAYOUT = "sequence-sharded, contiguous (head-sharded in between)"


def mapspace(shape: Shape, P: int) -> Mapspace:
    why = seq_reasons(shape, P, P, KIND)
    return Mapspace(NAME, () if why else ({},), tuple(why))


def cost(shape: Shape, P: int, params: dict[str, Any] | None = None, *, work: bool = True
         ) -> CommCost:
    mapspace(shape, P).check(params)
    return seq_cost(shape, P, P, KIND, NAME, {}, work)


def layout(shape: Shape, P: int, params: dict[str, Any] | None = None) -> Layout:
    return seq_layout(shape, P, P, KIND)


def execute(cluster: Cluster, params: dict[str, Any] | None = None) -> None:
    seq_execute(cluster, cluster.P, KIND)
