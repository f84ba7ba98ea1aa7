"""An LRU L2, byte-weighted at tile granularity, exact against a sector-granular LRU.

The GPU's L2 sits between the SMs and HBM.  :class:`LRU` replays requests for whole tiles (a key
and a byte count; a load or a store) through a fully associative, write-back, least-recently-used
cache of ``capacity`` bytes and counts the bytes read from and written back to HBM:

* a load of a tile that is not resident reads its missing bytes from HBM; a store allocates the
  tile without reading it (a whole tile is overwritten) and makes it dirty;
* a dirty byte evicted (or left at the end, :meth:`LRU.flush`) is written back once.

**Exactness.**  A tile is contiguous and its sectors are requested in address order, so under
sector-granular LRU a tile's resident sectors always form its most recently used suffix, next to
each other in the recency order, and only the least recently used tile can be partly resident.
The replay keeps, per tile, its resident and dirty byte counts and reproduces sector-LRU exactly:
a request first misses the tile's evicted prefix; if making room for those misses reaches the
tile's own resident part (it was the least recently used), sector-LRU evicts the sectors about to
be requested and every sector of the tile misses (a cascade), which the replay takes at once.
Tests hold :class:`LRU` on tiles equal to :class:`LRU` on 32-byte sectors and to pycachesim.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from ..core.checks import check_int
from .traffic import ARRAYS, Phase, Traffic, wave_events

__all__ = ["LRU", "Replay", "hbm_bound", "read_bound", "read_floor", "read_floor_waves",
           "replay"]


class LRU:
    """A fully associative write-back LRU cache of ``capacity`` bytes over byte-weighted keys.

    >>> c = LRU(100)
    >>> [c.access(k, 40) for k in ("a", "b", "a", "c", "b")]   # bytes read from HBM
    [40, 40, 0, 40, 40]
    >>> c.access("x", 40, store=True)   # a store misses but reads nothing from HBM
    40
    >>> c.read, c.flush()              # ... and is written back at the end
    (160, 40)
    """

    __slots__ = ("_od", "capacity", "occ", "read", "store_alloc", "written")

    def __init__(self, capacity: int):
        self.capacity = check_int("capacity", capacity, minimum=1)
        # key -> [resident bytes, dirty bytes]
        self._od: OrderedDict[object, list[int]] = OrderedDict()
        self.occ = 0
        self.read = 0          # bytes read from HBM (load misses)
        self.store_alloc = 0   # bytes allocated by store misses (no HBM read)
        self.written = 0       # dirty bytes written back to HBM

    def _evict(self, need: int, stop_at: object = None) -> bool:
        """Free ``need`` bytes from the LRU end; True if ``stop_at`` was reached first."""
        od = self._od
        popitem = od.popitem
        while need > 0 and od:
            key, ent = popitem(last=False)
            if key == stop_at:
                od[key] = ent
                od.move_to_end(key, last=False)
                return True
            r = ent[0]
            if need < r:           # a partial eviction: the tile stays, least recently used
                clean = r - ent[1]
                if need > clean:   # the oldest bytes go first: clean ones, then dirty
                    self.written += need - clean
                    ent[1] -= need - clean
                ent[0] = r - need
                self.occ -= need
                od[key] = ent
                od.move_to_end(key, last=False)
                return False
            self.written += ent[1]
            self.occ -= r
            need -= r
        return False

    def access(self, key: object, nbytes: int, store: bool = False) -> int:
        """Request ``nbytes`` of tile ``key``; returns the bytes that missed (read from HBM for a
        load, allocated without a read for a store)."""
        od = self._od
        ent = od.get(key)
        r = ent[0] if ent is not None else 0
        if r >= nbytes:
            od.move_to_end(key)
            assert ent is not None  # resident (move_to_end raised KeyError otherwise)
            if store:
                ent[1] = ent[0]
            return 0
        cap = self.capacity
        if nbytes > cap:   # larger than the cache: everything goes, its last `cap` bytes stay
            for e in od.values():
                self.written += e[1]
            od.clear()
            od[key] = [cap, cap if store else 0]
            self.occ = cap
            if store:      # its own stored bytes beyond `cap` were evicted while it was written
                self.written += nbytes - cap
                self.store_alloc += nbytes
            else:
                self.read += nbytes
            return nbytes
        miss = nbytes - r
        need = self.occ + miss - cap
        if need > 0 and self._evict(need, stop_at=key):
            # cascade: the tile's resident bytes were the least recently used; they are evicted
            # by its own misses and every byte of the tile misses
            assert ent is not None  # _evict stopped at the key: it was resident
            self.written += ent[1]
            self.occ -= r
            del od[key]
            ent, r, miss = None, 0, nbytes
            self._evict(self.occ + nbytes - cap)
        if ent is None:
            ent = od[key] = [nbytes, 0]
        else:
            ent[0] = nbytes
            od.move_to_end(key)
        self.occ += nbytes - r
        if store:
            ent[1] = nbytes
            self.store_alloc += miss
        else:
            self.read += miss
        return miss

    def flush(self) -> int:
        """Write back every dirty byte (the end of the program); returns the bytes written."""
        wb = 0
        for ent in self._od.values():
            wb += ent[1]
            ent[1] = 0
        self.written += wb
        return wb

    def resident(self) -> dict[object, int]:
        """Resident bytes per key (for tests)."""
        return {k: v[0] for k, v in self._od.items()}


# ---------------------------------------------------------------------- the parallel replay
@dataclass
class Replay:
    """HBM traffic of one replay, per phase and wave (bytes)."""

    hbm_read: int
    hbm_write: int
    wave_read: list[np.ndarray]   # per phase: bytes read from HBM in each wave
    wave_write: list[np.ndarray]  # per phase: bytes written back during each wave
    events: int              # requests replayed
    extrapolated: bool       # waves past the request budget were estimated (docs/hardware.md)
    granularity: str


def _replay_events(lru: LRU, keys, nbytes, stores) -> None:
    """``lru.access`` for each request, with its two common cases inlined: a hit, and a miss of
    an absent tile no larger than the cache (the same counts, a few times faster)."""
    od = lru._od
    get, mte, access, popitem = od.get, od.move_to_end, lru.access, od.popitem
    cap = lru.capacity
    for k, n, s in zip(keys.tolist(), nbytes.tolist(), stores.tolist()):
        ent = get(k)
        if ent is not None:
            if ent[0] >= n:        # a hit
                mte(k)
                if s:
                    ent[1] = ent[0]
                continue
            access(k, n, s)
            continue
        if n > cap:
            access(k, n, s)
            continue
        need = lru.occ + n - cap
        while need > 0:            # evict from the LRU end (as LRU._evict does)
            k0, e = popitem(last=False)
            r = e[0]
            if need < r:           # a partial eviction: the oldest bytes, clean ones first
                clean = r - e[1]
                if need > clean:
                    lru.written += need - clean
                    e[1] -= need - clean
                e[0] = r - need
                lru.occ -= need
                od[k0] = e
                mte(k0, last=False)
                break
            lru.written += e[1]
            lru.occ -= r
            need -= r
        od[k] = [n, n if s else 0]
        lru.occ += n
        if s:
            lru.store_alloc += n
        else:
            lru.read += n


def address(ph: Phase, keys: np.ndarray) -> np.ndarray:
    """Byte addresses of tile keys: each array in its own 4 GiB region, heads stacked, rows
    row-major (for sector-granular replays of validation-sized workloads; the regions keep
    sector numbers below 2^32, which pycachesim's tags need)."""
    keys = np.asarray(keys, dtype=np.int64)
    code = keys >> 56
    head = (keys >> 32) & ((1 << 24) - 1)
    row = keys & ((1 << 32) - 1)
    out = np.zeros(len(keys), dtype=np.int64)
    for name, c in ARRAYS.items():
        m = code == c
        if m.any():
            rph = ph.rows_per_head[name]
            out[m] = (np.int64(c) << 32) + (head[m] * rph + row[m]) * ph.row_bytes[name]
    return out


def _sectors(ph, keys, nbytes, stores, sector: int):
    """Tile requests expanded into the sectors they cover, in address order."""
    addr = address(ph, keys)
    s0 = addr // sector
    s1 = (addr + nbytes + sector - 1) // sector
    cnt = s1 - s0
    rep = np.repeat(np.arange(len(keys)), cnt)
    off = np.arange(int(cnt.sum())) - np.repeat(np.cumsum(cnt) - cnt, cnt)
    return s0[rep] + off, np.full(len(rep), sector, dtype=np.int64), stores[rep]


def hbm_bound(ph: Phase, P: int, capacity: int, dirty_before: float = 0.0,
              flush: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """Upper bounds on the HBM bytes each wave of ``P`` CTAs reads and writes, without replaying.

    Reads: :func:`read_bound`.  Writes: a wave writes back only dirty bytes it evicts: at most
    the dirty bytes present when it starts (at most ``min(capacity, ...)`` of the stores before
    it, ``dirty_before`` of them from earlier phases) plus its own stores, and (while no tile is
    larger than the L2) no more than it allocates (its read misses and its stores).  ``flush``
    (the dirty bytes left at the end, at most ``min(capacity, every stored byte)``) is added to
    the last wave, as the replay does.
    """
    rb = read_bound(ph, P, capacity)
    n = ph.n
    nw = len(rb)
    wave = np.arange(n) // P
    st = np.bincount(wave, weights=ph.store_bytes.astype(np.float64), minlength=nw)
    before = np.minimum(float(capacity), dirty_before + np.cumsum(st) - st)
    if n and max(int(ph.load_bytes.max()), int(ph.store_bytes.max())) >= capacity:
        wb = before + st
    else:
        wb = st + np.minimum(rb, before)
    if nw:
        wb[-1] += flush
    return rb, wb


def read_floor_waves(ph: Phase, P: int, capacity: int, first: bool) -> np.ndarray:
    """Lower bounds on the HBM bytes each wave of ``P`` CTAs reads: the distinct tiles it loads
    (:func:`read_floor`'s count, per wave) less what the L2 may hold when the wave starts
    (nothing before the first wave of a kernel's first phase, ``first``; ``capacity`` after).
    Cached."""
    cache = ph.__dict__.setdefault("_read_floor_waves", {})
    key = (P, capacity, first)
    if key not in cache:
        n = ph.n
        nw = -(-n // P) if n else 0
        wave = np.arange(n) // P
        _, union, kvb = _kv_union(ph, wave)
        if kvb:
            distinct = union * kvb
        elif ph.name in ("combine", "pre"):
            distinct = np.bincount(wave, weights=ph.load_bytes.astype(np.float64),
                                   minlength=nw)
        else:
            distinct = np.zeros(nw)
        resident = np.full(nw, float(capacity))
        if first and nw:
            resident[0] = 0.0
        cache[key] = np.maximum(0.0, distinct - resident)
    return cache[key]


def _kv_union(ph: Phase, group: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """Rows of the inner loop's K/V tiles per CTA and their union per ``group`` (an int array
    per CTA, e.g. its wave), counted per (KV head, block origin): (rows per CTA, union rows per
    group id, K/V bytes per row; 0 when the inner loop loads no K/V)."""
    n = ph.n
    kvb = sum(ph.row_bytes[op.array] for op in ph.template.body
              if not op.store and op.head == "kv" and op.rows == "inner")
    ng = int(group.max()) + 1 if n else 0
    if not kvb or not n:
        return np.zeros(n), np.zeros(ng), 0
    B = ph.inner_block
    start = ph.i_base + ph.i_first * B
    stop = np.minimum(ph.i_end, ph.i_base + (ph.i_first + ph.i_n) * B)
    stop = np.where(ph.i_n > 0, stop, start)
    rows = (stop - start).astype(np.float64)
    o = np.lexsort((start, ph.i_base, ph.kvhead, group))
    g, h, b, s0, s1 = group[o], ph.kvhead[o], ph.i_base[o], start[o], stop[o]
    new = np.ones(n, dtype=bool)
    new[1:] = (g[1:] != g[:-1]) | (h[1:] != h[:-1]) | (b[1:] != b[:-1])
    off = (np.cumsum(new) - 1).astype(np.int64) << 36   # rows < 2^36 per group
    runmax = np.maximum.accumulate(s1 + off)
    prev = np.empty(n, dtype=np.int64)
    prev[0] = np.iinfo(np.int64).min
    prev[1:] = runmax[:-1]
    cover = np.maximum(0, (s1 + off) - np.maximum(s0 + off, prev)).astype(np.float64)
    return rows, np.bincount(g, weights=cover, minlength=ng), kvb


def read_floor(ph: Phase, resident: int) -> float:
    """A lower bound on the HBM bytes the phase reads: the distinct tiles it loads, less the
    ``resident`` bytes the L2 may hold when it starts (0 for a kernel's first phase: the replay
    starts from an empty L2; its capacity for a later one); a tile not resident then misses at
    least once.  Counted: the union of the inner loop's K/V rows, and for a phase without one
    (the split combine, the backward's preprocessing: every CTA loads only its own tiles) every
    loaded byte.  Cached."""
    cache = ph.__dict__.setdefault("_read_floor", {})
    if resident not in cache:
        _, union, kvb = _kv_union(ph, np.zeros(ph.n, dtype=np.int64))
        if kvb:
            distinct = float(union.sum()) * kvb
        elif ph.name in ("combine", "pre"):
            distinct = float(ph.load_bytes.sum())
        else:
            distinct = 0.0
        cache[resident] = max(0.0, distinct - resident)
    return cache[resident]


def read_bound(ph: Phase, P: int, capacity: int) -> np.ndarray:
    """An upper bound on the HBM bytes each wave of ``P`` CTAs reads, without replaying.

    A wave never reads more than it requests.  And if the tiles a wave touches (loads and stores)
    fit in the L2 together, no tile it touches is evicted between two of its own requests (an LRU
    evicts a tile only after ``capacity`` bytes of other tiles were touched since its last use),
    so each of its tiles misses at most once: the wave reads at most the bytes of the distinct
    tiles it loads.  Distinct K/V tiles are counted as the union of the CTAs' inner-loop row
    ranges per (KV head, block origin); every other load counts in full (an over-count keeps the
    bound).  Cached on the phase per (P, capacity).
    """
    cache = ph.__dict__.setdefault("_read_bound", {})
    if (P, capacity) in cache:
        return cache[(P, capacity)]
    n = ph.n
    nw = -(-n // P) if n else 0
    wave = np.arange(n) // P
    loads = ph.load_bytes.astype(np.float64)
    wl = np.bincount(wave, weights=loads, minlength=nw)
    ws = np.bincount(wave, weights=ph.store_bytes.astype(np.float64), minlength=nw)
    rows, union, kvb = _kv_union(ph, wave)
    if not kvb:
        distinct = wl
    else:
        own = loads - rows * ph.inner_heads * kvb      # loads other than the inner K/V tiles
        distinct = np.bincount(wave, weights=own, minlength=nw) + union * kvb
    out = np.where(distinct + ws <= capacity, np.minimum(wl, distinct), wl)
    cache[(P, capacity)] = out
    return out


def replay(traffic: Traffic, capacity: int, waves_of: list[int], *, granularity: str = "tile",
           sector: int = 32, budget: int | None = 400_000, min_waves: int = 2) -> Replay:
    """Replay every phase's CTAs, ``waves_of[i]`` at a time, through one LRU of ``capacity``.

    Within a wave the CTAs advance in lockstep (:func:`~.traffic.wave_events`); waves follow one
    another; phases (kernel launches) follow one another with the L2 as the last left it.  With
    ``granularity="sector"`` every tile is split into its ``sector``-byte sectors (validation).

    ``budget`` (requests): past it (and after ``min_waves`` waves of the phase), the remaining
    waves of a phase are estimated from the waves replayed so far (their mean HBM reads per CTA over the later half, as the grid is periodic
    in heads; each stored tile written back once), and the result says ``extrapolated``.
    """
    lru = LRU(capacity)
    wave_read, wave_write = [], []
    events = 0
    extrapolated = False
    for ph, P in zip(traffic.phases, waves_of):
        nw = -(-ph.n // P) if ph.n else 0
        wr = np.zeros(nw, dtype=np.float64)
        ww = np.zeros(nw, dtype=np.float64)
        for w in range(nw):
            i0, i1 = w * P, min(ph.n, (w + 1) * P)
            if budget is not None and events > budget and w >= min_waves:
                done = np.arange(w // 2, w)
                ctas = sum(min(ph.n, (x + 1) * P) - x * P for x in done)
                rate = wr[done].sum() / max(ctas, 1)
                for x in range(w, nw):
                    j0, j1 = x * P, min(ph.n, (x + 1) * P)
                    wr[x] = rate * (j1 - j0)
                    ww[x] = float(ph.store_bytes[j0:j1].sum())
                extrapolated = True
                break
            k, nb, st = wave_events(ph, i0, i1)
            if granularity == "sector":
                k, nb, st = _sectors(ph, k, nb, st, sector)
            r0, w0 = lru.read, lru.written
            _replay_events(lru, k, nb, st)
            events += len(k)
            wr[w] = lru.read - r0
            ww[w] = lru.written - w0
        wave_read.append(wr)
        wave_write.append(ww)
    flushed = lru.flush()
    for ww in reversed(wave_write):
        if len(ww):
            ww[-1] += flushed
            break
    total_r = int(round(sum(float(x.sum()) for x in wave_read)))
    total_w = int(round(sum(float(x.sum()) for x in wave_write)))
    return Replay(total_r, total_w, wave_read, wave_write, events, extrapolated, granularity)
