"""Replay an element trace through a cache: LRU, FIFO or Belady's OPT, write-back.

>>> from attnio.cachesim.tracing import Trace
>>> scan = Trace.from_arrays(list(range(5)) * 3, [0] * 15)   # a cyclic scan of 5 words
>>> replay(scan, 4, "lru").reads      # LRU misses on every access of a scan longer than the cache
15
>>> replay(scan, 4, "opt").reads      # OPT: 5 cold misses, then one per later round
7

The cache
---------
A :class:`Cache`: ``capacity_words`` words in lines of ``line_words`` words; fully associative, or ``ways``-way set
associative (``capacity_words / line_words / ways`` sets, a line's set is ``line % sets``, as in
pycachesim).  Write-back: a written line is *dirty*; a dirty line costs one write of its words
when it is evicted and at the end of the trace (the final flush writes back the dirty lines of
arrays marked ``live_out``; scratch arrays are dead when the program ends).  Reads and writes are
counted in words (lines moved times ``line_words``), like :class:`attnio.IOStats`.

* ``write_allocate=False`` (the word model, the default): a write miss takes a slot without reading
  the word (it is overwritten whole).  Only with 1-word lines, since a partly written longer line
  would need per-word valid bits.
* ``write_allocate=True``: a write miss first reads its line, as pycachesim does; then
  ``reads = line_words * MISS_count`` and ``writes = line_words * EVICT_count`` after
  ``force_write_back()`` (checked in the tests).

Policies
--------
* ``"lru"``: evict the least recently used line of the set; ``"fifo"``: evict the line resident
  longest (hits do not refresh it).  Pure Python over ``OrderedDict`` (C-implemented), streamed
  chunk by chunk.
* ``"opt"``: Belady's MIN, fully associative only: evict the line whose next *needed* access is
  farthest in the future.  Next-use distances come from one stable sort of the trace (numpy);
  the resident lines sit in a binary heap with lazy deletion (O(n log n)).  With
  ``write_allocate=False`` an access whose next access is a write is not needed again (the write
  does not read the old value), and an oracle does not write back a dirty word whose value is
  dead — overwritten before it is read, or never read again in a non-live-out array (1-word lines
  only; with longer lines only the end-of-program rule applies).  This makes the explicit schedule
  one of the strategies OPT is compared with: OPT(M) <= explicit count.  OPT needs the whole
  trace (9 bytes per event plus its next-use arrays).
"""

from __future__ import annotations

import heapq
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..core.checks import check_int
from ..core.errors import ParameterError

__all__ = ["POLICIES", "Cache", "ReplayResult", "replay"]

POLICIES = ("lru", "fifo", "opt")


@dataclass(frozen=True)
class Cache:
    """A write-back cache of ``capacity_words`` words, validated on construction.

    ``line_words`` words per line (> 1 needs ``write_allocate=True``; the capacity a multiple of
    it); ``ways``: set associativity (None: fully associative; it must divide the number of
    lines); ``write_allocate``: whether a write miss loads its line; ``write_hit_refresh=False``
    makes LRU ignore write hits for recency, as pycachesim does (its stores that hit only mark
    the line dirty; the default counts every access as a use).  :func:`replay` takes one, or a
    capacity in words for ``Cache(capacity_words)``.
    """

    capacity_words: int
    line_words: int = 1
    ways: int | None = None
    write_allocate: bool = False
    write_hit_refresh: bool = True

    def __post_init__(self) -> None:
        capacity_words = check_int("capacity_words", self.capacity_words, minimum=1)
        line_words = check_int("line_words", self.line_words, minimum=1)
        object.__setattr__(self, "capacity_words", capacity_words)
        object.__setattr__(self, "line_words", line_words)
        for name in ("write_allocate", "write_hit_refresh"):
            if not isinstance(getattr(self, name), bool):
                raise ParameterError(f"{name} must be True or False, got "
                                     f"{getattr(self, name)!r}", param=name)
        if line_words > 1 and not self.write_allocate:
            raise ParameterError(
                f"line_words={line_words} needs write_allocate=True (a write miss on a longer "
                "line must read the rest of the line); with write_allocate=False use "
                "line_words=1", param="line_words")
        if capacity_words % line_words:
            raise ParameterError(
                f"capacity_words={capacity_words} must be a multiple of line_words={line_words}",
                param="capacity_words")
        if self.ways is not None:
            lines = capacity_words // line_words
            ways = check_int("ways", self.ways, minimum=1, maximum=lines)
            if lines % ways:
                raise ParameterError(
                    f"ways={ways} must divide the number of lines, {lines} "
                    f"(capacity_words/line_words)", param="ways")
            object.__setattr__(self, "ways", ways)

    @property
    def lines(self) -> int:
        return self.capacity_words // self.line_words


@dataclass(frozen=True)
class ReplayResult:
    """Slow-memory traffic of one replay, in words, with the cache events behind it (in lines)."""

    policy: str
    capacity_words: int
    line_words: int
    ways: int | None
    write_allocate: bool
    accesses: int
    hits: int
    read_misses: int
    write_misses: int
    dirty_evictions: int
    flushed: int

    @property
    def misses(self) -> int:
        return self.read_misses + self.write_misses

    @property
    def reads(self) -> int:
        fetched = self.read_misses + (self.write_misses if self.write_allocate else 0)
        return fetched * self.line_words

    @property
    def writes(self) -> int:
        return (self.dirty_evictions + self.flushed) * self.line_words

    @property
    def total(self) -> int:
        return self.reads + self.writes

    def as_dict(self) -> dict:
        return {"policy": self.policy, "capacity_words": self.capacity_words,
                "line_words": self.line_words, "ways": self.ways,
                "write_allocate": self.write_allocate, "accesses": self.accesses,
                "hits": self.hits, "misses": self.misses, "read_misses": self.read_misses,
                "write_misses": self.write_misses, "dirty_evictions": self.dirty_evictions,
                "flushed": self.flushed, "reads": self.reads, "writes": self.writes,
                "total": self.total}


def _as_trace(trace):
    from .tracing import Trace

    if isinstance(trace, Trace):
        return trace
    if isinstance(trace, tuple) and len(trace) == 2:
        return Trace.from_arrays(trace[0], trace[1])
    raise ParameterError(
        f"trace must be an attnio Trace or a pair (addresses, kinds), got {type(trace).__name__}", param="trace")


def _live_lines(tr, line_words: int):
    """A function telling whether a line belongs to a live_out array (by its first word)."""
    infos = list(tr.arrays.values())
    if all(a.live_out for a in infos):
        return None
    bases = np.array([a.base for a in infos], dtype=np.int64)
    live = np.array([a.live_out for a in infos], dtype=bool)

    def is_live(lines: np.ndarray) -> np.ndarray:
        ids = np.searchsorted(bases, lines * line_words, side="right") - 1
        return live[np.clip(ids, 0, len(live) - 1)]

    return is_live


def replay(trace, cache: int | Cache, policy: str = "lru", *, chunk: int = 1 << 20,
           progress: Callable[[int, int], None] | None = None) -> ReplayResult:
    """Replay ``trace`` through a write-back ``cache``.

    Parameters
    ----------
    trace : Trace or tuple
        A :class:`~attnio.cachesim.tracing.Trace` (from :func:`attnio.trace`) or a pair
        ``(addresses, kinds)`` (kinds 0/1 or "read"/"write"; every array live-out).
    cache : int or Cache
        A :class:`Cache` (line size, associativity, write policy), or its capacity in words for
        a fully associative cache of 1-word lines without write allocation.
    policy : {"lru", "fifo", "opt"}
        The replacement policy (``"opt"``: Belady's, fully associative only).
    chunk : int
        Events processed per chunk.
    progress : callable, optional
        ``progress(events, total)`` is called as the replay goes (:mod:`attnio.core.progress`).

    Returns
    -------
    ReplayResult
        ``reads``, ``writes`` and ``total`` in words.
    """
    tr = _as_trace(trace)
    c = cache if isinstance(cache, Cache) else Cache(cache)
    if policy not in POLICIES:
        raise ParameterError(f"policy must be one of {', '.join(POLICIES)}, got {policy!r}", param="policy")
    if policy == "opt" and c.ways is not None:
        raise ParameterError("policy='opt' is fully associative only: use ways=None", param="ways")
    line_words, lines = c.line_words, c.lines
    is_live = _live_lines(tr, line_words)
    if policy == "opt":
        addr, kind = tr.to_arrays()
        counts = _opt(addr // line_words if line_words > 1 else addr, kind.astype(bool), lines,
                      c.write_allocate, line_words == 1, is_live, progress)
    else:
        gen = _reported(((a // line_words if line_words > 1 else a, k)
                         for a, k in tr.raw_chunks(chunk)), len(tr), progress)
        per_set = lines if c.ways is None else c.ways
        counts = _lru_fifo(gen, lines // per_set, per_set, policy == "lru", is_live,
                           c.write_hit_refresh)
    return ReplayResult(policy, c.capacity_words, line_words, c.ways, c.write_allocate, *counts)


def _reported(chunks, total: int, progress):
    """The chunks, reporting the events passed before each one."""
    if progress is None:
        yield from chunks
        return
    done = 0
    for a, k in chunks:
        progress(done, total)
        yield a, k
        done += len(a)
    progress(done, total)


def _flush(dirty_lines: list[int], is_live) -> int:
    if not dirty_lines:
        return 0
    if is_live is None:
        return len(dirty_lines)
    return int(is_live(np.array(dirty_lines, dtype=np.int64)).sum())


def _lru_fifo(chunks, nsets: int, ways: int, lru: bool, is_live, wref: bool = True):
    """LRU / FIFO in ``nsets`` sets of ``ways`` lines (one set: fully associative).

    Each set is one OrderedDict line -> dirty, oldest first.  Sets never interact, so each chunk
    is split by set (``line % nsets``, access order kept within a set) and every part runs the
    same loop, :func:`_replay_set`, on its set's dict.
    """
    sets: list[OrderedDict[int, bool]] = [OrderedDict() for _ in range(nsets)]
    n = hits = rm = wm = dev = 0
    for lines, kinds in chunks:
        n += len(lines)
        if nsets == 1:
            parts = [(0, lines, kinds)]
        else:
            set_of = lines % nsets
            order = np.argsort(set_of, kind="stable")
            cuts = np.flatnonzero(np.diff(set_of[order])) + 1
            parts = [(int(set_of[idx[0]]), lines[idx], kinds[idx])
                     for idx in np.split(order, cuts) if len(idx)]
        for s, part_lines, part_kinds in parts:
            h, r, w, e = _replay_set(sets[s], part_lines.tolist(), part_kinds.tolist(), ways,
                                     lru, wref)
            hits, rm, wm, dev = hits + h, rm + r, wm + w, dev + e
    flushed = _flush([a for od in sets for a, d in od.items() if d], is_live)
    return n, hits, rm, wm, dev, flushed


def _replay_set(od: OrderedDict[int, bool], lines: list[int], kinds: list[int], C: int,
                lru: bool, wref: bool) -> tuple[int, int, int, int]:
    """Replay accesses of one set of ``C`` lines on its dict: (hits, read misses, write misses,
    dirty evictions).  The replay's hot loop: the dict's methods are bound once."""
    get, move, pop = od.get, od.move_to_end, od.popitem
    hits = rm = wm = dev = 0
    for a, w in zip(lines, kinds):
        d = get(a)
        if d is not None:
            hits += 1
            if lru and (wref or not w):
                move(a)
            if w and not d:
                od[a] = True
            continue
        if w:
            wm += 1
        else:
            rm += 1
        if len(od) >= C:
            if pop(last=False)[1]:
                dev += 1
        od[a] = bool(w)
    return hits, rm, wm, dev


def _next_access(lines: np.ndarray) -> np.ndarray:
    """For each access i, the index of the next access to the same line (n when none)."""
    n = len(lines)
    order = np.argsort(lines, kind="stable")
    s = lines[order]
    nxt = np.full(n, n, dtype=np.int64)
    same = s[1:] == s[:-1]
    nxt[order[:-1][same]] = order[1:][same]
    return nxt


def _opt(lines: np.ndarray, w: np.ndarray, C: int, write_allocate: bool, word_lines: bool,
         is_live, progress=None):
    """Belady's MIN with next-use distances and a lazy max-heap (keys encoded as one int)."""
    n = len(lines)
    if n == 0:
        return 0, 0, 0, 0, 0, 0
    nxt = _next_access(lines)
    has_next = nxt < n
    nxt_w = np.zeros(n, dtype=bool)
    nxt_w[has_next] = w[nxt[has_next]]
    INF = n
    if write_allocate:
        key = nxt
    else:  # a line whose next access is a write is not needed: that write does not read it
        key = np.where(has_next & ~nxt_w, nxt, INF)
    # the value left by access i is dead: overwritten before being read, or never used again
    # in an array that is not live-out
    dead = np.zeros(n, dtype=bool)
    if word_lines:
        dead |= has_next & nxt_w
    if is_live is not None:
        dead |= ~has_next & ~is_live(lines)
    n1 = n + 1
    prio = (-(key * n1 + np.arange(n, dtype=np.int64))).tolist()  # heap entries (max-heap)
    L = lines.tolist()
    W = w.tolist()
    D = dead.tolist()
    res: dict[int, int] = {}  # line -> index of its latest access
    dirty: set[int] = set()
    heap: list[int] = []
    push, pop = heapq.heappush, heapq.heappop
    hits = rm = wm = dev = 0
    limit = 4 * C + 1024
    report = 1 << 16 if progress is not None else n + 1
    for i in range(n):
        if i >= report:
            progress(i, n)
            report += 1 << 16
        a = L[i]
        if a in res:
            hits += 1
        else:
            if W[i]:
                wm += 1
            else:
                rm += 1
            if len(res) >= C:
                while True:
                    j = (-pop(heap)) % n1
                    v = L[j]
                    if res.get(v) == j:
                        break
                del res[v]
                if v in dirty:
                    dirty.discard(v)
                    if not D[j]:
                        dev += 1
        res[a] = i
        if W[i]:
            dirty.add(a)
        push(heap, prio[i])
        if len(heap) > limit:
            heap = [prio[j] for j in res.values()]
            heapq.heapify(heap)
    flushed = sum(1 for a in dirty if not D[res[a]])
    return n, hits, rm, wm, dev, flushed
