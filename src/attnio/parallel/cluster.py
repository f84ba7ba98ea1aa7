"""The referee of attention across P processors: who holds which row, and every word that moves.

Model (docs/parallel.md, "The model").  P processors; the inputs are rows of d words: the query
rows ``Q[h, r]`` of every query head h (batch folded in: ``batch x heads`` of them) and the key
and value rows ``K[j, c]``, ``V[j, c]`` of every key/value head j (``batch x kv_heads``).  A
:class:`Layout` says which processor holds each row at the start and which must hold each output
row ``O[h, r]`` at the end.  A processor

* **sends** rows it holds (:meth:`Cluster.send`): a Q, K or V row is d words, a partial output
  (its d numbers and its log-sum-exp) d + 1 words, a finished output row d words; the receiver
  holds them from then on.  Every word is counted on the sender, on the receiver and on the link
  (sender, receiver);
* **computes** (:meth:`Cluster.compute`) the contribution of a block of (query row, key) pairs of
  one or more query heads, and only when it holds every Q row, K row and V row the block uses
  (the referee refuses otherwise, naming the processor and the missing rows); the contribution
  is merged into the processor's partial output of those query rows (online softmax).  The work
  is the number of *visible* pairs (the mask's), and a pair computed twice into one partial, or
  merged twice through partial outputs, is refused: no score is counted twice.

A processor may also **drop** rows it holds (:meth:`Cluster.drop`: it holds them no more); the
referee keeps the words of input rows each processor holds and reports the most at any time
(``CommStats.memory``: the local memory the schedule needs).

At the end (:meth:`Cluster.finish`) the owner of every output row must hold it: a finished row
it received, or a partial output that covers every visible key of that row.  The result, a
:class:`CommStats`, reports words sent and received per processor, per link, the work per
processor, and the figure of merit: the **critical path**, the maximum over processors of words
sent plus received.

Two modes run the same schedule: with data (float64 arrays), the arithmetic is done and the
output returned, to compare with :func:`attnio.core.reference.attention`; without data, only
the bookkeeping (holdings, coverage, counts).  The bookkeeping keeps a boolean per (processor,
head, query row, key): the referee is for small shapes; large counts come from each scheme's
closed form, which the tests hold equal to this referee.

>>> from attnio.core.workload import Shape
>>> s = Shape(4, 4, 2)
>>> lay = Layout.sequence(s, 2)
>>> c = Cluster(s, lay)
>>> c.send(0, 1, "K", [0], [0, 1]); c.send(0, 1, "V", [0], [0, 1])
>>> c.send(1, 0, "K", [0], [2, 3]); c.send(1, 0, "V", [0], [2, 3])
>>> for p in (0, 1):
...     c.compute(p, [0], lay.q_rows(p), range(4))
>>> st = c.finish()
>>> st.sent, st.received, st.critical, st.work
([8, 8], [8, 8], 16, [8, 8])
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..core.errors import ParameterError, ScheduleError
from ..core.reference import mask as reference_mask
from ..core.workload import Shape

__all__ = ["MAX_REFEREE_PAIRS", "SEQUENCE_KINDS", "Cluster", "CommStats", "Layout",
           "sequence_rows"]

#: The largest P x heads x Nq x Nkv the referee takes (its coverage booleans: 64 MiB).
MAX_REFEREE_PAIRS = 1 << 26

#: The sequence layouts: contiguous chunks, zigzag (chunks i and 2G-1-i of 2G), striped
#: (row r on r mod G).
SEQUENCE_KINDS = ("contiguous", "zigzag", "striped")


def sequence_rows(n: int, G: int, g: int, kind: str) -> np.ndarray:
    """The rows of a sequence of ``n`` rows that part ``g`` of ``G`` gets, in sequence order.

    ``contiguous``: ``[g·n/G, (g+1)·n/G)``; ``zigzag``: chunks g and 2G-1-g of 2G equal chunks;
    ``striped``: rows ``r ≡ g (mod G)``.  ``n`` must be divisible by G (2G for zigzag).
    """
    if kind == "contiguous":
        s = n // G
        return np.arange(g * s, (g + 1) * s)
    if kind == "zigzag":
        s = n // (2 * G)
        return np.concatenate([np.arange(g * s, (g + 1) * s),
                               np.arange((2 * G - 1 - g) * s, (2 * G - g) * s)])
    if kind == "striped":
        return np.arange(g, n, G)
    raise ParameterError(f"layout must be one of {SEQUENCE_KINDS}, got {kind!r}", param="layout")


@dataclass(frozen=True)
class Layout:
    """Which processor holds each row: ``q_owner[h, r]`` for the query (and output) rows of every
    query head, ``kv_owner[j, c]`` for the key and value rows of every key/value head.

    :meth:`sequence` builds the sequence-sharded layouts (every head alike): the sequence cut
    into G ring blocks of the given kind, each block's rows dealt in order to ``P/G``
    consecutive processors in equal contiguous parts (G = P: one part per processor);
    :meth:`heads` the head-sharded one.
    """

    P: int
    q_owner: np.ndarray
    kv_owner: np.ndarray
    name: str = "custom"

    def __post_init__(self) -> None:
        for what, arr in (("q_owner", self.q_owner), ("kv_owner", self.kv_owner)):
            if arr.ndim != 2 or arr.size and (arr.min() < 0 or arr.max() >= self.P):
                raise ParameterError(f"layout: {what} must give every row a processor in "
                                     f"[0, {self.P}); it does not cover the sequence",
                                     param="layout")

    @classmethod
    def sequence(cls, shape: Shape, P: int, kind: str = "contiguous", G: int | None = None
                 ) -> Layout:
        """The sequence layout of ``kind`` over ``G`` blocks (default P) of ``P/G`` parts."""
        G = P if G is None else G
        u = P // G
        q = np.empty(shape.Nq, dtype=np.int64)
        kv = np.empty(shape.Nkv, dtype=np.int64)
        for arr, n in ((q, shape.Nq), (kv, shape.Nkv)):
            for g in range(G):
                rows = sequence_rows(n, G, g, kind)
                part = len(rows) // u
                for k in range(u):
                    arr[rows[k * part:(k + 1) * part]] = g * u + k
        name = kind if G == P else f"{kind} over {G} blocks of {u}"
        return cls(P, np.broadcast_to(q, (shape.n_heads, shape.Nq)).copy(),
                   np.broadcast_to(kv, (shape.n_kv_heads, shape.Nkv)).copy(), name)

    @classmethod
    def heads(cls, shape: Shape, P: int) -> Layout:
        """Head-sharded: query head f on processor ``f·P // n_heads``, key/value head j on
        ``j·P // n_kv_heads`` (whole rows of every position)."""
        q = (np.arange(shape.n_heads) * P // shape.n_heads)[:, None]
        kv = (np.arange(shape.n_kv_heads) * P // shape.n_kv_heads)[:, None]
        return cls(P, np.repeat(q, shape.Nq, axis=1), np.repeat(kv, shape.Nkv, axis=1), "heads")

    def q_rows(self, p: int, head: int = 0) -> np.ndarray:
        """The query rows of ``head`` that processor ``p`` owns."""
        return np.flatnonzero(self.q_owner[head] == p)

    def kv_rows(self, p: int, head: int = 0) -> np.ndarray:
        """The key/value rows of key/value head ``head`` that processor ``p`` owns."""
        return np.flatnonzero(self.kv_owner[head] == p)


@dataclass(frozen=True)
class CommStats:
    """Counts of one run on the referee: words ``sent`` and ``received`` per processor, per link
    ``(src, dst)``, the ``work`` (visible score pairs) per processor, and the ``memory``: the
    most words of input rows (Q, K, V) each processor held at any time (rows it received count
    until it drops them: :meth:`Cluster.drop`)."""

    sent: list[int]
    received: list[int]
    work: list[int]
    links: dict[tuple[int, int], int] = field(default_factory=dict)
    memory: list[int] = field(default_factory=list)

    @property
    def words(self) -> list[int]:
        """Words sent plus received, per processor."""
        return [s + r for s, r in zip(self.sent, self.received)]

    @property
    def critical(self) -> int:
        """The critical path: the maximum over processors of words sent plus received."""
        return max(self.words)

    @property
    def total(self) -> int:
        """Words moved in all (each counted once: the sum of what was sent)."""
        return sum(self.sent)


_TENSORS = ("Q", "K", "V")


class Cluster:
    """P processors running one attention workload in a declared :class:`Layout`.

    ``data``: None (bookkeeping only) or ``(Q, K, V)`` arrays shaped ``(batch, heads, Nq, d)``
    and ``(batch, kv_heads, Nkv, d)``.  Query heads are numbered ``f = b·heads + h`` and key/value
    heads ``j = b·kv_heads + h_kv``; query head f uses key/value head :meth:`kv_head` (f).
    """

    def __init__(self, shape: Shape, layout: Layout, data: tuple[Any, Any, Any] | None = None):
        if shape.block_mask is not None:
            raise ParameterError("the parallel referee takes causal/window masks, not a "
                                 "block_mask", param="block_mask")
        self.shape = shape
        self.layout = layout
        self.P = P = layout.P
        nH, nK, Nq, Nkv, d = shape.n_heads, shape.n_kv_heads, shape.Nq, shape.Nkv, shape.d
        if layout.q_owner.shape != (nH, Nq) or layout.kv_owner.shape != (nK, Nkv):
            raise ParameterError(f"layout covers {layout.q_owner.shape} query and "
                                 f"{layout.kv_owner.shape} key rows; the shape has ({nH}, {Nq})"
                                 f" and ({nK}, {Nkv}): it does not cover the sequence",
                                 param="layout")
        if P * nH * Nq * Nkv > MAX_REFEREE_PAIRS:
            raise ParameterError(f"the referee keeps a boolean per (processor, head, query, key): "
                                 f"P x heads x Nq x Nkv = {P * nH * Nq * Nkv:,} is more than "
                                 f"{MAX_REFEREE_PAIRS:,}; use the closed form (cost) at this "
                                 f"size", param="N")
        p_ix = np.arange(P)[:, None, None]
        self.held = {"Q": layout.q_owner[None] == p_ix,
                     "K": layout.kv_owner[None] == p_ix,
                     "V": (layout.kv_owner[None] == p_ix).copy()}
        self.visible = ~reference_mask(Nq, Nkv, shape.mask, shape.window)
        self.cover = np.zeros((P, nH, Nq, Nkv), dtype=bool)  # pairs in p's partial of row r
        self.has_part = np.zeros((P, nH, Nq), dtype=bool)
        self.done = np.zeros((P, nH, Nq), dtype=bool)  # a finished output row received
        self.sent = [0] * P
        self.received = [0] * P
        self.work = [0] * P
        d = shape.d
        self.mem = [int(sum(self.held[t][p].sum() for t in _TENSORS)) * d for p in range(P)]
        self.peak = list(self.mem)  # input-row words held now, and the most at any time
        self.links: dict[tuple[int, int], int] = {}
        self.compute_mode = data is not None
        if data is not None:
            Q, K, V = (np.asarray(x, dtype=np.float64) for x in data)
            want_q, want_kv = (shape.batch, shape.heads, Nq, d), (shape.batch, shape.kv_heads,
                                                                   Nkv, d)
            if Q.shape != want_q or K.shape != want_kv or V.shape != want_kv:
                raise ParameterError(f"data must be Q {want_q}, K and V {want_kv}; got "
                                     f"{Q.shape}, {K.shape}, {V.shape}", param="data")
            self._q = Q.reshape(nH, Nq, d)
            self._k = K.reshape(nK, Nkv, d)
            self._v = V.reshape(nK, Nkv, d)
            self.o = np.zeros((P, nH, Nq, d))
            self.lse = np.full((P, nH, Nq), -np.inf)
            self.final = np.zeros((P, nH, Nq, d))
        self.scale = 1.0 / math.sqrt(d)

    # ------------------------------------------------------------------ helpers
    def kv_head(self, f: Any) -> Any:
        """The key/value head query head ``f`` uses."""
        s = self.shape
        return (np.asarray(f) // s.heads) * s.kv_heads + (np.asarray(f) % s.heads) // s.group

    def _proc(self, p: int, what: str) -> int:
        if not 0 <= int(p) < self.P:
            raise ScheduleError(f"{what}: processor {p} is not in [0, {self.P})")
        return int(p)

    def _count(self, src: int, dst: int, words: int) -> None:
        self.sent[src] += words
        self.received[dst] += words
        self.links[(src, dst)] = self.links.get((src, dst), 0) + words

    # ------------------------------------------------------------------ the three moves
    def send(self, src: int, dst: int, tensor: str, heads: Iterable[int],
             rows: Iterable[int]) -> None:
        """Processor ``src`` sends rows ``rows`` of ``heads`` of ``tensor`` to ``dst``.

        ``tensor``: ``"Q"`` (query heads), ``"K"``/``"V"`` (key/value heads): d words a row;
        ``"part"``: partial outputs (query heads), d + 1 words a row, merged into ``dst``'s;
        ``"O"``: finished output rows (``src``'s partial must cover every visible key), d words.
        """
        src, dst = self._proc(src, "send"), self._proc(dst, "send")
        if src == dst:
            raise ScheduleError(f"send: processor {src} sends to itself")
        h = np.asarray(list(heads), dtype=np.int64)
        r = np.asarray(list(rows), dtype=np.int64)
        if h.size == 0 or r.size == 0:
            return
        ix = np.ix_(h, r)
        d = self.shape.d
        if tensor in _TENSORS:
            have = self.held[tensor][src][ix]
            if not have.all():
                hh, rr = np.argwhere(~have)[0]
                raise ScheduleError(f"send: processor {src} does not hold {tensor} row "
                                    f"{r[rr]} of head {h[hh]}")
            self._hold(dst, tensor, ix)
            self._count(src, dst, h.size * r.size * d)
            return
        if tensor == "part":
            if not self.has_part[src][ix].all():
                raise ScheduleError(f"send: processor {src} has no partial output of some of "
                                    f"rows {r.tolist()} of heads {h.tolist()}")
            self._merge(dst, h, r, self.cover[src][ix],
                        self.o[src][ix] if self.compute_mode else None,
                        self.lse[src][ix] if self.compute_mode else None)
            self._count(src, dst, h.size * r.size * (d + 1))
            return
        if tensor == "O":
            full = self.visible[r][None, :, :]
            if not (self.has_part[src][ix].all() and (self.cover[src][ix] == full).all()):
                raise ScheduleError(f"send: processor {src}'s output of rows {r.tolist()} of "
                                    f"heads {h.tolist()} is not finished (keys missing)")
            self.done[dst][ix] = True
            if self.compute_mode:
                self.final[dst][ix] = self.o[src][ix]
            self._count(src, dst, h.size * r.size * d)
            return
        raise ScheduleError(f"send: tensor must be Q, K, V, part or O, got {tensor!r}")

    def _hold(self, p: int, tensor: str, ix: Any) -> None:
        new = int((~self.held[tensor][p][ix]).sum())
        self.held[tensor][p][ix] = True
        self.mem[p] += new * self.shape.d
        self.peak[p] = max(self.peak[p], self.mem[p])

    def drop(self, p: int, tensor: str, heads: Iterable[int], rows: Iterable[int]) -> None:
        """Processor ``p`` frees its copies of rows ``rows`` of ``heads`` of ``tensor`` (Q, K or
        V): it holds them no more (using them later is refused) and its memory shrinks."""
        p = self._proc(p, "drop")
        if tensor not in _TENSORS:
            raise ScheduleError(f"drop: tensor must be Q, K or V, got {tensor!r}")
        h = np.asarray(list(heads), dtype=np.int64)
        r = np.asarray(list(rows), dtype=np.int64)
        if h.size == 0 or r.size == 0:
            return
        ix = np.ix_(h, r)
        self.mem[p] -= int(self.held[tensor][p][ix].sum()) * self.shape.d
        self.held[tensor][p][ix] = False

    def compute(self, p: int, heads: Iterable[int], rows: Iterable[int],
                keys: Iterable[int]) -> None:
        """Processor ``p`` computes the visible pairs of query rows ``rows`` x keys ``keys`` in
        every query head of ``heads`` and merges them into its partial outputs."""
        p = self._proc(p, "compute")
        h = np.asarray(list(heads), dtype=np.int64)
        r = np.asarray(list(rows), dtype=np.int64)
        c = np.asarray(list(keys), dtype=np.int64)
        if h.size == 0 or r.size == 0:
            return
        j = np.unique(self.kv_head(h))
        if not self.held["Q"][p][np.ix_(h, r)].all():
            raise ScheduleError(f"compute: processor {p} does not hold the Q rows it uses "
                                f"(heads {h.tolist()}, rows {r.tolist()})")
        for t in ("K", "V"):
            if c.size and not self.held[t][p][np.ix_(j, c)].all():
                raise ScheduleError(f"compute: processor {p} does not hold the {t} rows it uses "
                                    f"(kv heads {j.tolist()}, rows {c.tolist()})")
        vis = np.zeros((r.size, self.shape.Nkv), dtype=bool)
        if c.size:
            vis[:, c] = self.visible[np.ix_(r, c)]
        self.work[p] += int(vis.sum()) * h.size
        cover = np.broadcast_to(vis, (h.size,) + vis.shape)
        o = lse = None
        if self.compute_mode:
            q = self._q[np.ix_(h, r)]  # (nh, nr, d)
            jh = self.kv_head(h)
            k = self._k[jh][:, c]
            v = self._v[jh][:, c]
            s = self.scale * (q @ np.swapaxes(k, -1, -2))
            s = np.where(vis[:, c][None], s, -np.inf)
            m = s.max(axis=-1, keepdims=True) if c.size else np.full(q.shape[:-1] + (1,), -np.inf)
            m0 = np.where(np.isfinite(m), m, 0.0)
            e = np.exp(s - m0)
            l_ = e.sum(axis=-1, keepdims=True)
            o = (e @ v) / np.where(l_ > 0, l_, 1.0)
            with np.errstate(divide="ignore"):
                lse = np.where(l_ > 0, m0 + np.log(np.where(l_ > 0, l_, 1.0)), -np.inf)[..., 0]
        self._merge(p, h, r, cover, o, lse)

    def _merge(self, p: int, h: np.ndarray, r: np.ndarray, cover: np.ndarray,
               o: np.ndarray | None, lse: np.ndarray | None) -> None:
        ix = np.ix_(h, r)
        mine = self.cover[p][ix]
        if (mine & cover).any():
            hh, rr, cc = np.argwhere(mine & cover)[0]
            raise ScheduleError(f"processor {p}: the pair (row {r[rr]}, key {cc}) of head "
                                f"{h[hh]} would be counted twice in its partial output")
        self.cover[p][ix] = mine | cover
        self.has_part[p][ix] = True
        if o is not None and lse is not None:
            a_o, a_l = self.o[p][ix], self.lse[p][ix]
            new = np.logaddexp(a_l, lse)
            with np.errstate(invalid="ignore"):
                w1 = np.where(np.isfinite(a_l), np.exp(a_l - new), 0.0)
                w2 = np.where(np.isfinite(lse), np.exp(lse - new), 0.0)
            self.o[p][ix] = a_o * w1[..., None] + o * w2[..., None]
            self.lse[p][ix] = new

    # ------------------------------------------------------------------ the end
    def finish(self) -> CommStats:
        """Check that every output row is finished on its owner; the run's counts."""
        own = self.layout.q_owner
        nH, Nq = own.shape
        hs, rs = np.meshgrid(np.arange(nH), np.arange(Nq), indexing="ij")
        received = self.done[own, hs, rs]
        complete = self.has_part[own, hs, rs] & (self.cover[own, hs, rs]
                                                 == self.visible[None]).all(axis=-1)
        bad = ~(received | complete)
        if bad.any():
            f, r = np.argwhere(bad)[0]
            raise ScheduleError(f"finish: output row {r} of head {f} is not finished on its "
                                f"owner, processor {own[f, r]}")
        return CommStats(list(self.sent), list(self.received), list(self.work), dict(self.links),
                         list(self.peak))

    def output(self) -> np.ndarray:
        """The output gathered from the owners, shaped ``(batch, heads, Nq, d)`` (with data)."""
        if not self.compute_mode:
            raise ScheduleError("output: the cluster was run without data")
        self.finish()
        own = self.layout.q_owner
        nH, Nq = own.shape
        hs, rs = np.meshgrid(np.arange(nH), np.arange(Nq), indexing="ij")
        out = np.where(self.done[own, hs, rs][..., None], self.final[own, hs, rs],
                       self.o[own, hs, rs])
        s = self.shape
        return out.reshape(s.batch, s.heads, Nq, s.d)
