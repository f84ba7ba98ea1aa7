"""Sliding-window attention with a cache of K/V rows kept across consecutive query blocks.

Under a causal mask with a window W, query block i = [s_i, e_i) sees the keys
``[lo_i, hi_i)`` (``kv_range``: ``lo_i = clip(s_i + off - W + 1, 0, Nkv)``,
``hi_i = max(lo_i, clip(e_i + off, 0, Nkv))``, ``off`` the diagonal's offset: Nkv - Nq bottom-right,
0 top-left), a band about W + Br - 1 keys wide.  Both ends only move forward, and consecutive
blocks' bands overlap in about W - 1 keys (``lo_i <= hi_{i-1}``), so a block needs only the keys
``[max(hi_{i-1}, lo_i), hi_i)`` that the previous one did not have.

Schedule (``cache=True``)::

    Kc, Vc = ring buffers of C rows in fast memory (key c in slot c mod C),
        C = max_i (hi_i - lo_i) over the blocks that see a key (the widest band)
    for each query block i (Br rows), in order:
        if it sees no key: write O_i = 0;  continue
        for each key c in [max(hi_{i-1}, lo_i), hi_i)  (the first block that sees a key: [lo_i, hi_i)):
            load K[c] into Kc[c mod C];  load V[c] into Vc[c mod C]      (1 row at a time)
        load Q_i;  O_i = 0, m_i = -inf, l_i = 0
        for the chunks of Bc keys of [lo_i, hi_i) (all in the cache: no I/O):
            S = scale·Q_i Kc[chunk]^T (masked);  FlashAttention-2's online-softmax step
        O_i = diag(l_i)^-1 O_i;  write O_i

A slot overwritten by key c held key c - C < lo_i, which no later block needs (hi_i - lo_i <= C):
every key any block sees is read once.  The seen blocks are consecutive and their bands touch, so
the keys read are the one interval ``[lo_f, hi_l)`` (f, l the first and last block that sees a
key).  Closed form, per group of G query heads sharing the K/V head (``group``; heads/G groups):

    reads  = G·d·Σ_i [hi_i > lo_i]·rows_i  +  2·d·(hi_l - lo_f)
    writes = G·Nq·d

With bottom-right alignment and Nq = Nkv = N this is the trivial bound ``4·N·d`` for one head:
each of Q, K, V read once and O written once.  Fast memory: the two ring buffers, the block's
Q, O and m, l, a temporary per head, and one score tile of Br x Bc:

    footprint = 2·C·d + G·Br·(2d + 3) + Br·min(Bc, C)

(the one K or V row being copied into the ring, d words, fits in the score tile's room, as the
score tile is allocated after the copies).  For a window, ``C = W + Br - 1`` away from the ends
(:func:`attnio.core.masks.query_block_max_width` with one-key blocks), so the cache needs about
``2·(W + Br)·d`` words.  Without a window the band grows to the whole prefix (C up to Nkv) and,
unmasked, it is all of K and V: the cache then fits only when K and V do, as the K/V-resident
schedule (each row read once as well).

Fallback (``cache=False``): when the band does not fit, the band is streamed in chunks of Bc keys,
reloaded for every query block: FlashAttention-2's schedule and count at (Br, Bc, group)
(:mod:`attnio.algorithms.flash2`: ``reads = G·d·Σ_i [seen_i]·rows_i + 2·d·Σ_i cov_i``, cov_i the
width of the Bc blocks meeting the band, ``writes = G·Nq·d``).

Bulk counting.  Block i's words depend on its size, on whether it sees a key and on how many new
keys it loads; these are alike between O(1) cut points (the first and last block that sees a key,
the blocks that cross key 0 and key Nkv on the diagonal, the short last block), so a count runs
each stretch of alike blocks once (``uniform`` loops): a count at N = 10^9 takes milliseconds.
Tests hold the bulk count to the step-by-step one and both to the closed form.

Example: N = 4096, d = 64, W = 512, causal, M = 70,000: Br = 16 (C = 527), Bc = 28 fit
(69,552 + 448 = 70,000 words) and the count is 1,048,576 words, the trivial bound.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..core import masks
from ..core.errors import ParameterError
from ..core.memory import Block, FastTile, IOCount, TwoLevelMemory
from ..core.workload import Shape, cdiv, kv_range
from . import _kernels as K_
from . import mapper
from .base import GroupedAlgorithm, block_sizes, divisors_upto
from .common import HeadGroup
from .flash2 import ALGORITHM as _FLASH2
from .flash2 import Flash2Tiling


@dataclass(frozen=True)
class WindowCacheTiling:
    """Br query rows a block; Bc keys a score tile; ``cache``: keep the band's K/V rows across
    blocks (False: stream the band per block, FlashAttention-2's way); ``group`` query heads
    share the K/V head's cache."""

    Br: int
    Bc: int
    cache: bool = True
    group: int = 1


def capacity(shape: Shape, Br: int) -> int:
    """C: the widest band ``hi_i - lo_i`` over the query blocks of Br rows (the ring's rows):
    without a window every block's band starts at key 0 and ends where its last row's does,
    which grows with the block, so C is the last block's, ``clip(Nq + offset, 0, Nkv)`` (O(1));
    with a window, :func:`~attnio.core.masks.query_block_max_width` (O(log N))."""
    if not shape.causal:
        return shape.Nkv
    if shape.window is None:
        return max(0, min(shape.Nkv, shape.Nq + shape.offset))
    return masks.query_block_max_width(shape.Nq, shape.Nkv, min(Br, shape.Nq), 1, shape.offset,
                                       shape.window)


def _cache_fp(d: int, C: int, Br: int, Bc: int, G: int) -> int:
    return 2 * C * d + G * Br * (2 * d + 3) + Br * min(Bc, C)


def _seen_blocks(shape: Shape, Br: int) -> tuple[int, int]:
    """(f, l): the first and last query block of Br rows that sees a key (O(1))."""
    runs = [r for r in masks.Band.queries(shape).runs(Br) if r.seen]
    return runs[0].first, runs[-1].first + runs[-1].blocks - 1


def _block_range(shape: Shape, Br: int, i: int) -> tuple[int, int]:
    return kv_range(shape, i * Br, min(shape.Nq, (i + 1) * Br))


def new_keys(shape: Shape, Br: int, i: int, first: int) -> tuple[int, int]:
    """The keys block i loads into the cache: its band less what block i - 1 held."""
    lo, hi = _block_range(shape, Br, i)
    if i == first:
        return lo, hi
    return max(lo, _block_range(shape, Br, i - 1)[1]), hi


def _stretches(shape: Shape, Br: int, first: int, last: int) -> list[tuple[int, int]]:
    """Block-index stretches [a, b) whose blocks move alike words (module docstring)."""
    Tr = cdiv(shape.Nq, Br)
    cuts = {0, Tr, first, first + 1, last + 1}
    if shape.Nq % Br:
        cuts.add(Tr - 1)
    if shape.causal:
        for row in (-shape.offset, shape.Nkv - shape.offset):
            if 0 <= row < shape.Nq:
                cuts.update({row // Br, row // Br + 1})
    pts = sorted(c for c in cuts if 0 <= c <= Tr)
    return list(zip(pts, pts[1:]))


def _copy_row(c: int, C: int) -> Callable[..., None]:
    def fn(ring: np.ndarray, row: np.ndarray) -> None:
        ring[c % C] = row[0]
    return fn


def _band_step(shape: Shape, r0: int, lo: int, hi: int, C: int, Bc: int,
               scale: float) -> Callable[..., None]:
    """Query block rows r0.. against the cached keys [lo, hi), Bc keys at a time in the score
    tile S (FlashAttention-2's online softmax)."""
    off, window, causal = shape.offset, shape.window, shape.causal

    def fn(S: np.ndarray, m: np.ndarray, l: np.ndarray, t: np.ndarray, O: np.ndarray,
           Q: np.ndarray, Kc: np.ndarray, Vc: np.ndarray) -> None:
        for c0 in range(lo, hi, Bc):
            c1 = min(hi, c0 + Bc)
            slots = np.arange(c0, c1) % C
            s = S[:, :c1 - c0]
            np.matmul(Q, Kc[slots].T, out=s)
            s *= scale
            if causal:
                K_.apply_causal_mask(s, r0, c0, off, window)
            K_.online_update_fa2(s, m, l, t, O, Vc[slots])
    return fn


@dataclass(frozen=True)
class _Ring:
    """What every query block of a cached run shares: the block rows ``Br``, the first and last
    blocks that see a key, the ring's capacity ``C`` keys, the score block's width ``Bc`` and
    the K and V rings (fast tiles of C rows)."""

    Br: int
    first: int
    last: int
    C: int
    Bc: int
    Kc: FastTile
    Vc: FastTile


class WindowCache(GroupedAlgorithm[WindowCacheTiling]):
    name = "window_cache"
    summary = ("sliding window: K/V rows of the band cached across consecutive query blocks, each "
               "read once (or the band streamed per block when it does not fit)")
    Tiling = WindowCacheTiling
    supports_window = True
    supports_backward = True  # writes the logsumexp (Nq words a head) when asked

    def footprint(self, shape: Shape, tiling: WindowCacheTiling) -> int:
        if not tiling.cache:
            return _FLASH2.footprint(shape, self._flash2(tiling))
        Br = min(tiling.Br, shape.Nq)
        return _cache_fp(shape.d, capacity(shape, Br), Br, tiling.Bc, tiling.group)

    def min_M(self, shape: Shape) -> int:
        return _FLASH2.min_M(shape)  # the streaming fallback's

    @staticmethod
    def _flash2(tiling: WindowCacheTiling) -> Flash2Tiling:
        return Flash2Tiling(tiling.Br, tiling.Bc, tiling.group)

    def validate_tiling(self, shape: Shape, tiling: WindowCacheTiling) -> None:
        super().validate_tiling(shape, tiling)
        if not isinstance(tiling.cache, bool):
            raise ParameterError(f"tiling.cache must be True or False, got {tiling.cache!r}",
                                 param="tiling")

    def steps(self, shape: Shape, tiling: WindowCacheTiling) -> int:
        if not tiling.cache:
            return _FLASH2.steps(shape, self._flash2(tiling))
        C = capacity(shape, tiling.Br)
        return cdiv(shape.Nq, tiling.Br) * cdiv(C, min(tiling.Bc, C))

    def candidate_tilings(self, shape: Shape, M: int) -> list[WindowCacheTiling]:
        """Cached: for every group G and a few Br (the fewest blocks, powers of two), the widest
        score tile that fits with the ring; streamed: FlashAttention-2's candidates, as the
        mapper's branch and bound leaves them (:func:`~attnio.algorithms.mapper.pruned_tilings`:
        under a mask, those of least count)."""
        d, Nq = shape.d, shape.Nq
        out: list[WindowCacheTiling] = []
        for G in divisors_upto(shape.group, max(0, M // (2 * d + 3))):
            most = min(Nq, M // (G * (2 * d + 3) + 1))
            for Br in block_sizes(Nq, most):
                C = capacity(shape, Br)
                room = M - 2 * C * d - G * Br * (2 * d + 3)
                if room >= Br:
                    out.append(WindowCacheTiling(Br, min(C, room // Br), True, G))
        out.extend(WindowCacheTiling(t.Br, t.Bc, False, t.group)
                   for t in mapper.pruned_tilings(_FLASH2, shape, M))
        return out

    # ------------------------------------------------------------------ counts
    def _group_count(self, shape: Shape, tiling: WindowCacheTiling) -> IOCount:
        """The module docstring's closed forms (cached, or FlashAttention-2's when streamed)."""
        if not tiling.cache:
            return _FLASH2._group_count(shape, self._flash2(tiling))
        d, G, Br = shape.d, tiling.group, min(tiling.Br, shape.Nq)
        first, last = _seen_blocks(shape, Br)
        span = _block_range(shape, Br, last)[1] - _block_range(shape, Br, first)[0]
        if shape.causal:
            seen_rows = masks.query_block_sums(shape.Nq, shape.Nkv, Br, 1, shape.offset,
                                               shape.window).size_seen
        else:
            seen_rows = shape.Nq
        return IOCount(reads=G * d * seen_rows + 2 * d * span, writes=G * shape.Nq * d)

    # ------------------------------------------------------------------ the schedule
    def schedule_group(self, mem: TwoLevelMemory, heads: HeadGroup, *, shape: Shape,
                       tiling: WindowCacheTiling, scale: float) -> None:
        """Query heads ``heads.Qs`` (one group) against their K/V head; ``heads.lse``
        (optional) receives each row's logsumexp, for the backward pass."""
        if not tiling.cache:
            _FLASH2.schedule_group(mem, heads, shape=shape, tiling=self._flash2(tiling),
                                   scale=scale)
            return
        d, Nq = shape.d, shape.Nq
        Br = min(tiling.Br, Nq)
        C = capacity(shape, Br)
        Bc = min(tiling.Bc, C)
        first, last = _seen_blocks(shape, Br)
        Kc = mem.alloc((C, d), 0.0, label="K_cache")
        Vc = mem.alloc((C, d), 0.0, label="V_cache")
        ring = _Ring(Br, first, last, C, Bc, Kc, Vc)
        for a, b in _stretches(shape, Br, first, last):
            for qb in mem.blocks(Nq, Br, lo=a * Br, hi=min(Nq, b * Br)):  # alike: bulk runs one
                self._block(mem, heads, qb, shape, ring, scale)
        mem.free(Kc, Vc)

    def _block(self, mem: TwoLevelMemory, heads: HeadGroup, qb: Block, shape: Shape,
               ring: _Ring, scale: float) -> None:
        """Query block ``qb`` of the heads ``heads.Qs``: the keys new to it into the ring, then
        the block against the keys it sees there."""
        Qs, K, V, Os, lse = heads.Qs, heads.K, heads.V, heads.Os, heads.lse
        Br, first, last, C, Bc, Kc, Vc = (ring.Br, ring.first, ring.last, ring.C, ring.Bc,
                                          ring.Kc, ring.Vc)
        d = shape.d
        if not first <= qb.index <= last:  # no row of the block sees a key: its output is 0
            K_.store_empty_rows(mem, Os, qb, d, lse)
            return
        lo, hi = kv_range(shape, qb.start, qb.stop)
        n0, n1 = new_keys(shape, Br, qb.index, first)
        for kb in mem.blocks(shape.Nkv, 1, lo=n0, hi=n1):  # alike: bulk runs one
            for src, tile, label in ((K, Kc, "k_c"), (V, Vc, "v_c")):
                row = mem.load(src, kb, label=label)
                mem.compute(_copy_row(kb.start, C), tile, row, writes=1)
                mem.free(row)
        held = []
        for Q in Qs:
            Qi = mem.load(Q, qb, label="Q_i")
            Oi = mem.alloc((qb.size, d), 0.0, label="O_i")
            m = mem.alloc((qb.size,), -np.inf, label="m_i")
            l = mem.alloc((qb.size,), 0.0, label="l_i")
            t = mem.alloc((qb.size,), 0.0, label="tmp")
            held.append((Qi, Oi, m, l, t))
        S = mem.alloc((qb.size, Bc), label="S_ij")
        step = _band_step(shape, qb.start, lo, hi, C, Bc, scale)
        for g, (Qi, Oi, m, l, t) in enumerate(held):
            mem.compute(step, S, m, l, t, Oi, Qi, Kc, Vc, writes=5)
            if lse is not None:  # logsumexp = m + log l, written for the backward pass
                mem.compute(K_.logsumexp, t, m, l, writes=1)
                mem.store(t, lse[g], qb)
            mem.compute(K_.normalise_rows, Oi, l, writes=1)
            mem.store(Oi, Os[g], qb)
        mem.free(S)
        for Qi, Oi, m, l, t in held:
            mem.free(Qi, Oi, m, l, t)


ALGORITHM = WindowCache()
