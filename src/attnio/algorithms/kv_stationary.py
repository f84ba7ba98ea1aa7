"""K/V-stationary attention: a block of K and V held while every query streams past it, the partial
outputs (with their running max and sum) spilled to slow memory and merged.

Schedule (the loop order of FlashAttention-1, with FlashAttention-2's unnormalised accumulator and a
score tile narrower than the K/V block)::

    for each key/value block j (Bc rows) seen by some query:         # outer loop
        load K_j, V_j                                                   # once, for every query head
        for each query head h of the K/V head's group, each query block i (Br rows) seeing block j:
            load Q_i
            if block j is not the first block i sees: load O_i, m_i, l_i (the spilled partial)
            else: O_i = 0, m_i = -inf, l_i = 0 in fast memory
            for each chunk c of Bs keys of K_j:                         # resident: no I/O
                S = scale · Q_i K_j[c]ᵀ (Br x Bs, masked);  online-softmax update of (m_i, l_i, O_i)
            if block j is the last block i sees: O_i = diag(l_i)⁻¹ O_i; write O_i
            else: write O_i, m_i, l_i (the partial, unnormalised)

Closed form.  Query block i sees keys [lo_i, hi_i) (``kv_range``); it meets n_i key blocks
(n_i = 0 when it sees none: its O_i is written as zeros, no input read).  Key block j is loaded iff
some query sees it (``vis_j``).  Every visit (i, j) reads Q_i (rows_i·d); every visit but the first
reads the partial (rows_i·(d + 2)) and every visit but the last writes it (rows_i·(d + 2)); the last
writes O_i (rows_i·d).  With R = Σ_i rows_i·n_i and R₁ = Σ_i [n_i > 0]·rows_i (O(log N) by
:func:`attnio.core.masks.query_block_sums`, fields ``size_count`` and ``size_seen``) and
C = Σ_j vis_j·Bc_j (:func:`attnio.core.masks.key_block_sums`, ``size_seen``), per K/V head with g
query heads::

    reads  = 2·d·C + g·(d·R + (d + 2)·(R - R₁))
    writes = g·(Nq·d + (d + 2)·(R - R₁))

Unmasked (n_i = Tc = ⌈Nkv/Bc⌉): ``reads = 2·Nkv·d + g·Nq·(Tc·d + (Tc - 1)(d + 2))``,
``writes = g·Nq·(d + (Tc - 1)(d + 2))``.  With Tc = 1 (K and V fit) this is the trivial bound
(every input word read once, O written once): at Nq = 48, Nkv = 32, d = 3, M = 216 it moves
2·96 + 144 + 144 = 480 words where FlashAttention-2 moves 864.

Fast memory: K_j, V_j (2·Bc·d), Q_i, O_i (2·Br·d), m_i, l_i and a temporary (3·Br), the score chunk
(Br·Bs): ``footprint = 2·Bc·d + Br·(2d + 3) + Br·Bs``; the least M is 4d + 4 (Bc = Br = Bs = 1).
One query head at a time, so grouped-query attention costs no more fast memory and loads each K/V
block once for the whole group.

Tiling.  The count depends on (Bc, Br) only (not on Bs: the chunks of a resident block move
nothing), and unmasked on Tc only; the candidates are the Bc of the fewest key blocks (and a few
more blocks), Br from 1 to the largest that fits, and the widest chunk Bs that still fits (fewer,
larger steps at equal I/O).  Under a causal mask the count never falls as Br grows, so the
search bounds each candidate by its Bc's count at Br = 1 (``_lower_total``) and scores only
those that can still win.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from ..core import masks
from ..core.memory import Block, FastTile, IOCount, SlowArray, TwoLevelMemory
from ..core.workload import Shape, cdiv, kv_range, q_range
from . import _kernels as K_
from .base import Algorithm


@dataclass(frozen=True)
class KVStationaryTiling:
    """Bc key/value rows held; Br query rows per visit; score chunks of Bs keys."""

    Bc: int
    Br: int
    Bs: int = 1


@dataclass(frozen=True)
class _Run:
    """What every visit of one K/V head's run shares: the workload, the score scale, the chunk
    width ``Bs`` and the spilled partials of the group's query rows (slow-memory scratch of
    G·Nq rows: ``Op`` the outputs, ``mp`` and ``lp`` the running max and sum)."""

    shape: Shape
    scale: float
    Bs: int
    Op: SlowArray
    mp: SlowArray
    lp: SlowArray


def _fp(d: int, Bc: int, Br: int, Bs: int) -> int:
    return 2 * Bc * d + Br * (2 * d + 3) + Br * Bs


def _chunked_update(scale: float, r0: int, c0: int, shape: Shape,
                    Bs: int) -> Callable[..., None]:
    """The online-softmax update of (m, l, O) by the resident K_j, V_j, Bs keys at a time through
    the score tile S (Br x Bs), masked by the shape's causal/window mask."""
    off, window, causal = shape.offset, shape.window, shape.causal

    def fn(S: np.ndarray, m: np.ndarray, l: np.ndarray, t: np.ndarray, O: np.ndarray,
           Q: np.ndarray, Kj: np.ndarray, Vj: np.ndarray) -> None:
        n = Kj.shape[0]
        for c in range(0, n, Bs):
            w = min(Bs, n - c)
            s = S[:, :w]
            np.matmul(Q, Kj[c:c + w].T, out=s)
            s *= scale
            if causal:
                K_.apply_causal_mask(s, r0, c0 + c, off, window)
            K_.online_update_fa2(s, m, l, t, O, Vj[c:c + w])

    return fn


def _first(lo: int, hi: int, pred: Callable[[int], bool]) -> int:
    """The least i in [lo, hi) with ``pred(i)`` (a monotone predicate: False then True), or hi."""
    while lo < hi:
        mid = (lo + hi) // 2
        if pred(mid):
            hi = mid
        else:
            lo = mid + 1
    return lo


@functools.lru_cache(maxsize=1024)
def _keys_met(Nq: int, Nkv: int, Bc: int, off: int, window: int | None) -> int:
    """Under a causal mask, the keys of the Bc-key blocks some query row sees
    (:func:`~attnio.core.masks.key_block_sums`' ``size_seen``): a key block is seen when the
    rows that see one of its keys are not empty, whatever the query blocks, so it is taken at
    Br = 1 and cached per Bc (the search asks it of a few Bc, for many Br)."""
    return masks.key_block_sums(Nq, Nkv, 1, Bc, off, window).size_seen


class KVStationary(Algorithm[KVStationaryTiling]):
    name = "kv_stationary"
    summary = ("K/V-stationary: a K/V block held while all queries stream past, partial outputs "
               "with their running max and sum spilled and merged")
    Tiling = KVStationaryTiling
    supports_window = True

    def footprint(self, shape: Shape, tiling: KVStationaryTiling) -> int:
        return _fp(shape.d, min(tiling.Bc, shape.Nkv), min(tiling.Br, shape.Nq),
                   min(tiling.Bs, tiling.Bc, shape.Nkv))

    def min_M(self, shape: Shape) -> int:
        return _fp(shape.d, 1, 1, 1)

    def steps(self, shape: Shape, tiling: KVStationaryTiling) -> int:
        return cdiv(shape.Nkv, tiling.Bc) * cdiv(shape.Nq, tiling.Br)

    def candidate_tilings(self, shape: Shape, M: int) -> list[KVStationaryTiling]:
        d, Nq, Nkv = shape.d, shape.Nq, shape.Nkv
        bc_max = min(Nkv, (M - (2 * d + 4)) // (2 * d))
        if bc_max < 1:
            return []
        tc_min = cdiv(Nkv, bc_max)
        out = []
        for Tc in range(tc_min, min(Nkv, tc_min + 4) + 1):
            Bc = cdiv(Nkv, Tc)
            room = M - 2 * Bc * d
            br_max = min(Nq, room // (2 * d + 4))
            if br_max < 1:
                continue
            brs = {br_max, 1}
            if shape.causal:
                b = 2
                while b < br_max:
                    brs.add(b)
                    b *= 2
            for Br in sorted(brs):
                Bs = min(Bc, (room - Br * (2 * d + 3)) // Br)
                if Bs >= 1:
                    out.append(KVStationaryTiling(Bc, Br, Bs))
        return out

    # ------------------------------------------------------------------ counts
    def _kv_count(self, shape: Shape, tiling: KVStationaryTiling, g: int) -> IOCount:
        """Words moved for one K/V head and its g query heads."""
        d, Nq, Nkv = shape.d, shape.Nq, shape.Nkv
        Bc, Br = min(tiling.Bc, Nkv), min(tiling.Br, Nq)
        if shape.causal:
            qs = masks.query_block_sums(Nq, Nkv, Br, Bc, shape.offset, shape.window)
            R, R1, C = qs.size_count, qs.size_seen, _keys_met(Nq, Nkv, Bc, shape.offset,
                                                              shape.window)
        else:
            Tc = cdiv(Nkv, Bc)
            R, R1, C = Nq * Tc, Nq, Nkv
        spill = (d + 2) * (R - R1)
        return IOCount(reads=2 * d * C + g * (d * R + spill), writes=g * (Nq * d + spill))

    def _predict(self, shape: Shape, tiling: KVStationaryTiling) -> IOCount:
        return self._kv_count(shape, tiling, 1)

    def _lower_total(self, shape: Shape) -> Callable[[KVStationaryTiling], float] | None:
        """Under a causal mask without a window, a bound for the search's branch and bound:
        the count at Br = 1 with the same Bc (computed once per Bc).  The count never falls as
        Br grows: a query block sees the keys [0, hi_i) of its last row, so
        ``n_i = ⌈hi_i/Bc⌉ >= ⌈hi_r/Bc⌉`` for each of its rows r, hence R >= Σ_r ⌈hi_r/Bc⌉ (its
        value at Br = 1) and R - R₁ = Σ_{hi_i > 0} rows_i·(n_i - 1) >= Σ_{hi_r > 0}
        (⌈hi_r/Bc⌉ - 1); C (the keys of the key blocks some query sees, every key block from
        its first key's row on) does not depend on Br; and the count rises with R and R - R₁.
        The candidates share a few Bc (those of the fewest key blocks and four more), so the
        search scores a few of each instead of every one.  None otherwise (unmasked the count
        depends on Bc alone and costs no more than a bound)."""
        if not shape.causal or shape.window is not None or shape.block_mask is not None:
            return None
        at_one: dict[int, int] = {}

        def lower(t: KVStationaryTiling) -> float:
            Bc = min(t.Bc, shape.Nkv)
            if Bc not in at_one:
                at_one[Bc] = self._total(shape, KVStationaryTiling(Bc, 1, 1)).total
            return at_one[Bc]
        return lower

    def _total(self, shape: Shape, tiling: KVStationaryTiling) -> IOCount:
        return self._kv_count(shape, tiling, shape.group).scaled(shape.n_kv_heads)

    # ------------------------------------------------------------------ the schedule
    def run_schedule(self, mem: TwoLevelMemory, arrays: Mapping[str, SlowArray], *,
                     shape: Shape, tiling: KVStationaryTiling, scale: float) -> None:
        """Every K/V head with the query heads of its group (each K/V block loaded once for all
        of them)."""
        if arrays.get("L") is not None:  # the base class's message: no backward pass
            super().run_schedule(mem, arrays, shape=shape, tiling=tiling, scale=scale)
            return
        Q, K, V, O = arrays["Q"], arrays["K"], arrays["V"], arrays["O"]
        G, Nq, Nkv = shape.group, shape.Nq, shape.Nkv
        for hb in mem.blocks(shape.n_kv_heads, 1):  # alike: bulk count mode runs one
            kvh = hb.start
            ks = slice(kvh * Nkv, (kvh + 1) * Nkv)

            def head(g: int, kvh: int = kvh) -> tuple[SlowArray, SlowArray]:
                h = kvh * G + g  # query heads are stacked group by group
                rows = slice(h * Nq, (h + 1) * Nq)
                return mem.view(Q, rows, f"Q[{h}]"), mem.view(O, rows, f"O[{h}]")

            self.schedule_group(mem, head, G, mem.view(K, ks, f"K[{kvh}]"),
                                mem.view(V, ks, f"V[{kvh}]"), shape=shape, tiling=tiling,
                                scale=scale)

    def schedule(self, mem: TwoLevelMemory, Q: SlowArray, K: SlowArray, V: SlowArray,
                 O: SlowArray, *, shape: Shape, tiling: KVStationaryTiling, scale: float) -> None:
        self.schedule_group(mem, lambda g: (Q, O), 1, K, V, shape=shape, tiling=tiling,
                            scale=scale)

    def schedule_group(self, mem: TwoLevelMemory,
                       head: Callable[[int], tuple[SlowArray, SlowArray]], G: int,
                       K: SlowArray, V: SlowArray, *, shape: Shape, tiling: KVStationaryTiling,
                       scale: float) -> None:
        """One K/V head with the ``G`` query heads of its group (``head(g)``: the g-th one's Q
        and O); the heads move alike words, so bulk count mode runs one of them."""
        d, Nq, Nkv = shape.d, shape.Nq, shape.Nkv
        Bc, Br = min(tiling.Bc, Nkv), min(tiling.Br, Nq)
        Bs = min(tiling.Bs, Bc)
        Op = mem.scratch("kvs_O_part", (G * Nq, d))
        mp = mem.scratch("kvs_m_part", (G * Nq,))
        lp = mem.scratch("kvs_l_part", (G * Nq,))
        run = _Run(shape, scale, Bs, Op, mp, lp)
        masked = shape.causal
        nb = -(-Nq // Br)

        def rng(i: int) -> tuple[int, int]:  # the keys query block i sees
            return kv_range(shape, i * Br, min(Nq, (i + 1) * Br))

        # query blocks that see no key output 0 and read nothing: as lo_i, hi_i grow with i, they
        # are a prefix (hi_i = 0) and a suffix (lo_i = Nkv, a window past every key)
        z = _first(0, nb, lambda i: rng(i)[1] > 0)
        e = max(z, _first(0, nb, lambda i: rng(i)[0] >= Nkv))
        for lo_, hi_ in ((0, min(Nq, z * Br)), (min(Nq, e * Br), Nq)):
            for qb in mem.blocks(Nq, Br, lo=lo_, hi=hi_):
                for gb in mem.blocks(G, 1):
                    zt = mem.alloc((qb.size, d), 0.0, label="O_i")
                    mem.store(zt, head(gb.start)[1], qb)
                    mem.free(zt)
        if masked and mem.bulk:
            self._visits_bulk(mem, head, G, (K, V), run, tiling)
            return
        # unmasked, the first key block, the middle ones and the last move alike words: three
        # uniform runs (bulk count mode executes each once); masked, block by block (step by
        # step: bulk count mode counts the visits by kind, :meth:`_visits_bulk`)
        Tc = -(-Nkv // Bc)
        cuts = sorted({0, min(Nkv, Bc), max(Bc, (Tc - 1) * Bc), Nkv})
        ranges = [(0, Nkv)] if masked else list(zip(cuts[:-1], cuts[1:]))
        kbs = (kb for lo_, hi_ in ranges
               for kb in mem.blocks(Nkv, Bc, lo=lo_, hi=hi_, uniform=not masked))
        for kb in kbs:
            qlo, qhi = q_range(shape, kb.start, kb.stop)
            if qhi <= qlo:
                continue
            Kj = mem.load(K, kb, label="K_j")
            Vj = mem.load(V, kb, label="V_j")
            # the query blocks meeting key block j, in runs where "j is the first / last key
            # block the query block sees" is constant: first on a suffix (lo_i >= j·Bc), last on
            # a prefix (hi_i <= (j + 1)·Bc); each run is uniform (bulk count mode runs it once)
            i0, i1 = qlo // Br, (qhi - 1) // Br + 1
            a = _first(i0, i1, lambda i: rng(i)[0] >= kb.start)
            b = _first(i0, i1, lambda i: rng(i)[1] > kb.stop)
            marks = sorted({i0, a, b, i1})
            for gb in mem.blocks(G, 1):
                g = gb.start
                qo = (g, head(g))
                for c0, c1 in zip(marks[:-1], marks[1:]):
                    first, last = c0 >= a, c0 < b
                    for qb in mem.blocks(Nq, Br, lo=c0 * Br, hi=min(Nq, c1 * Br)):
                        _visit(mem, run, qo, (kb, Kj, Vj), qb, first, last)
            mem.free(Kj, Vj)

    def _visits_bulk(self, mem: TwoLevelMemory,
                     head: Callable[[int], tuple[SlowArray, SlowArray]], G: int,
                     kv: tuple[SlowArray, SlowArray], run: _Run,
                     tiling: KVStationaryTiling) -> None:
        """The key blocks (``kv``: the K/V head's K and V) and their visits in masked bulk count
        mode, O(log N).

        A visit (query block i, key block j) moves words that depend on the two blocks' sizes
        and on two flags only: whether j is the first key block i sees (no partial to load) and
        whether it is the last (O written instead of the partial), each adding its words
        whatever the other; its fast memory does not depend on the flags.  So the counts, the
        peak and the steps depend, per pair of sizes (whole or short key block, whole or short
        query block), on the number of visits, of first visits and of last visits only: sums
        in closed form (:func:`attnio.core.masks.query_block_sums` over the whole key blocks and
        over all, the short query block by itself).  Each visible key block is loaded once (a
        run per size), and each kind of visit runs once with its multiplicity, the key block
        held as a stand-in (the same words resident, none moved)."""
        shape, (K, V) = run.shape, kv
        d, Nq, Nkv, off, W = shape.d, shape.Nq, shape.Nkv, shape.offset, shape.window
        Bc, Br = min(tiling.Bc, Nkv), min(tiling.Br, Nq)
        kfull = Nkv // Bc * Bc
        alls = masks.query_block_sums(Nq, Nkv, Br, Bc, off, W)
        part = masks.query_block_sums(Nq, kfull, Br, Bc, off, W) if kfull else None
        # (visits, first visits, last visits) over every query block, per key block size
        v_f = part.count if part else 0
        f_f = part.seen if part else 0
        v_s = alls.count - v_f  # a query block meets the short key block at most once: last
        tot = {"full": (v_f, f_f, alls.seen - v_s), "short": (v_s, alls.seen - f_f, v_s)}
        short_q = {"full": (0, 0, 0), "short": (0, 0, 0)}
        if Nq % Br:  # the short last query block, by itself
            lo, hi = kv_range(shape, Nq // Br * Br, Nq)
            if hi > lo:
                nf = masks.meet(lo, min(hi, kfull), Bc, kfull)[0] if lo < kfull else 0
                first_full, last_full = int(lo < kfull), int(hi <= kfull)
                short_q = {"full": (nf, first_full, last_full),
                           "short": (int(hi > kfull), 1 - first_full, 1 - last_full)}
        nvis_f = masks.key_block_sums(Nq, kfull, Br, Bc, off, W).seen if kfull else 0
        sizes = [("full", kfull // Bc, Bc, nvis_f)]
        if Nkv > kfull:
            qlo, qhi = q_range(shape, kfull, Nkv)
            sizes.append(("short", 1, Nkv - kfull, int(qhi > qlo)))
        qo = (0, head(0))
        for kind, blocks, size, vis in sizes:
            for _ in mem.blocks(blocks - vis, 1):  # key blocks no query sees: a step each
                pass
            kb = Block(0, 0, size) if kind == "full" else Block(kfull // Bc, kfull, Nkv)
            for _ in mem.blocks(vis, 1):
                Kj = mem.load(K, kb, label="K_j")
                Vj = mem.load(V, kb, label="V_j")
                for _gb in mem.blocks(G, 1):  # the head loop's steps
                    pass
                mem.free(Kj, Vj)
            runs = []  # (query block, first, last, visits) of each kind with visits
            for qkind, qb in (("full", Block(0, 0, Br)),
                              ("short", Block(Nq // Br, Nq // Br * Br, Nq))):
                nv, nfirst, nlast = short_q[kind]
                if qkind == "full":
                    tv, tfirst, tlast = tot[kind]
                    nv, nfirst, nlast = tv - nv, tfirst - nfirst, tlast - nlast
                if nv <= 0 or qb.size <= 0:
                    continue
                both = max(0, nfirst + nlast - nv)  # any split with these marginals counts alike
                runs += [(qb, first, last, n) for first, last, n in (
                    (True, True, both), (True, False, nfirst - both), (False, True, nlast - both),
                    (False, False, nv - nfirst - nlast + both)) if n]
            if not runs:
                continue
            Kj = mem.alloc((size, d), label="K_j")
            Vj = mem.alloc((size, d), label="V_j")
            for qb, first, last, n in runs:
                for _ in mem.blocks(G * n, 1):  # a step per visit and head
                    _visit(mem, run, qo, (kb, Kj, Vj), qb, first, last)
            mem.free(Kj, Vj)

    def workspace(self, shape: Shape) -> int:
        """Slow-memory words of the spilled partials (one K/V head's group at a time)."""
        return shape.group * shape.Nq * (shape.d + 2)


def _visit(mem: TwoLevelMemory, run: _Run, head: tuple[int, tuple[SlowArray, SlowArray]],
           held: tuple[Block, FastTile, FastTile], qb: Block, first: bool, last: bool) -> None:
    """Query block ``qb`` of head g (``head``: g and its Q and O) against the held key block
    (``held``: the block kb and its K_j, V_j tiles): the partial (O, m, l) started (``first``)
    or loaded, updated chunk by chunk, then written: normalised to O when ``last``, else
    spilled."""
    (g, (Q, O)), (kb, Kj, Vj) = head, held
    shape, scale, Bs, Op, mp, lp = run.shape, run.scale, run.Bs, run.Op, run.mp, run.lp
    d, Nq = shape.d, shape.Nq
    part = slice(g * Nq + qb.start, g * Nq + qb.stop)
    Qi = mem.load(Q, qb, label="Q_i")
    if first:
        Oi = mem.alloc((qb.size, d), 0.0, label="O_i")
        m = mem.alloc((qb.size,), -np.inf, label="m_i")
        l = mem.alloc((qb.size,), 0.0, label="l_i")
    else:
        Oi = mem.load(Op, part, label="O_i")
        m = mem.load(mp, part, label="m_i")
        l = mem.load(lp, part, label="l_i")
    t = mem.alloc((qb.size,), 0.0, label="tmp")
    S = mem.alloc((qb.size, Bs), label="S_chunk")
    mem.compute(_chunked_update(scale, qb.start, kb.start, shape, Bs),
                S, m, l, t, Oi, Qi, Kj, Vj, writes=5)
    if last:
        mem.compute(K_.normalise_rows, Oi, l, writes=1)
        mem.store(Oi, O, qb)
    else:
        mem.store(Oi, Op, part)
        mem.store(m, mp, part)
        mem.store(l, lp, part)
    mem.free(S, t, Qi, Oi, m, l)


ALGORITHM = KVStationary()
