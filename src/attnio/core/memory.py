"""The two-level memory: the referee that counts every word an algorithm moves.

Model (Hong & Kung's red-blue pebble game, as used by FlashAttention and Saha & Ye):

* **slow memory** is unbounded and holds the inputs at the start and the output at the end;
* **fast memory** holds at most ``M`` words (a word is one number, whatever its dtype);
* a **read** moves one word slow -> fast, a **write** moves one word fast -> slow;
  ``I/O = reads + writes``; dropping a word from fast memory is free.

The invariant that makes the counts trustworthy is kept in the types: an algorithm receives
:class:`SlowArray` handles, which carry a name and a shape but no data.  The only way to reach the
numbers behind a handle is :meth:`TwoLevelMemory.load`, which counts the words and returns a
:class:`FastTile`.  Arithmetic runs through :meth:`TwoLevelMemory.compute`, which hands the
function the arrays of fast tiles only.  Results reach slow memory through
:meth:`TwoLevelMemory.store`, which counts them.

Two modes run the same schedule code:

* ``mode="compute"``: tiles hold real numpy arrays and ``compute`` runs the arithmetic;
* ``mode="count"``: tiles hold shapes only, ``compute`` does nothing, the counts are identical.

Bulk counting.  A schedule iterates over blocks with :meth:`TwoLevelMemory.blocks`.  In count mode
(with ``bulk=True``, the default) a run of consecutive blocks of equal size is executed once, as a
representative, and every word counted inside it is multiplied by the run's length.  The body of
such a loop must therefore move a number of words that depends on the block's *size* only, not on
its position (``uniform=True``, the default), and must leave fast memory as it found it; a loop whose
body depends on the position in another way passes ``uniform=False`` and is iterated block by
block.  :meth:`TwoLevelMemory.repeat` does the same for ``n`` alike operations that are not loop
steps (a bulk count standing for the lines of a tile by their sums).  Tests hold bulk counts to
equal step-by-step counts (``bulk=False``).

Masked loops.  Under a causal or windowed mask the body of an outer loop depends on its block's
position through one thing only: the range ``[lo, hi)`` of the other axis that the block sees,
which an inner loop then walks.  Such a loop passes ``band=`` (a :class:`~attnio.core.masks.Band`
describing that range), and so does its inner loop.  In bulk count mode the outer loop then runs
once per *run* of alike blocks (at most four: blocks that see nothing, blocks that see something,
blocks that see nothing, the short last block), and the inner loop inside a run executes one full
and one short block of its axis, each with the number of times the whole run meets it (a floor
sum, :meth:`~attnio.core.masks.Band.visits`): a causal count at N = 10^9 costs a few dozen
executed steps.  Step by step (``bulk=False``, compute mode, a tracer) the same loops visit every
block; tests hold the two equal.

>>> mem = TwoLevelMemory(16, mode="compute")
>>> A = mem.slow("A", (4, 4), data=np.arange(16.0).reshape(4, 4))
>>> t = mem.load(A, rows=slice(0, 2))
>>> mem.compute(lambda x: x.__imul__(2.0), t)
>>> mem.store(t, A, rows=slice(0, 2))
>>> mem.free(t)
>>> s = mem.stats()
>>> (s.reads, s.writes, s.total, s.peak)
(8, 8, 16, 8)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, Union

import numpy as np

from .checks import check_int
from .errors import CapacityError, ParameterError, ScheduleError
from .masks import Band, Run

Mode = Literal["compute", "count"]
#: What selects rows or columns of a slow array: a Block, a contiguous slice, an index, or None
#: (the whole dimension).
Index = Union["Block", slice, int, np.integer, None]

__all__ = [
    "ArrayIO",
    "Block",
    "IOCount",
    "FastTile",
    "IOStats",
    "SlowArray",
    "Tracer",
    "TwoLevelMemory",
]


@dataclass(frozen=True)
class IOCount:
    """A predicted count of reads and writes (words): what a closed form returns."""

    reads: int
    writes: int

    @property
    def total(self) -> int:
        return self.reads + self.writes

    def __add__(self, other: IOCount) -> IOCount:
        return IOCount(self.reads + other.reads, self.writes + other.writes)

    def scaled(self, n: int) -> IOCount:
        """``n`` independent copies (heads) of this count."""
        return IOCount(n * self.reads, n * self.writes)


@dataclass(frozen=True)
class Block:
    """A contiguous block ``[start, stop)`` of one dimension, the ``index``-th of its partition."""

    index: int
    start: int
    stop: int

    @property
    def size(self) -> int:
        return self.stop - self.start

    @property
    def slice(self) -> slice:
        return slice(self.start, self.stop)


@dataclass
class _BandFrame:
    """An active run of a masked outer loop (bulk count mode): its band, block size, run and
    representative block ``j``; ``inner`` is the enclosing inner loop's (per, mult, size, short)
    while one runs."""

    band: Band
    size: int
    run: Run
    j: int
    inner: tuple[int, int, int, bool] | None = None


class SlowArray:
    """An opaque handle to an array in slow memory: a name and a shape, never the data."""

    __slots__ = ("_base", "_key", "_row0", "name", "shape")

    def __init__(self, name: str, shape: tuple[int, ...], key: int,
                 base: SlowArray | None = None, row0: int = 0):
        self.name = name
        self.shape = shape
        self._key = key
        self._base = base  # a view (see TwoLevelMemory.view) maps rows onto its base array
        self._row0 = row0

    @property
    def size(self) -> int:
        return _words(self.shape)

    def __repr__(self) -> str:
        return f"SlowArray({self.name!r}, shape={self.shape})"


class FastTile:
    """A tile resident in fast memory.  Its numbers are reachable only inside ``compute``."""

    __slots__ = ("_alive", "_data", "_owner", "label", "origin", "shape", "size")

    def __init__(self, shape: tuple[int, ...], label: str, data: np.ndarray | None,
                 owner: TwoLevelMemory, origin: tuple[str, tuple[slice, ...]] | None = None):
        self.shape = shape
        self.size = _words(shape)
        self.label = label
        self.origin = origin  # (SlowArray name, index tuple) for loaded tiles, else None
        self._data = data
        self._owner = owner
        self._alive = True

    def __repr__(self) -> str:
        state = "" if self._alive else ", freed"
        return f"FastTile({self.label!r}, shape={self.shape}{state})"


@dataclass(frozen=True)
class ArrayIO:
    """Words read from and written to one slow array."""

    reads: int = 0
    writes: int = 0

    @property
    def total(self) -> int:
        return self.reads + self.writes


@dataclass(frozen=True)
class IOStats:
    """Counts of one run: ``reads``, ``writes``, ``total``, ``peak`` words resident, per array.

    ``steps`` is the number of block iterations the schedule executed (bulk runs counted with
    their multiplicity), a measure of how many tile steps the schedule takes.
    """

    reads: int
    writes: int
    peak: int
    M: int
    steps: int = 0
    per_array: dict[str, ArrayIO] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return self.reads + self.writes

    def as_dict(self) -> dict[str, Any]:
        return {
            "reads": self.reads,
            "writes": self.writes,
            "total": self.total,
            "peak": self.peak,
            "M": self.M,
            "steps": self.steps,
            "per_array": {k: {"reads": v.reads, "writes": v.writes} for k, v in self.per_array.items()},
        }


def _words(shape: tuple[int, ...]) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def _norm_index(idx: Index, dim: int) -> slice:
    if type(idx) is Block:
        start, stop = idx.start, idx.stop
        if 0 <= start <= stop <= dim:
            return slice(start, stop)
    if idx is None:
        return slice(0, dim)
    if isinstance(idx, Block):
        idx = idx.slice
    if isinstance(idx, (int, np.integer)):
        idx = slice(int(idx), int(idx) + 1)
    if not isinstance(idx, slice) or idx.step not in (None, 1):
        raise ScheduleError(f"index must be a contiguous slice or Block, got {idx!r}")
    start, stop, _ = idx.indices(dim)
    stop = max(stop, start)
    return slice(start, stop)


def _fmt_index(shape: tuple[int, ...], idx: tuple[slice, ...]) -> str:
    parts = []
    for s, dim in zip(idx, shape):
        parts.append(":" if (s.start, s.stop) == (0, dim) else f"{s.start}:{s.stop}")
    return "[" + ", ".join(parts) + "]"


class Tracer(Protocol):
    """An observer of every step of a :class:`TwoLevelMemory` (``TwoLevelMemory(tracer=...)``).

    Each method is called after the step it names was checked (capacity, liveness, bounds);
    ``idx`` is the absolute index of the region in the base slow array (one slice per
    dimension).  The element-trace recorder (:mod:`attnio.cachesim.tracing`) and the per-CTA
    tile-stream recorder (:mod:`attnio.hardware.traffic`) implement it.
    """

    def slow(self, arr: SlowArray) -> None:
        """A slow array was created."""

    def load(self, tile: FastTile, src: SlowArray, idx: tuple[slice, ...]) -> None:
        """``tile`` was loaded from ``src[idx]``."""

    def store(self, tile: FastTile, dst: SlowArray, idx: tuple[slice, ...]) -> None:
        """``tile`` was written to ``dst[idx]``."""

    def alloc(self, tile: FastTile, filled: bool) -> None:
        """``tile`` was allocated in fast memory (``filled``: with a fill value)."""

    def free(self, tile: FastTile) -> None:
        """``tile`` left fast memory."""

    def compute(self, tiles: tuple[FastTile, ...], writes: int | None) -> None:
        """Arithmetic ran on ``tiles`` (the leading ``writes`` of them modified; None: any)."""


class TwoLevelMemory:
    """A fast memory of ``M`` words in front of an unbounded slow memory, counting every word moved.

    Parameters
    ----------
    M : int
        Capacity of fast memory in words (>= 1).
    mode : {"compute", "count"}
        ``"compute"`` does the arithmetic on real tiles; ``"count"`` tracks shapes only.
    bulk : bool
        In count mode, execute runs of equal blocks once and multiply their counts (default True).
    dtype : numpy dtype
        The dtype of fast tiles (the accumulation precision) in compute mode.
    tracer : Tracer, optional
        Observer of every step (used by :func:`attnio.trace`): its methods ``slow(arr)``,
        ``load(tile, src, idx)``, ``store(tile, dst, idx)``, ``alloc(tile, filled)``, ``free(tile)`` and
        ``compute(tiles, writes)`` are called after each step is checked (:class:`Tracer`).  A
        tracer needs every step, so it turns bulk counting off.  None (the default) changes
        nothing.
    progress : callable, optional
        ``progress(steps, progress_total)`` is called about 500 times over ``progress_total``
        tile steps (:mod:`attnio.core.progress`); None (the default) costs one integer
        comparison per block.
    """

    def __init__(self, M: int, mode: Mode = "compute", *, bulk: bool = True,
                 dtype: Any = np.float64, tracer: Tracer | None = None,
                 progress: Callable[[int, int], None] | None = None, progress_total: int = 0):
        self.M = check_int("M", M, minimum=1, maximum=1 << 60)
        if mode not in ("compute", "count"):
            raise ParameterError(f"mode must be 'compute' or 'count', got {mode!r}", param="mode")
        self.mode: Mode = mode
        self.tracer = tracer
        self.bulk = bool(bulk) and mode == "count" and tracer is None
        self.dtype = np.dtype(dtype)
        self._slow: dict[int, SlowArray] = {}
        self._slow_data: dict[int, np.ndarray | None] = {}
        self._names: set[str] = set()
        self._scratch: set[str] = set()
        self._per_array: dict[str, list[int]] = {}
        self._reads = 0
        self._writes = 0
        self._steps = 0
        self._occ = 0
        self._peak = 0
        self._mult = 1
        self._next_key = 0
        self._progress = progress
        self._progress_total = int(progress_total)
        self._stride = max(1, self._progress_total // 500) if progress_total else 1024
        self._tick_at: float = self._stride if progress is not None else math.inf
        self._bands: list[_BandFrame] = []  # active runs of masked loops

    # ------------------------------------------------------------------ slow memory
    @property
    def computing(self) -> bool:
        return self.mode == "compute"

    def slow(self, name: str, shape: tuple[int, ...], data: np.ndarray | None = None) -> SlowArray:
        """Create an array in slow memory (no I/O: inputs start there, scratch is unbounded).

        In compute mode ``data`` (copied) gives its contents; without it the array starts as NaN,
        so that reading a word never written shows up in the output.
        """
        if name in self._names:
            raise ScheduleError(f"slow array {name!r} already exists")
        shape = tuple(int(s) for s in shape)
        key = self._next_key
        self._next_key += 1
        arr = SlowArray(name, shape, key)
        if self.computing:
            if data is None:
                self._slow_data[key] = np.full(shape, np.nan, dtype=self.dtype)
            else:
                data = np.asarray(data)
                if data.shape != shape:
                    raise ScheduleError(f"data for {name!r} has shape {data.shape}, expected {shape}")
                self._slow_data[key] = np.array(data, copy=True)
        else:
            self._slow_data[key] = None
        self._slow[key] = arr
        self._names.add(name)
        self._per_array[name] = [0, 0]
        if self.tracer is not None:
            self.tracer.slow(arr)
        return arr

    def scratch(self, name: str, shape: tuple[int, ...]) -> SlowArray:
        """Slow-memory workspace: a new array, or the existing scratch array of that name and shape
        (a schedule run once per head reuses its workspace, as a real kernel would)."""
        shape = tuple(int(s) for s in shape)
        for arr in self._slow.values():
            if arr.name == name:
                if arr.shape != shape or name not in self._scratch:
                    raise ScheduleError(f"slow array {name!r} exists with shape {arr.shape}")
                return arr
        self._scratch.add(name)
        return self.slow(name, shape)

    def view(self, arr: SlowArray, rows: Index, name: str | None = None) -> SlowArray:
        """A handle to the rows ``rows`` of ``arr`` (one head of a stacked batch, say).

        Accesses through a view are counted against the base array and reach its words.
        """
        base = arr._base or arr
        if self._slow.get(base._key) is not base:
            raise ScheduleError(f"{arr!r} does not belong to this memory")
        r = _norm_index(rows, arr.shape[0])
        row0 = arr._row0 + r.start
        shape = (r.stop - r.start,) + tuple(arr.shape[1:])
        label = name or f"{base.name}[{row0}:{row0 + shape[0]}]"
        return SlowArray(label, shape, base._key, base=base, row0=row0)

    def _resolve(self, arr: SlowArray, rows: Index,
                 cols: Index) -> tuple[SlowArray, tuple[slice, ...]]:
        """The base array and the absolute index of ``arr[rows, cols]``."""
        base = arr._base or arr
        if self._slow.get(base._key) is not base:
            raise ScheduleError(f"{arr!r} does not belong to this memory")
        idx: tuple[slice, ...]
        if len(arr.shape) == 1:
            if cols is not None:
                raise ScheduleError(f"{arr.name} is one-dimensional: no column index")
            idx = (_norm_index(rows, arr.shape[0]),)
        else:
            idx = (_norm_index(rows, arr.shape[0]), _norm_index(cols, arr.shape[1]))
        if arr._base is not None:
            r = idx[0]
            idx = (slice(r.start + arr._row0, r.stop + arr._row0),) + idx[1:]
        return base, idx

    # ------------------------------------------------------------------ fast memory
    def _claim(self, words: int, step: str | Callable[[], str]) -> None:
        if self._occ + words > self.M:
            raise CapacityError(step() if callable(step) else step, self._occ, words, self.M)
        self._occ += words
        self._peak = max(self._peak, self._occ)

    def load(self, src: SlowArray, rows: Index = None, cols: Index = None, *,
             label: str | None = None) -> FastTile:
        """Read ``src[rows, cols]`` into a new fast tile; counts one read per word."""
        src, idx = self._resolve(src, rows, cols)
        shape = tuple(s.stop - s.start for s in idx)
        words = _words(shape)
        self._claim(words, lambda: f"load {src.name}{_fmt_index(src.shape, idx)}")
        n = words * self._mult
        self._reads += n
        self._per_array[src.name][0] += n
        data = None
        if self.computing:
            slow = self._slow_data[src._key]
            assert slow is not None  # compute mode keeps every slow array's data
            data = np.array(slow[idx], dtype=self.dtype)
        tile = FastTile(shape, label or src.name, data, self, origin=(src.name, idx))
        if self.tracer is not None:
            self.tracer.load(tile, src, idx)
        return tile

    def store(self, tile: FastTile, dst: SlowArray, rows: Index = None, cols: Index = None) -> None:
        """Write ``tile`` to ``dst[rows, cols]``; counts one write per word.  The tile stays resident."""
        self._check_alive(tile, "store")
        dst, idx = self._resolve(dst, rows, cols)
        shape = tuple(s.stop - s.start for s in idx)
        if shape != tile.shape:
            raise ScheduleError(
                f"store {tile.label} of shape {tile.shape} into {dst.name}{_fmt_index(dst.shape, idx)}"
                f" of shape {shape}"
            )
        n = tile.size * self._mult
        self._writes += n
        self._per_array[dst.name][1] += n
        if self.computing:
            target = self._slow_data[dst._key]
            assert target is not None and tile._data is not None  # compute mode
            target[idx] = tile._data.astype(target.dtype, copy=False)
        if self.tracer is not None:
            self.tracer.store(tile, dst, idx)

    def alloc(
        self, shape: tuple[int, ...], fill: float | None = None, *, label: str = "scratch"
    ) -> FastTile:
        """Scratch space in fast memory, filled with ``fill`` (None: uninitialised); no I/O."""
        shape = tuple(int(s) for s in shape)
        words = _words(shape)
        self._claim(words, lambda: f"alloc {label}{list(shape)}")
        data = None
        if self.computing:
            if fill is None:
                data = np.empty(shape, dtype=self.dtype)
            else:
                data = np.full(shape, fill, dtype=self.dtype)
        tile = FastTile(shape, label, data, self)
        if self.tracer is not None:
            self.tracer.alloc(tile, fill is not None)
        return tile

    def free(self, *tiles: FastTile) -> None:
        """Drop tiles from fast memory (free: no I/O)."""
        for t in tiles:
            if type(t) is not FastTile or t._owner is not self or not t._alive:
                self._check_alive(t, "free")
            t._alive = False
            t._data = None
            self._occ -= t.size
            if self.tracer is not None:
                self.tracer.free(t)

    def _check_alive(self, tile: FastTile, what: str) -> None:
        if not isinstance(tile, FastTile) or tile._owner is not self:
            raise ScheduleError(f"{what}: {tile!r} is not a tile of this memory")
        if not tile._alive:
            raise ScheduleError(f"{what}: {tile.label} was already freed")

    # ------------------------------------------------------------------ arithmetic
    def compute(self, fn: Callable[..., object], *tiles: FastTile, writes: int | None = None) -> None:
        """Run ``fn`` on the numpy arrays of ``tiles`` (fast memory only); ``fn`` works in place.

        ``writes`` declares how many of the leading tiles ``fn`` modifies (None: any of them); the
        rest are only read.  In count mode nothing runs.  ``fn`` sees no slow memory: its
        arguments are the tiles' arrays, and its return value is discarded.
        """
        for t in tiles:
            if t._owner is not self or not t._alive:
                self._check_alive(t, "compute")
        if writes is not None and not 0 <= writes <= len(tiles):
            raise ScheduleError(f"compute: writes={writes} but only {len(tiles)} tiles given")
        if self.tracer is not None:
            self.tracer.compute(tiles, writes)
        if self.computing:
            fn(*(t._data for t in tiles))

    def matmul(
        self,
        out: FastTile,
        a: FastTile,
        b: FastTile,
        *,
        transpose_b: bool = False,
        alpha: float = 1.0,
        accumulate: bool = False,
    ) -> None:
        """``out = alpha * a @ b`` (or ``b.T``), added to ``out`` when ``accumulate``."""
        bs = b.shape[::-1] if transpose_b else b.shape
        if a.shape[1] != bs[0] or out.shape != (a.shape[0], bs[1]):
            raise ScheduleError(f"matmul shapes {out.shape} = {a.shape} @ {bs}")

        def _mm(o: np.ndarray, x: np.ndarray, y: np.ndarray) -> None:
            y = y.T if transpose_b else y
            if accumulate:
                o += alpha * (x @ y) if alpha != 1.0 else x @ y
            else:
                np.matmul(x, y, out=o)
                if alpha != 1.0:
                    o *= alpha

        self.compute(_mm, out, a, b, writes=1)

    def accumulate_products(self, out: FastTile, a: SlowArray, b: SlowArray,
                            tile: tuple[Index, Index], inner: Iterable[Block], *,
                            transpose_b: bool = False, alpha: float = 1.0,
                            labels: tuple[str, str] = ("A", "B")) -> None:
        """``out += alpha · Σ_k a[rows, k] · b[k, cols]`` (``b[cols, k]ᵀ`` with ``transpose_b``)
        for the output tile ``tile = (rows, cols)``, over the blocks k of ``inner``, one pair of
        tiles at a time: each pair loaded (``a``'s tile first), multiplied into ``out`` and
        freed.  The inner loop of an output-stationary blocked matmul."""
        rows, cols = tile
        for kb in inner:
            at = self.load(a, rows, kb, label=labels[0])
            bt = self.load(b, cols, kb, label=labels[1]) if transpose_b else \
                self.load(b, kb, cols, label=labels[1])
            self.matmul(out, at, bt, transpose_b=transpose_b, alpha=alpha, accumulate=True)
            self.free(at, bt)

    # ------------------------------------------------------------------ loops
    def blocks(
        self,
        total: int,
        size: int,
        *,
        lo: int = 0,
        hi: int | None = None,
        uniform: bool = True,
        band: Band | None = None,
        within: Block | None = None,
    ) -> Iterator[Block]:
        """Blocks of the partition of ``[0, total)`` into pieces of ``size`` that meet ``[lo, hi)``.

        With ``uniform=True`` the caller promises that the loop body's I/O depends only on the
        block's size; in bulk count mode each run of equal-size blocks then executes once with its
        counts multiplied.  The body must free what it allocates (checked).

        ``band`` marks a masked loop pair (module docstring): on the outer loop
        (``band.total == total``, no ``lo``/``hi``) the caller promises that the body's I/O
        depends only on the block's size, on whether ``band.range`` of the block is empty, and on
        the inner loop, which passes the same ``band`` with ``lo, hi = band.range(block)`` of the
        outer block (checked).  In bulk count mode the outer loop then runs once per run of alike
        blocks and the inner one once per block size, with the run's total visits.

        ``within`` (a block of an enclosing inner loop of the same band, on the same axis, whose
        block size is a multiple of ``size``) restricts an inner loop to that block: step by
        step it walks the ``size``-blocks of ``[lo, hi)`` inside ``within``; in bulk count mode,
        where the enclosing loop's blocks tile the band's range, it walks the whole range once
        per run (so its visits are not multiplied by the enclosing loop's).
        """
        if size < 1:
            raise ScheduleError(f"block size must be >= 1, got {size}")
        if band is not None and self.bulk:
            if self._bands and self._bands[-1].band is band and total == band.Z:
                yield from self._band_inner(total, size, lo, hi, within is not None)
                return
            if total == band.total and lo == 0 and hi is None:
                yield from self._band_outer(band, size)
                return
            raise ScheduleError(f"band {band} does not describe a loop over [{lo}, {hi}) of "
                                f"{total} in blocks of {size}")
        if band is not None:
            uniform = False
        hi = total if hi is None else min(hi, total)
        if within is not None:
            lo, hi = max(lo, within.start), min(hi, within.stop)
        lo = max(lo, 0)
        if hi <= lo:
            return
        first = lo // size
        last = (hi - 1) // size  # inclusive
        nfull_end = total // size  # blocks [0, nfull_end) are full
        if not (self.bulk and uniform):
            for j in range(first, last + 1):
                self._steps += self._mult
                if self._steps >= self._tick_at:
                    self._tick()
                yield Block(j, j * size, min(total, (j + 1) * size))
            return
        runs = []
        full_last = min(last, nfull_end - 1)
        if full_last >= first:
            runs.append((first, full_last - first + 1))
        if last >= nfull_end:  # the partial last block
            runs.append((last, 1))
        for j, count in runs:
            saved, occ = self._mult, self._occ
            self._mult = saved * count
            self._steps += self._mult
            if self._steps >= self._tick_at:
                self._tick()
            try:
                yield Block(j, j * size, min(total, (j + 1) * size))
            finally:
                self._mult = saved
            if self._occ != occ:
                raise ScheduleError(
                    f"a uniform loop body changed fast-memory occupancy from {occ} to {self._occ};"
                    " free what the body allocates, or pass uniform=False"
                )

    def repeat(self, n: int) -> Iterator[None]:
        """``n`` alike operations that are not loop steps (a bulk count's stand-in for the lines
        of a tile, say): step by step (compute mode, ``bulk=False``, a tracer) the body runs
        ``n`` times; in bulk count mode once, every word it moves counted ``n`` times.  No step
        is counted either way (unlike :meth:`blocks`).  The body must move the same words every
        time and leave fast memory as it found it (checked in bulk)."""
        n = int(n)
        if n <= 0:
            return
        if not self.bulk:
            for _ in range(n):
                yield None
            return
        saved, occ = self._mult, self._occ
        self._mult = saved * n
        try:
            yield None
        finally:
            self._mult = saved
        if self._occ != occ:
            raise ScheduleError(f"a repeated body changed fast-memory occupancy from {occ} to "
                                f"{self._occ}; free what the body allocates")

    def _tick(self) -> None:
        assert self._progress is not None
        self._progress(self._steps, self._progress_total)
        self._tick_at = self._steps + self._stride

    def _band_outer(self, band: Band, size: int) -> Iterator[Block]:
        """Bulk count of a masked outer loop: one representative block per run of alike blocks,
        its counts multiplied by the run's length."""
        total = band.total
        for run in band.runs(size):
            j = run.first
            saved, occ = self._mult, self._occ
            self._mult = saved * run.blocks
            self._steps += self._mult
            if self._steps >= self._tick_at:
                self._tick()
            self._bands.append(_BandFrame(band, size, run, j))
            try:
                yield Block(j, j * size, min(total, (j + 1) * size))
            finally:
                self._mult = saved
                self._bands.pop()
            if self._occ != occ:
                raise ScheduleError(
                    f"a masked loop body changed fast-memory occupancy from {occ} to {self._occ};"
                    " free what the body allocates"
                )

    def _band_inner(self, total: int, size: int, lo: int, hi: int | None,
                    nested: bool) -> Iterator[Block]:
        """Bulk count of the inner loop of a masked pair inside a run of the outer loop: one full
        and one short block of this axis, each with the run's total number of visits."""
        frame = self._bands[-1]
        band, B, run, j, inner = frame.band, frame.size, frame.run, frame.j, frame.inner
        want = band.range(j * B, min(band.total, (j + 1) * B))
        if (lo, total if hi is None else min(hi, total)) != want:
            raise ScheduleError(f"the inner loop of a masked pair walks [{lo}, {hi}) but its band "
                                f"gives {list(want)} for the outer block {j}")
        if nested:  # inside an enclosing inner loop whose blocks tile the range: not its visits
            if inner is None:
                raise ScheduleError("within= needs an enclosing inner loop of the same band")
            eper, emult, esize, eshort = inner
            if esize % size and esize < total:
                raise ScheduleError(f"within=: the enclosing block size {esize} is not a multiple "
                                    f"of {size}")
            per = eper * (self._mult // emult)
            # the enclosing loop runs a full and a short representative: each takes the visits of
            # its own part of the axis, [0, c0) and [c0, total)
            c0 = (total // esize) * esize
            part = band.within(c0, total) if eshort else band.within(0, c0)
            full, short = part.visits(B, run, size) if part.Z > 0 else (0, 0)
        else:  # the multiplicity of one outer block (and of the uniform loops between)
            per = self._mult // run.blocks
            full, short = band.visits(B, run, size)
        nfull = total // size
        first_full = min(want[0] // size, nfull - 1)
        for j2, count, stop in ((first_full, full, None), (nfull, short, total)):
            if not count:
                continue
            saved, occ = self._mult, self._occ
            self._mult = per * count
            self._steps += self._mult
            if self._steps >= self._tick_at:
                self._tick()
            frame.inner = (per, self._mult, size, stop is not None)
            try:
                yield Block(j2, j2 * size, stop if stop is not None else (j2 + 1) * size)
            finally:
                self._mult = saved
                frame.inner = inner
            if self._occ != occ:
                raise ScheduleError(
                    f"a masked inner loop body changed fast-memory occupancy from {occ} to "
                    f"{self._occ}; free what the body allocates"
                )

    # ------------------------------------------------------------------ results
    @property
    def occupancy(self) -> int:
        """Words resident in fast memory now."""
        return self._occ

    def stats(self) -> IOStats:
        return IOStats(
            reads=self._reads,
            writes=self._writes,
            peak=self._peak,
            M=self.M,
            steps=self._steps,
            per_array={k: ArrayIO(v[0], v[1]) for k, v in self._per_array.items()},
        )

    def contents(self, arr: SlowArray) -> np.ndarray | None:
        """A copy of a slow array's contents (None in count mode).

        For the harness that set up the run (:func:`attnio.run` reading the output after the
        schedule), never for schedules: a schedule reaches data only through :meth:`load`."""
        data = self._slow_data[arr._key]
        return None if data is None else data.copy()
