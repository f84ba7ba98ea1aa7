"""Element traces: the words a schedule's arithmetic touches, in program order, as a cache sees them.

The explicit model lets the algorithm decide what is in fast memory (``load``/``store``/``free``).
A hardware cache decides by itself; it only sees the *addresses the arithmetic touches*.  An element
trace turns a schedule into that address stream, so that it can be replayed through a cache
(:func:`attnio.replay`: LRU, FIFO, Belady's OPT) or any other simulator (Dinero ``din`` text).

>>> t = trace("flash2", 16, 4, 64)
>>> t.arrays["Q"].size, t.arrays["O"].live_out
(64, True)
>>> e = next(iter(t))
>>> e.kind in ("read", "write") and e.array in t.arrays and 0 <= e.index < t.arrays[e.array].size
True

How the schedule's steps become events (the *alias model*)
-----------------------------------------------------------
The schedule runs once on a :class:`~attnio.core.memory.TwoLevelMemory` in count mode, step by step
(no bulk counting), with a recorder attached.  Every fast tile is given *backing words* in an
address space of arrays:

* a tile **loaded** from ``X[region]`` is an alias of those ``X`` words (a load emits nothing: the
  cache sees the words when the arithmetic touches them);
* a tile's life is cut into **epochs** by its stores.  Reads in an epoch before the epoch's first
  write touch the epoch's *source* words (the loaded ``X`` words in the first epoch, the words of
  the previous store afterwards).  The epoch's writes, and every read after its first write, touch
  its *destination*: the words ``Y[region]`` of the store that ends the epoch (so ``O_i`` in
  FlashAttention-2 is accumulated directly in ``O``'s words, and ``P_ij = softmax(S_ij)`` in the
  standard algorithm reads ``S`` and writes ``P``), or, when the epoch ends with ``free`` (the values
  die), a **scratch** array;
* scratch arrays are named ``~label`` (``~label#k`` for the k-th tile with that label alive at the
  same time): one per (label, slot), sized for the largest tile that uses it, so a loop that
  re-allocates ``S_ij`` every step touches the same scratch words every step, like a stack buffer;
* ``alloc(shape, fill)`` writes every word of the tile (the fill); ``alloc(shape, None)``
  (uninitialised) emits nothing, and reads of it before its first write touch nothing;
* ``compute(fn, *tiles, writes=k)`` reads every word of every tile, in argument order, then writes
  every word of the first ``k`` tiles (``writes=None``: all tiles);
* ``store(tile, Y[region])`` emits nothing when the epoch wrote (its values are already in ``Y``'s
  words); otherwise it is a copy: it reads the tile's source words and writes ``Y``'s;
* ``free`` emits nothing.

Arrays are laid out one after the other, each starting at a multiple of 64 words (so a cache line
of up to 64 words never straddles two arrays); inputs ``Q, K, V`` first, then ``O``, then the slow
arrays the schedule creates (``S``, ``P``, ...), then the scratch arrays.  Every array except the
scratch ones is ``live_out``: its final contents are the program's result (a replay writes its
dirty words back at the end; scratch words are dead when the program ends).

Under this model the explicit schedule itself is one valid replacement strategy of capacity M
(keep exactly the backing words of the live tiles), whose reads and writes are at most the
explicit counts; so Belady's OPT with M words can only do better (checked in the tests).

Formats
-------
``Trace.save(path)`` writes a compressed ``.npz`` with ``addr`` (int64 word addresses), ``kind``
(uint8, 0 read / 1 write), ``names``, ``sizes``, ``bases``, ``live_out`` and ``meta`` (JSON);
:func:`load` reads it back.  ``Trace.write_din(path, word_bytes=8)`` writes Dinero's ``din`` text:
one access per line, ``label address`` with label 0 (read) or 1 (write) and the *byte* address
``word address * word_bytes`` in hex.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from .. import algorithms as _alg
from ..algorithms.base import default_scale
from ..core.checks import check_int, check_real
from ..core.errors import ParameterError
from ..core.memory import FastTile, SlowArray, Tracer, TwoLevelMemory
from ..core.progress import ProgressCallback
from ..core.resources import Cost, Limits
from ..core.workload import MAX_M, Shape
from ..runner import place_inputs

__all__ = ["ALIGN", "MAX_PRODUCTS", "ArrayInfo", "Chunk", "Event", "Trace", "check_trace_size",
           "estimate_trace", "load", "record_trace", "trace"]

ALIGN = 64  # every array starts at a multiple of ALIGN words
CHUNK = 1 << 20  # default events per chunk
KINDS = ("read", "write")


class Event(NamedTuple):
    """One access: ``array`` (name), ``index`` (flat, row-major, within the array), ``kind``."""

    array: str
    index: int  # type: ignore[assignment]  # (the field shadows tuple.index, as it always has)
    kind: str

    @property
    def is_write(self) -> bool:
        return self.kind == "write"


@dataclass(frozen=True)
class ArrayInfo:
    """An array of the trace's address space: ``size`` words from word address ``base``."""

    name: str
    size: int
    base: int
    live_out: bool
    role: str  # "input", "output", "slow" (created by the schedule) or "scratch"


@dataclass(frozen=True)
class Chunk:
    """A run of consecutive events as arrays: word addresses and kinds (0 read, 1 write)."""

    addr: np.ndarray
    kind: np.ndarray
    _bases: np.ndarray
    _names: tuple[str, ...]

    def __len__(self) -> int:
        return len(self.addr)

    @property
    def array_id(self) -> np.ndarray:
        """Index of each event's array in ``Trace.arrays`` order."""
        return np.searchsorted(self._bases, self.addr, side="right") - 1

    @property
    def index(self) -> np.ndarray:
        """Flat index of each event within its array."""
        return self.addr - self._bases[self.array_id]

    @property
    def is_write(self) -> np.ndarray:
        return self.kind.astype(bool)


# --------------------------------------------------------------------------- recording
class _Recorder(Tracer):
    """The tracer attached to a TwoLevelMemory: an op log of tile steps (not of elements)."""

    def __init__(self) -> None:
        self.slow_arrays: list[SlowArray] = []
        self.ops: list[tuple] = []
        self.tid: dict[int, int] = {}  # id(tile) -> tile id, while alive
        self._alive: dict[int, Any] = {}
        self.shape: list[tuple[int, ...]] = []
        self.label: list[str] = []

    def _new(self, tile: FastTile) -> int:
        t = len(self.shape)
        self.tid[id(tile)] = t
        self._alive[t] = tile  # keeps id(tile) from being reused while alive
        self.shape.append(tuple(tile.shape))
        self.label.append(tile.label)
        return t

    def slow(self, arr: SlowArray) -> None:
        self.slow_arrays.append(arr)

    def load(self, tile: FastTile, src: SlowArray, idx: tuple[slice, ...]) -> None:
        self.ops.append(("L", self._new(tile), src._key, _region(idx)))

    def alloc(self, tile: FastTile, filled: bool = True) -> None:
        self.ops.append(("A", self._new(tile), bool(filled)))

    def store(self, tile: FastTile, dst: SlowArray, idx: tuple[slice, ...]) -> None:
        self.ops.append(("S", self.tid[id(tile)], dst._key, _region(idx)))

    def compute(self, tiles: tuple[FastTile, ...], writes: int | None) -> None:
        k = len(tiles) if writes is None else writes
        self.ops.append(("C", tuple(self.tid[id(t)] for t in tiles), k))

    def free(self, tile: FastTile) -> None:
        t = self.tid.pop(id(tile))
        del self._alive[t]
        self.ops.append(("F", t))


def _region(idx) -> tuple[tuple[int, int], ...]:
    return tuple((s.start, s.stop) for s in idx)


def _flat(shape: tuple[int, ...], region) -> np.ndarray:
    """Flat row-major indices of ``region`` (tuple of (start, stop)) of an array of ``shape``."""
    if len(region) == 1:
        (a, b), = region
        return np.arange(a, b, dtype=np.int64)
    (r0, r1), (c0, c1) = region
    rows = np.arange(r0, r1, dtype=np.int64)[:, None] * shape[1]
    return (rows + np.arange(c0, c1, dtype=np.int64)[None, :]).ravel()


# --------------------------------------------------------------------------- the trace
class Trace:
    """An element trace: re-iterable, streamed in chunks, never held as a list of events.

    ``arrays`` maps names to :class:`ArrayInfo` (size in words, base address, live_out);
    ``len(trace)`` is the number of events; iterating gives :class:`Event` objects (slow: for
    inspection); :meth:`chunks` gives :class:`Chunk` arrays (what :func:`attnio.replay` reads).
    """

    def __init__(self, arrays: list[ArrayInfo], n_events: int, source, meta: dict | None = None):
        self.arrays: dict[str, ArrayInfo] = {a.name: a for a in arrays}
        self._order = tuple(arrays)
        self._bases = np.array([a.base for a in arrays], dtype=np.int64)
        self._names = tuple(a.name for a in arrays)
        self._source = source  # callable(chunk_size) -> iterator of (addr, kind)
        self.n_events = int(n_events)
        self.meta = dict(meta or {})

    # ---- construction from plain arrays
    @classmethod
    def from_arrays(cls, addr, kind, arrays: list[ArrayInfo] | None = None,
                    meta: dict | None = None) -> Trace:
        """A trace from word addresses and kinds (0/1, bool, or "read"/"write"/"r"/"w")."""
        addr = np.asarray(addr, dtype=np.int64).ravel()
        kind = _as_kind(kind, len(addr))
        if len(addr) and addr.min() < 0:
            raise ParameterError(f"trace addresses must be >= 0, got {int(addr.min())}", param="addr")
        if arrays is None:
            size = int(addr.max()) + 1 if len(addr) else 0
            arrays = [ArrayInfo("mem", size, 0, True, "input")]

        def source(chunk):
            for s in range(0, len(addr), chunk):
                yield addr[s:s + chunk], kind[s:s + chunk]

        return cls(arrays, len(addr), source, meta)

    # ---- reading
    def __len__(self) -> int:
        return self.n_events

    @property
    def words(self) -> int:
        """Address-space size: end of the last array."""
        last = self._order[-1] if self._order else None
        return 0 if last is None else last.base + last.size

    def chunks(self, size: int = CHUNK) -> Iterator[Chunk]:
        size = check_int("chunk size", size, minimum=1)
        for addr, kind in self._source(size):
            yield Chunk(addr, kind, self._bases, self._names)

    def raw_chunks(self, size: int = CHUNK) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """Chunks as plain ``(addr, kind)`` arrays."""
        yield from self._source(check_int("chunk size", size, minimum=1))

    def __iter__(self) -> Iterator[Event]:
        for c in self.chunks():
            ids, idx = c.array_id.tolist(), c.index.tolist()
            for a, i, k in zip(ids, idx, c.kind.tolist()):
                yield Event(self._names[a], i, KINDS[k])

    def to_arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """The whole trace as two arrays (addr int64, kind uint8): 9 bytes per event."""
        parts = list(self._source(CHUNK))
        if not parts:
            return np.zeros(0, np.int64), np.zeros(0, np.uint8)
        return (np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]))

    def counts(self) -> dict[str, tuple[int, int]]:
        """(reads, writes) events per array."""
        out = {n: [0, 0] for n in self._names}
        for c in self.chunks():
            ids = c.array_id
            for k in (0, 1):
                sel = ids[c.kind == k]
                for a, n in zip(*np.unique(sel, return_counts=True)):
                    out[self._names[a]][k] += int(n)
        return {k: (v[0], v[1]) for k, v in out.items()}

    # ---- writing
    def save(self, path) -> None:
        """Compressed npz: addr, kind, names, sizes, bases, live_out, meta (JSON)."""
        addr, kind = self.to_arrays()
        np.savez_compressed(
            path, addr=addr, kind=kind,
            names=np.array(self._names, dtype=str),
            sizes=np.array([a.size for a in self._order], dtype=np.int64),
            bases=self._bases,
            live_out=np.array([a.live_out for a in self._order], dtype=bool),
            roles=np.array([a.role for a in self._order], dtype=str),
            meta=np.array(json.dumps(self.meta)),
        )

    def write_din(self, path, word_bytes: int = 8) -> int:
        """Dinero ``din`` text: ``0 <hex byte address>`` (read) / ``1 ...`` (write) per line."""
        word_bytes = check_int("word_bytes", word_bytes, minimum=1)
        n = 0
        with open(path, "w") as f:
            for addr, kind in self._source(CHUNK):
                f.write("\n".join(f"{k} {a:x}" for k, a in zip(kind.tolist(),
                                                              (addr * word_bytes).tolist())))
                f.write("\n")
                n += len(addr)
        return n

    def __repr__(self) -> str:
        what = self.meta.get("algorithm", "trace")
        return f"<Trace {what}: {self.n_events:,} events over {len(self.arrays)} arrays>"


def _as_kind(kind, n: int) -> np.ndarray:
    k = np.asarray(kind)
    if k.dtype.kind in "US":
        low = np.char.lower(k.astype(str))
        bad = ~np.isin(low, ["r", "w", "read", "write", "0", "1"])
        if bad.any():
            raise ParameterError(f"trace kind must be 'read' or 'write', got {k[bad][0]!r}", param="kind")
        k = np.isin(low, ["w", "write", "1"])
    k = np.asarray(k).ravel()
    if k.dtype != bool and len(k) and not np.isin(k, [0, 1]).all():
        raise ParameterError("trace kinds must be 0 (read) or 1 (write)", param="kind")
    if len(k) != n:
        raise ParameterError(f"trace has {n} addresses but {len(k)} kinds", param="kind")
    return k.astype(np.uint8)


def load(path) -> Trace:
    """Read a trace written by :meth:`Trace.save`."""
    with np.load(path, allow_pickle=False) as z:
        arrays = [ArrayInfo(str(n), int(s), int(b), bool(lv), str(r)) for n, s, b, lv, r in
                  zip(z["names"], z["sizes"], z["bases"], z["live_out"], z["roles"])]
        return Trace.from_arrays(z["addr"], z["kind"], arrays, json.loads(str(z["meta"])))


# --------------------------------------------------------------------------- what it costs
#: Measured on this project's 2-core machine, rounded up (the exact schedules at N = 128..256):
#: bytes of op log and seconds per recorded tile step, events per tile step and fast word (at
#: most 5.4 measured), seconds per event of each replay policy (events generated included),
#: and bytes per event of an OPT replay (it holds every event at once).
RECORD_BYTES_PER_STEP = 5000
RECORD_SECONDS_PER_STEP = 2.5e-4
EVENTS_PER_STEP_AND_WORD = 6
REPLAY_SECONDS_PER_EVENT = {"lru": 1.2e-6, "fifo": 1.5e-6, "opt": 2.5e-6}
OPT_BYTES_PER_EVENT = 130


def estimate_trace(alg: Any, shape: Shape, M: int, tiling: Any) -> tuple[int, Cost]:
    """(events, cost) of recording the trace of ``alg`` on ``shape``, from closed forms: an
    upper estimate of the events (every tile step touches at most a few times the fast memory's
    words) and the memory and time of the op log."""
    steps = shape.n_heads * max(1, int(alg.steps(shape, tiling)))
    per_head = min(EVENTS_PER_STEP_AND_WORD * M * max(1, int(alg.steps(shape, tiling))),
                   8 * shape.Nq * shape.Nkv * (shape.d + 1) + 4 * (shape.Nq + shape.Nkv) * shape.d)
    events = shape.n_heads * per_head
    return events, Cost(RECORD_BYTES_PER_STEP * steps,
                        RECORD_SECONDS_PER_STEP * steps + 1e-8 * events,
                        "the trace's log of tile steps")


# --------------------------------------------------------------------------- from a schedule
def check_trace_size(shape: Shape, max_products: float) -> int:
    """The events of a trace of ``shape`` (one per product: Nq·Nkv·d·heads), refused with a
    ParameterError above ``max_products`` (a trace is held whole: its size is the limit)."""
    products = shape.n_heads * shape.Nq * shape.Nkv * shape.d
    if products > max_products:
        raise ParameterError.worded(
            f"{{N}} {shape.Nq} {{d}} {shape.d}: the trace would hold more than {products:,} "
            f"events (Nq·Nkv·d·heads > {{max_products}} {max_products:g}); use {{count_mode}} "
            "for counts, or raise {max_products}", param="N",
            count_mode="attnio.run(..., mode='count')")
    return products


def trace(name: str, N: int | None = None, d: int | None = None, M: int | None = None, *,
          shape: Any = None, tiling: Any = None, limits: Limits | None = None,
          progress: ProgressCallback | None = None) -> Trace:
    """The element trace of algorithm ``name`` on ``N x d`` inputs with ``M`` fast words.

    The schedule runs once in count mode to record its tile steps; events are generated from
    that log each time the trace is read (:meth:`Trace.chunks` takes the chunk size).  The
    recording's memory and time are estimated first (:func:`estimate_trace`) and refused beyond
    ``limits``.

    Parameters
    ----------
    name : str
        A registered algorithm (:func:`attnio.algorithms.names`).
    N, d : int, optional
        Sequence length and head dimension (or give ``shape``).
    M : int
        Fast-memory capacity in words.
    shape : Shape or tuple, optional
        A :class:`~attnio.core.workload.Shape`, ``(Nq, Nkv, d)`` or ``(N, d)``; replaces N and
        d for non-square, multi-head or masked problems (``Shape.make(N, d, causal=True,
        window=W)``: a causal mask, a sliding window of W keys per query).
    tiling : Tiling, mapping or None
        As in :func:`attnio.run` (None: the default tiling for M).
    limits : Limits, optional
        A :class:`~attnio.core.resources.Limits` (default ``Limits()``): a recording estimated
        to take longer than ``budget_s`` seconds is refused unless ``force``, and so is one
        needing more bytes than ``max_memory`` (default: what the machine has available).
    progress : callable, optional
        ``progress(steps, total)`` reports the recording's tile steps.

    Returns
    -------
    Trace
        The recorded trace: iterate its events (or ``chunks()``), or :func:`attnio.replay` it.
    """
    alg = _alg.get(name)
    shp = workload_of("trace", N, d, shape)
    if M is None:
        raise ParameterError("trace: M (fast-memory words) is required", param="M")
    M = check_int("M", M, minimum=1, maximum=MAX_M)
    limits = _limits(limits)
    t = alg.coerce_tiling(shp, M, tiling)
    _, cost = estimate_trace(alg, shp, M, t)
    limits.check(cost, subject=f"the trace of {alg.name} on {shp.describe()}",
                 instead="count without a trace (attnio.run mode='count') or use a smaller N")
    rec = _Recorder()
    steps = shp.n_heads * max(1, int(alg.steps(shp, t)))
    mem = TwoLevelMemory(M, mode="count", tracer=rec, progress=progress, progress_total=steps)
    h = place_inputs(mem, shp, None)
    alg.execute(mem, h, t, shape=shp, scale=default_scale(shp.d, None))
    st = mem.stats()
    meta = {"algorithm": alg.name, "Nq": shp.Nq, "Nkv": shp.Nkv, "d": shp.d, "M": M,
            "causal": shp.mask, "window": shp.window, "batch": shp.batch, "heads": shp.heads,
            "kv_heads": shp.kv_heads,
            "tiling": _tiling_dict(t),
            "explicit": {"reads": st.reads, "writes": st.writes, "peak": st.peak}}
    return _build(rec, meta)


#: The default of :func:`record_trace`'s ``max_products`` (``attnio trace --max-products``).
MAX_PRODUCTS = 2e8


def record_trace(name: str, M: int, *, shape: Any, tiling: Any = None,
                 limits: Limits | None = None, max_products: float = MAX_PRODUCTS,
                 progress: ProgressCallback | None = None) -> Trace:
    """:func:`trace` of ``shape`` once :func:`check_trace_size` allows it (``attnio trace``): a
    trace is held whole, so one of more than ``max_products`` score products (Nq·Nkv·d·heads)
    is refused before anything is recorded; the other arguments are :func:`trace`'s.

    >>> from attnio.core import Shape
    >>> record_trace("flash2", 256, shape=Shape.make(16, 4)).meta["explicit"]["reads"] > 0
    True
    """
    shp = Shape.coerce(shape)
    check_real("max_products", max_products, lo=1)
    check_trace_size(shp, max_products)
    return trace(name, M=M, shape=shp, tiling=tiling, limits=limits, progress=progress)


def workload_of(who: str, N: Any, d: Any, shape: Any) -> Shape:
    """The workload of :func:`trace` or :func:`attnio.cachesim.validation.verify`: ``shape``,
    or ``N x d`` when it is None."""
    if shape is None:
        if N is None or d is None:
            raise ParameterError(f"{who}: give N and d (or shape=(Nq, Nkv, d))", param="N")
        shape = (check_int("N", N, minimum=1), check_int("d", d, minimum=1))
    return Shape.coerce(shape)


def _limits(limits: object) -> Limits:
    """``limits``, or ``Limits()`` for None; anything else is refused."""
    if limits is None:
        return Limits()
    if not isinstance(limits, Limits):
        raise ParameterError(f"limits must be an attnio.core.resources.Limits, got "
                             f"{type(limits).__name__}", param="limits")
    return limits


def _tiling_dict(t) -> dict:
    return dataclasses.asdict(t) if dataclasses.is_dataclass(t) and not isinstance(t, type) else {}


def _build(rec: _Recorder, meta: dict) -> Trace:
    """Resolve each tile epoch's destination, lay out the arrays, count the events."""
    size = [int(np.prod(s, dtype=np.int64)) if s else 1 for s in rec.shape]
    epochs, scratch_size, n_events = _epochs(rec, size)
    infos, by_key, scratch_base = _layout(rec, scratch_size)
    source = _event_source(rec, size, epochs, by_key, scratch_base)
    return Trace(infos, n_events, source, meta)


_Backing = Any  # ("arr", slow key, region) or ("scratch", (label, slot)) or None


def _epochs(rec: _Recorder, size: list[int]
            ) -> tuple[list[list[_Backing]], dict[tuple[str, int], int], int]:
    """Per tile, the destination of each epoch (between stores); the size of each scratch slot
    (label, slot number); the number of events the trace will hold."""
    ntiles = len(rec.shape)
    epochs: list[list[_Backing]] = [[] for _ in range(ntiles)]  # per tile: dest of each epoch
    written = [False] * ntiles
    uninit = [False] * ntiles  # allocated without a fill and not yet written: reads touch nothing
    slot_of = [0] * ntiles
    busy: dict[str, set[int]] = {}
    scratch_size: dict[tuple[str, int], int] = {}
    alive: set[int] = set()
    n_events = 0

    def new_tile(t: int) -> None:
        used = busy.setdefault(rec.label[t], set())
        s = 0
        while s in used:
            s += 1
        used.add(s)
        slot_of[t] = s
        alive.add(t)

    def end_epoch_dead(t: int) -> None:
        if written[t]:
            key = (rec.label[t], slot_of[t])
            scratch_size[key] = max(scratch_size.get(key, 0), size[t])
            epochs[t].append(("scratch", key))
        else:
            epochs[t].append(None)

    for op in rec.ops:
        c = op[0]
        if c == "C":
            for t in op[1]:
                if not uninit[t]:
                    n_events += size[t]
            for t in op[1][:op[2]]:
                n_events += size[t]
                written[t] = True
                uninit[t] = False
        elif c == "L":
            new_tile(op[1])
        elif c == "A":
            new_tile(op[1])
            uninit[op[1]] = not op[2]
            if op[2]:
                written[op[1]] = True
                n_events += size[op[1]]
        elif c == "S":
            t = op[1]
            epochs[t].append(("arr", op[2], op[3]))
            if not written[t]:
                n_events += size[t] if uninit[t] else 2 * size[t]
            written[t] = False
            uninit[t] = False
        else:  # "F"
            t = op[1]
            end_epoch_dead(t)
            alive.discard(t)
            busy[rec.label[t]].discard(slot_of[t])
    for t in sorted(alive):  # tiles never freed: their last epoch dies with the program
        end_epoch_dead(t)
    return epochs, scratch_size, n_events


def _layout(rec: _Recorder, scratch_size: dict[tuple[str, int], int]
            ) -> tuple[list[ArrayInfo], dict[int, tuple[int, tuple[int, ...]]],
                       dict[tuple[str, int], int]]:
    """The address layout: the slow arrays, then the scratch slots, each aligned to ALIGN."""
    infos: list[ArrayInfo] = []
    by_key: dict[int, tuple[int, tuple[int, ...]]] = {}  # slow key -> (base, shape)
    base = 0
    for arr in rec.slow_arrays:
        role = {"Q": "input", "K": "input", "V": "input", "O": "output"}.get(arr.name, "slow")
        infos.append(ArrayInfo(arr.name, arr.size, base, True, role))
        by_key[arr._key] = (base, arr.shape)
        base += -(-max(arr.size, 1) // ALIGN) * ALIGN
    scratch_base: dict[tuple[str, int], int] = {}
    for key in sorted(scratch_size, key=lambda k: (k[0], k[1])):
        label, s = key
        nm = f"~{label}" if s == 0 else f"~{label}#{s}"
        infos.append(ArrayInfo(nm, scratch_size[key], base, False, "scratch"))
        scratch_base[key] = base
        base += -(-scratch_size[key] // ALIGN) * ALIGN
    return infos, by_key, scratch_base


def _event_source(rec: _Recorder, size: list[int], epochs: list[list[_Backing]],
                  by_key: dict[int, tuple[int, tuple[int, ...]]],
                  scratch_base: dict[tuple[str, int], int]
                  ) -> Callable[[int], Iterator[tuple[np.ndarray, np.ndarray]]]:
    """A function that generates the events from the op log, ``chunk_size`` at a time."""
    ntiles = len(rec.shape)
    ops = rec.ops

    def backing_addr(b: _Backing, t: int) -> np.ndarray:
        if b[0] == "arr":
            b0, shp = by_key[b[1]]
            return _flat(shp, b[2]) + b0
        return np.arange(size[t], dtype=np.int64) + scratch_base[b[1]]

    def source(chunk_size: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        epoch = [0] * ntiles
        wrote = [False] * ntiles
        src: list[Any] = [None] * ntiles  # address array of the epoch's source words
        dst: list[Any] = [None] * ntiles  # address array of the epoch's destination (lazy)
        buf_a: list[np.ndarray] = []
        buf_k: list[np.ndarray] = []
        pending = 0

        def dest(t: int) -> np.ndarray:
            if dst[t] is None:
                dst[t] = backing_addr(epochs[t][epoch[t]], t)
            return dst[t]

        def emit(addr: np.ndarray, kind: int) -> None:  # accesses to addr (0 read, 1 write)
            nonlocal pending
            buf_a.append(addr)
            buf_k.append(np.full(len(addr), kind, np.uint8))
            pending += len(addr)

        def write(t: int) -> None:  # tile t writes every word of its destination
            emit(dest(t), 1)
            wrote[t] = True

        for op in ops:
            c = op[0]
            if c == "C":
                tiles, k = op[1], op[2]
                for t in tiles:
                    a = dest(t) if wrote[t] else src[t]
                    if a is not None:  # (uninitialised scratch: nothing to read yet)
                        emit(a, 0)
                for t in tiles[:k]:
                    write(t)
            elif c == "L":
                t = op[1]
                b0, shp = by_key[op[2]]
                src[t] = _flat(shp, op[3]) + b0
            elif c == "A":
                if op[2]:  # the fill writes every word
                    write(op[1])
            elif c == "S":
                t = op[1]
                b0, shp = by_key[op[2]]
                y = _flat(shp, op[3]) + b0
                if not wrote[t]:  # a copy: read the source words, write Y's
                    if src[t] is not None:
                        emit(src[t], 0)
                    emit(y, 1)
                epoch[t] += 1
                wrote[t] = False
                src[t], dst[t] = y, None
            else:  # "F"
                t = op[1]
                src[t] = dst[t] = None
            if pending >= chunk_size:
                a = np.concatenate(buf_a)
                kk = np.concatenate(buf_k)
                for s in range(0, len(a) - chunk_size + 1, chunk_size):
                    yield a[s:s + chunk_size], kk[s:s + chunk_size]
                rest = len(a) % chunk_size
                buf_a = [a[len(a) - rest:]] if rest else []
                buf_k = [kk[len(kk) - rest:]] if rest else []
                pending = rest
        if pending:
            yield np.concatenate(buf_a), np.concatenate(buf_k)

    return source
