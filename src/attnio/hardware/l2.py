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

from ..core.checks import check_int

__all__ = ["LRU"]


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
        while need > 0 and od:
            key = next(iter(od))
            if key == stop_at:
                return True
            ent = od[key]
            take = need if need < ent[0] else ent[0]
            clean = ent[0] - ent[1]
            if take > clean:          # the oldest bytes go first: clean ones, then dirty
                wb = take - clean
                self.written += wb
                ent[1] -= wb
            ent[0] -= take
            self.occ -= take
            need -= take
            if ent[0] == 0:
                del od[key]
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
