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
from .traffic import Traffic, address, wave_events

__all__ = ["LRU", "Replay", "replay"]


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
        self._od: OrderedDict = OrderedDict()   # key -> [resident bytes, dirty bytes]
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

    def resident(self) -> dict:
        """Resident bytes per key (for tests)."""
        return {k: v[0] for k, v in self._od.items()}


# ---------------------------------------------------------------------- the parallel replay
@dataclass
class Replay:
    """HBM traffic of one replay, per phase and wave (bytes)."""

    hbm_read: int
    hbm_write: int
    wave_read: list          # per phase: np.ndarray of bytes read from HBM in each wave
    wave_write: list         # per phase: bytes written back during each wave
    events: int              # requests replayed
    extrapolated: bool       # waves past the request budget were estimated (docs/hardware.md)
    granularity: str


def _replay_events(lru: LRU, keys, nbytes, stores) -> None:
    od = lru._od
    get, mte, access = od.get, od.move_to_end, lru.access
    for k, n, s in zip(keys.tolist(), nbytes.tolist(), stores.tolist()):
        ent = get(k)
        if ent is not None and ent[0] >= n:   # the common case: a hit
            mte(k)
            if s:
                ent[1] = ent[0]
        else:
            access(k, n, s)


def _sectors(ph, keys, nbytes, stores, sector: int):
    """Tile requests expanded into the sectors they cover, in address order."""
    addr = address(ph, keys)
    s0 = addr // sector
    s1 = (addr + nbytes + sector - 1) // sector
    cnt = s1 - s0
    rep = np.repeat(np.arange(len(keys)), cnt)
    off = np.arange(int(cnt.sum())) - np.repeat(np.cumsum(cnt) - cnt, cnt)
    return s0[rep] + off, np.full(len(rep), sector, dtype=np.int64), stores[rep]


def replay(traffic: Traffic, capacity: int, waves_of: list[int], *, granularity: str = "tile",
           sector: int = 32, budget: int | None = 400_000) -> Replay:
    """Replay every phase's CTAs, ``waves_of[i]`` at a time, through one LRU of ``capacity``.

    Within a wave the CTAs advance in lockstep (:func:`~.traffic.wave_events`); waves follow one
    another; phases (kernel launches) follow one another with the L2 as the last left it.  With
    ``granularity="sector"`` every tile is split into its ``sector``-byte sectors (validation).

    ``budget`` (requests): past it, the remaining waves of a phase are estimated from the waves
    replayed so far (their mean HBM reads per CTA over the later half, as the grid is periodic
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
            if budget is not None and events > budget and w >= 2:
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
