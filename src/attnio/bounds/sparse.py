"""Bounds for block-sparse attention: a boolean layout of Br×Bc blocks says which blocks are
computed (FlashAttention's block-sparse algorithm, Dao et al. 2022, Algorithm 5).

The explicit bounds of :mod:`.forward` (Theorems A, B) and :mod:`.backward` (Theorems D, E) use
the mask only through P, the visible (query, key) pairs of rows that see at least two keys, so they
hold for a block layout with P counted from it (:func:`layout_row_counts`), and so does the
trivial bound (the Q, K, V rows the output depends on).  :func:`block_sparse_applicable` and
:func:`block_sparse_backward_applicable` list them.  FlashAttention's Proposition 4 is an upper
bound of its algorithm, ``Θ(Nd + N²d²s/M)`` (:func:`flash_block_sparse`, asymptotic); Theorem A with
P = s·N² is the matching explicit lower bound for M >> d² (about 3.35·sN²d²/M), Theorem B for
M << d².  Li et al.'s (arXiv 2410.09397) sparse lower bounds could not be read (only their
abstract was): they are not reproduced.

>>> import numpy as np
>>> rc = layout_row_counts(np.eye(4, dtype=bool), 64, 64, (16, 16))
>>> (rc.rows2, rc.pairs2, rc.k_rows, rc.v_rows)
(64, 1024, 64, 64)
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..core import masks
from ..core.checks import check_int, check_real
from ..core.errors import ParameterError
from .backward import backward_accum_pairs, backward_pooled_pairs
from .base import Bound, check_M, regime_of
from .forward import pv_segment_pairs, qkpv_pooled_pairs

__all__ = ["DAO_ET_AL", "block_sparse_applicable", "block_sparse_backward_applicable",
           "flash_block_sparse", "layout_row_counts"]

DAO_ET_AL = "Dao et al., FlashAttention (arXiv 2205.14135)"


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def layout_row_counts(layout: Any, Nq: int, Nkv: int,
                      block: tuple[int, int]) -> masks.RowCounts:
    """The rows and pairs a block layout leaves visible (per head), as :func:`masks.row_counts`.

    ``layout`` is a boolean array of ⌈Nq/Br⌉ × ⌈Nkv/Bc⌉ blocks (``block = (Br, Bc)``); a true
    block is computed in full (the last row and column of blocks may be partial).  O(blocks)."""
    Nq = check_int("Nq", Nq)
    Nkv = check_int("Nkv", Nkv)
    if not (isinstance(block, tuple) and len(block) == 2):
        raise ParameterError(f"block must be a pair (Br, Bc), got {block!r}", param="block")
    Br, Bc = check_int("block Br", block[0]), check_int("block Bc", block[1])
    lay = np.asarray(layout)
    want = (_cdiv(Nq, Br), _cdiv(Nkv, Bc))
    if lay.dtype != np.bool_:
        raise ParameterError(f"layout must be a boolean array, got dtype {lay.dtype}",
                             param="layout")
    if lay.shape != want:
        raise ParameterError(f"layout must have shape {want} (⌈Nq/Br⌉ × ⌈Nkv/Bc⌉ blocks for "
                             f"Nq={Nq}, Nkv={Nkv}, block=({Br}, {Bc})), got {lay.shape}",
                             param="layout")
    h = np.minimum(Br, Nq - Br * np.arange(want[0])).astype(np.int64)  # rows per block row
    w = np.minimum(Bc, Nkv - Bc * np.arange(want[1])).astype(np.int64)  # keys per block column
    keys = lay.astype(np.int64) @ w  # keys each row of a block row sees
    two, one = keys >= 2, keys >= 1
    rows1, rows2 = int(h[one].sum()), int(h[two].sum())
    pairs = int((h * keys).sum())
    pairs2 = int((h[two] * keys[two]).sum())
    k_rows = int(w[lay[two].any(axis=0)].sum()) if two.any() else 0
    v_rows = int(w[lay.any(axis=0)].sum())
    return masks.RowCounts(rows2, pairs2, pairs, k_rows, v_rows, rows1)


def _trivial(rc: masks.RowCounts, Nq: int, d: int, heads: int, kv_heads: int) -> Bound:
    value = heads * (rc.rows2 * d + Nq * d) + kv_heads * (rc.k_rows + rc.v_rows) * d
    return Bound(value, "trivial: inputs read once, output written once (block layout)",
                 ("every word of O is written at least once",
                  "every input word O depends on (generic inputs) is read at least once"),
                 True, name="trivial", regime="any M")


def _heads(heads: int, kv_heads: int | None) -> tuple[int, int]:
    heads = check_int("heads", heads)
    kv = heads if kv_heads is None else check_int("kv_heads", kv_heads)
    if heads % kv:
        raise ParameterError(f"heads must be a multiple of kv_heads, got heads={heads}, "
                             f"kv_heads={kv}", param="kv_heads")
    return heads, kv


def block_sparse_applicable(Nq: int, Nkv: int, d: int, M: int, layout: Any,
                            block: tuple[int, int], *, heads: int = 1,
                            kv_heads: int | None = None) -> list[Bound]:
    """The forward bounds for a block layout: trivial, Theorems A and B with P from the layout
    (explicit), and FlashAttention's Θ(Nd + N²d²s/M) (asymptotic) where its preconditions hold."""
    d, M = check_int("d", d), check_M(M)
    heads, kv = _heads(heads, kv_heads)
    rc = layout_row_counts(layout, Nq, Nkv, block)
    P = heads * rc.pairs2
    out = [_trivial(rc, Nq, d, heads, kv), pv_segment_pairs(P, d, M), qkpv_pooled_pairs(P, d, M)]
    s = rc.pairs / (Nq * Nkv)
    if Nq == Nkv and d <= M <= Nq * d and s > 0:
        out.append(flash_block_sparse(Nq, d, M, s, heads=heads))
    return out


def block_sparse_backward_applicable(Nq: int, Nkv: int, d: int, M: int, layout: Any,
                                     block: tuple[int, int], *, heads: int = 1,
                                     kv_heads: int | None = None) -> list[Bound]:
    """The backward bounds for a block layout: dO read and dQ, dK, dV written (trivial), and
    Theorems D and E with P from the layout (explicit)."""
    d, M = check_int("d", d), check_M(M)
    heads, kv = _heads(heads, kv_heads)
    rc = layout_row_counts(layout, Nq, Nkv, block)
    P = heads * rc.pairs2
    triv = heads * (rc.rows1 * d + Nq * d) + kv * 2 * Nkv * d
    return [Bound(triv, "trivial: dO read once, dQ, dK, dV written once (block layout)",
                  ("every word of dQ, dK, dV is written at least once",
                   "every dO_il of a row that sees a key is read"), True,
                  name="backward_trivial", regime="any M"),
            backward_accum_pairs(P, d, M), backward_pooled_pairs(P, d, M)]


def flash_block_sparse(N: int, d: int, M: int, s: float, *, heads: int = 1) -> Bound:
    """FlashAttention's Proposition 4: block-sparse FlashAttention needs ``Θ(Nd + N²d²s/M)`` HBM
    accesses, s the fraction of nonzero blocks, for ``d <= M <= Nd``.  It analyses that algorithm
    (an upper bound); reported as an asymptotic form with constant 1 (never a "count >= bound"
    claim).  Its explicit lower-bound counterpart is Theorem A with P = s·N² pairs."""
    N, d, M = check_int("N", N), check_int("d", d), check_M(M)
    s = check_real("s", s, lo=0, hi=1, lo_open=True)
    heads = check_int("heads", heads)
    if not d <= M <= N * d:
        raise ParameterError(f"M must be in [d, N·d] = [{d}, {N * d}] for Proposition 4, "
                             f"got M={M}", param="M")
    return Bound(heads * (N * d + N * N * d * d * s / M), f"{DAO_ET_AL}, Proposition 4",
                 ("block-sparse FlashAttention (Algorithm 5): an upper bound of that algorithm",
                  "s = fraction of nonzero blocks", "d <= M <= N·d"),
                 False, name="flash_block_sparse", regime=regime_of(d, M), constant=1.0)
