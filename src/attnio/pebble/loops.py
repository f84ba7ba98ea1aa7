"""An exhaustive search of attention's loop-order schedules on tiny instances (issue 25, point 1).

The registered schedules (:mod:`attnio.algorithms`) are a few points of a larger space.  This
module enumerates that space on tiny instances (Nq, Nkv <= 8, d <= 3, small M), runs every
schedule on the referee (:class:`~attnio.core.memory.TwoLevelMemory`) and ranks them by words
moved, so a reader can compare the best loop order with the exact pebbling optimum
(:func:`attnio.pebble.solve`), the planner's pick and the best explicit bound
(``benchmarks/loop_search.py``, docs/pebbling.md "Searching loop orders").

The space.  A schedule (:class:`LoopSchedule`) is

* a partition of the query rows into blocks (``q_blocks``, sizes in order, uneven allowed) and of
  the key/value rows (``kv_blocks``);
* the loop nest over the visits (i, j) of query block i by key/value block j: ``outer="q"`` (query
  block i outer: Q-stationary, as FlashAttention-2) or ``outer="kv"`` (key/value block j outer:
  K/V-stationary, as FlashAttention-1 and ``kv_stationary``), the inner loop forward or
  ``snake`` (reversed on every other outer iteration, so the block last used stays for the next);
* ``d_chunk``: the columns of d one step touches.  ``d_chunk = d`` is a *row* schedule: a visit
  holds Q_i, K_j, V_j, the output O_i and its row statistics (m_i, l_i) and folds the keys of
  block j one at a time into the online softmax (a score column of b_i words; each row's rescale
  factor is used at once).
  ``d_chunk < d`` (or ``split=True``, one chunk of d columns) is a *split* schedule (the score
  tile is stationary, as in square tiling; K and V are never held together): a visit
  accumulates the score tile S_ij (b_i·b_j words, plus b_i for the rescale factors) over the column
  chunks of Q_i and K_j, folds it into (m_i, l_i), then updates O_i one column chunk at a time
  from the chunks of V_j (the O-tile is the stationary operand of that loop); ``chunk_snake``
  reverses the chunk order on every other visit; ``eager`` rescales every output chunk at the
  softmax step (all of O_i resident then, no rescale factors kept: with one key per block and a
  d chunk of 1 this is ``q_stationary_min``'s footprint, Br·(2d + 3) + 1) instead of at each
  chunk's update (b_i more words for the factors, O_i's chunks need not be resident together).

Fast memory is managed, for every schedule alike, by Belady's rule over the schedule's known future:
a step's operands are loaded if absent (a partial output O_i or statistics (m_i, l_i) is created
in fast memory at its first use, with no read); when they do not fit, the resident unit used
furthest in the future is dropped (a clean input for free; a partial output or statistics that
is used again is spilled: written, and read back at its next use).  A unit used for the last time
is dropped at once (the output written, normalised by l_i, at the last visit of its row block).
The registered schedules FlashAttention-2 (``outer="q"``, no snake, d_chunk = d),
``kv_stationary`` (``outer="kv"``) and ``q_stationary_min`` (``outer="q"``, one key per block,
d_chunk = 1, ``eager``) are points of this space with "free everything after each visit"; Belady
keeps what fits, so the search's count is at most theirs at the same tiles (tested).

What is exhaustive.  Every loop nest, snake flag, d_chunk and chunk order; every composition of
an axis of at most :data:`ALL_COMPOSITIONS_UPTO` rows into blocks, and for longer axes the
even partitions (blocks of b rows, the short block last or first).  Every schedule is run on the
referee: its operands reach data only through the memory it is handed (``load`` / ``store``;
arithmetic inside ``compute`` on fast tiles), its count is the referee's, and in compute mode its
output is compared with the float64 reference (:func:`run_schedule`).  Unmasked attention, one
head (the pebbling DAGs have no mask).

>>> best = search(2, 2, 2, 12)[0]
>>> best.io >= 4 * 2 * 2   # every schedule reads Q, K, V once and writes O: the trivial bound
True
>>> run_schedule(best.schedule, 2, 2, 2, 12, seed=0).max_error < 1e-12
True
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

from ..core.checks import check_int
from ..core.errors import ParameterError
from ..core.memory import FastTile, SlowArray, TwoLevelMemory
from ..core.reference import attention as reference_attention

__all__ = ["ALL_COMPOSITIONS_UPTO", "LIMITS", "RUN_LIMITS", "LoopSchedule", "Scored", "SearchRun",
           "compositions", "enumerate_schedules", "run_schedule", "search"]

#: Axes of at most this many rows are split in every composition (2^(n-1) of them); longer ones
#: in even blocks only.
ALL_COMPOSITIONS_UPTO = 6
#: The instance sizes the search accepts (it is exhaustive: the count of schedules grows as
#: 4^N·d).
LIMITS = {"N": 8, "d": 3, "M": 4096}
#: The sizes one schedule may be run at (:func:`run_schedule`, step by step: seconds at the top).
RUN_LIMITS = {"N": 256, "d": 16, "M": 1 << 20}


@dataclass(frozen=True)
class LoopSchedule:
    """One point of the schedule space (module docstring)."""

    outer: str  #: "q" (query blocks outer: Q-stationary) or "kv" (key/value blocks outer)
    snake: bool  #: inner loop reversed on every other outer iteration
    q_blocks: tuple[int, ...]  #: query block sizes, in order (sum Nq)
    kv_blocks: tuple[int, ...]  #: key/value block sizes, in order (sum Nkv)
    d_chunk: int  #: columns per step: d is a row schedule, less a split (score-tile) schedule
    chunk_snake: bool = False  #: split schedules: chunk order reversed on every other visit
    eager: bool = False  #: split schedules: rescale every output chunk at the softmax step
    split: bool = False  #: a split schedule even with d_chunk = d (K and V never held together)

    def is_split(self, d: int) -> bool:
        return self.split or self.d_chunk < d

    def describe(self) -> str:
        """A line naming the loop order and the tiles."""
        order = ("query blocks outer (Q-stationary)" if self.outer == "q" else
                 "key/value blocks outer (K/V-stationary)")
        inner = "snake" if self.snake else "forward"
        tiles = f"q blocks {list(self.q_blocks)}, kv blocks {list(self.kv_blocks)}"
        return f"{order}, inner {inner}; {tiles}; d chunk {self.d_chunk}" + (
            " (split: score tile stationary)" if self.split else "") + (
            " (chunks snaked)" if self.chunk_snake else "") + (
            " (output rescaled at the softmax step)" if self.eager else "")

    def short(self) -> str:
        """A compact label: ``q-outer/snake Br=[2,2] Bc=[4] dc=2``."""
        s = f"{self.outer}-outer/{'snake' if self.snake else 'fwd'}"
        s += f" Br={list(self.q_blocks)} Bc={list(self.kv_blocks)} dc={self.d_chunk}"
        s += "/split" if self.split else ""
        return s + ("/chunk-snake" if self.chunk_snake else "") + ("/eager" if self.eager else "")


@dataclass(frozen=True)
class Scored:
    """A schedule and what the referee counted (``io`` = reads + writes)."""

    schedule: LoopSchedule
    reads: int
    writes: int
    peak: int

    @property
    def io(self) -> int:
        return self.reads + self.writes


@dataclass(frozen=True)
class SearchRun:
    """:func:`run_schedule`'s result: the referee's counts and, in compute mode, the output's
    largest deviation from the float64 reference."""

    reads: int
    writes: int
    peak: int
    max_error: float | None

    @property
    def io(self) -> int:
        return self.reads + self.writes


def compositions(n: int, *, every_upto: int = ALL_COMPOSITIONS_UPTO) -> list[tuple[int, ...]]:
    """The block partitions of ``n`` rows the search tries, in a fixed order: every composition
    when ``n <= every_upto``, else the even ones (blocks of b rows, the short block last, or
    first)."""
    if n <= every_upto:
        out = []
        for cuts in itertools.product((False, True), repeat=n - 1):
            sizes, run = [], 1
            for c in cuts:
                if c:
                    sizes.append(run)
                    run = 1
                else:
                    run += 1
            sizes.append(run)
            out.append(tuple(sizes))
        return sorted(set(out), key=lambda s: (len(s), s))
    seen: dict[tuple[int, ...], None] = {}
    for b in range(1, n + 1):
        full, rest = divmod(n, b)
        last = (b,) * full + ((rest,) if rest else ())
        seen.setdefault(last, None)
        seen.setdefault(tuple(reversed(last)), None)
    return list(seen)


def _check(Nq: int, Nkv: int, d: int, M: int, lim: dict[str, int] = LIMITS) -> None:
    check_int("Nq", Nq, minimum=1, maximum=lim["N"])
    check_int("Nkv", Nkv, minimum=1, maximum=lim["N"])
    check_int("d", d, minimum=1, maximum=lim["d"])
    check_int("M", M, minimum=1, maximum=lim["M"])


def enumerate_schedules(Nq: int, Nkv: int, d: int, *,
                        every_upto: int = ALL_COMPOSITIONS_UPTO) -> Iterator[LoopSchedule]:
    """Every schedule of the space for these sizes, in a fixed (deterministic) order."""
    qs, ks = compositions(Nq, every_upto=every_upto), compositions(Nkv, every_upto=every_upto)
    for dc in range(d, 0, -1):
        for outer in ("q", "kv"):
            for snake in (False, True):
                variants = [(False, False, True), (True, False, True), (False, True, True),
                            (True, True, True)]
                if dc == d:  # the row schedule, and the split one with a single chunk
                    variants = [(False, False, False), (False, False, True), (False, True, True)]
                for cs, eager, split in variants:
                    for qb in qs:
                        for kb in ks:
                            yield LoopSchedule(outer, snake, qb, kb, dc, cs, eager,
                                               split and dc == d)


# ---------------------------------------------------------------------------------------- engine
# A unit of fast memory: (kind, block, chunk).  Q/K/V are clean inputs; O (a partial output
# chunk) and L (m and l of a query block) are dirty state; S is a visit's score tile (+ rescale).
_Unit = tuple[str, int, int]


@dataclass(frozen=True)
class _Step:
    op: str  # "row" | "scores" | "softmax" | "pv"
    i: int
    j: int
    c: int
    req: tuple[_Unit, ...]
    work: int  # scratch words the step allocates and frees itself
    final: bool = False  # the last update of O_i (chunk c): normalise and write it


def _chunks(d: int, dc: int) -> list[tuple[int, int]]:
    return [(c0, min(d, c0 + dc)) for c0 in range(0, d, dc)]


def _steps(s: LoopSchedule, d: int) -> list[_Step]:
    Tr, Tc = len(s.q_blocks), len(s.kv_blocks)
    visits: list[tuple[int, int]] = []
    if s.outer == "q":
        for i in range(Tr):
            js = range(Tc - 1, -1, -1) if s.snake and i % 2 else range(Tc)
            visits += [(i, j) for j in js]
    else:
        for j in range(Tc):
            is_ = range(Tr - 1, -1, -1) if s.snake and j % 2 else range(Tr)
            visits += [(i, j) for i in is_]
    last = {i: v for v, (i, _) in enumerate(visits)}
    out: list[_Step] = []
    if not s.is_split(d):
        for v, (i, j) in enumerate(visits):
            bi = s.q_blocks[i]
            out.append(_Step("row", i, j, 0, (("Q", i, 0), ("K", j, 0), ("V", j, 0), ("O", i, 0),
                                              ("L", i, 0)), bi, last[i] == v))
        return out
    nch = len(_chunks(d, s.d_chunk))
    for v, (i, j) in enumerate(visits):
        order = list(range(nch))
        if s.chunk_snake and v % 2:
            order.reverse()
        S = ("S", i, j)
        fin = last[i] == v
        out += [_Step("scores", i, j, c, (S, ("Q", i, c), ("K", j, c)), 0) for c in order]
        outs = tuple(("O", i, c) for c in range(nch)) if s.eager else ()
        out.append(_Step("softmax", i, j, 0, (S, ("L", i, 0)) + outs, 0))
        out += [_Step("pv", i, j, c, (S, ("V", j, c), ("O", i, c)) + ((("L", i, 0),) if fin else ()),
                      0, fin) for c in order]
    return out


class _Arrays:
    def __init__(self, Q: SlowArray, K: SlowArray, V: SlowArray, O: SlowArray, L: SlowArray):
        self.Q, self.K, self.V, self.O, self.L = Q, K, V, O, L


def _execute(s: LoopSchedule, Nq: int, Nkv: int, d: int, mem: TwoLevelMemory, arr: _Arrays,
             scale: float) -> bool:
    """Run ``s`` on ``mem`` (Belady management, module docstring).  False (nothing more run) when
    a step's operands and scratch cannot fit in M even alone."""
    q0 = [0, *itertools.accumulate(s.q_blocks)]
    k0 = [0, *itertools.accumulate(s.kv_blocks)]
    ch = _chunks(d, s.d_chunk) if s.is_split(d) else [(0, d)]
    steps = _steps(s, d)

    def size(u: _Unit) -> int:
        kind, b, c = u
        if kind == "S":
            bi = s.q_blocks[b]
            return bi * s.kv_blocks[c] + (0 if s.eager else bi)
        width = ch[c][1] - ch[c][0]
        if kind in ("Q", "O"):
            return s.q_blocks[b] * width
        if kind == "L":
            return 2 * s.q_blocks[b]
        return s.kv_blocks[b] * width

    # every step's operands (and its scratch) must fit alone
    for st in steps:
        if sum(size(u) for u in set(st.req)) + st.work > mem.M:
            return False
    uses: dict[_Unit, list[int]] = {}
    for t, st in enumerate(steps):
        for u in st.req:
            uses.setdefault(u, []).append(t)
    ptr = dict.fromkeys(uses, 0)
    res: dict[_Unit, FastTile] = {}
    spilled: set[_Unit] = set()

    def next_use(u: _Unit) -> int:
        k = ptr[u]
        lst = uses[u]
        return lst[k] if k < len(lst) else len(steps)

    def rows(u: _Unit) -> slice:
        lo = q0 if u[0] in ("Q", "O", "L") else k0
        if u[0] == "S":
            lo = q0
        return slice(lo[u[1]], lo[u[1] + 1])

    def cols(u: _Unit) -> slice:
        return slice(*ch[u[2]])

    def spill(u: _Unit) -> None:
        t = res.pop(u)
        if u[0] == "O":
            mem.store(t, arr.O, rows(u), cols(u))
        else:
            mem.store(t, arr.L, rows(u), slice(0, 2))
        spilled.add(u)
        mem.free(t)

    def bring(u: _Unit) -> None:
        kind = u[0]
        if kind in ("Q", "K", "V"):
            src = {"Q": arr.Q, "K": arr.K, "V": arr.V}[kind]
            res[u] = mem.load(src, rows(u), cols(u), label=f"{kind}{u[1]}.{u[2]}")
        elif kind == "S":
            bi, bj = s.q_blocks[u[1]], s.kv_blocks[u[2]]
            res[u] = mem.alloc((bi, bj + (0 if s.eager else 1)), 0.0, label=f"S{u[1]},{u[2]}")
        elif u in spilled:
            res[u] = (mem.load(arr.O, rows(u), cols(u), label=f"O{u[1]}.{u[2]}") if kind == "O"
                      else mem.load(arr.L, rows(u), slice(0, 2), label=f"L{u[1]}"))
        elif kind == "O":
            res[u] = mem.alloc((s.q_blocks[u[1]], ch[u[2]][1] - ch[u[2]][0]), 0.0,
                               label=f"O{u[1]}.{u[2]}")
        else:  # m = -inf, l = 0
            t = mem.alloc((s.q_blocks[u[1]], 2), 0.0, label=f"L{u[1]}")
            mem.compute(_init_stats, t, writes=1)
            res[u] = t

    for st in steps:
        need = set(st.req)
        missing = [u for u in st.req if u not in res]
        want = sum(size(u) for u in dict.fromkeys(missing)) + st.work
        while mem.occupancy + want > mem.M:
            # Belady: the resident unit used furthest ahead; clean before dirty at a tie
            victim = max((u for u in res if u not in need),
                         key=lambda u: (next_use(u), u[0] in ("Q", "K", "V", "S"), size(u), u))
            if victim[0] in ("O", "L"):
                spill(victim)
            else:
                mem.free(res.pop(victim))
        for u in dict.fromkeys(missing):
            bring(u)
        _apply(st, s, res, mem, q0, ch, scale, arr)
        for u in need:
            ptr[u] += 1
        for u in need:
            if next_use(u) == len(steps) and u in res:  # its last use: drop it
                mem.free(res.pop(u))
    return True


def _init_stats(L: np.ndarray) -> None:
    L[:, 0] = -np.inf
    L[:, 1] = 0.0


def _apply(st: _Step, s: LoopSchedule, res: dict[_Unit, FastTile], mem: TwoLevelMemory,
           q0: list[int], ch: list[tuple[int, int]], scale: float, arr: _Arrays) -> None:
    """Step ``st`` on its resident operands ``res``: rows of query block i start at ``q0[i]``,
    the head dimension is cut into the column ranges ``ch`` (together [0, d))."""
    i, j, c = st.i, st.j, st.c
    if st.op == "row":
        work = mem.alloc((s.q_blocks[i], 1), label="score column")
        O, L = res[("O", i, 0)], res[("L", i, 0)]
        mem.compute(_row_update(scale), O, L, work, res[("Q", i, 0)], res[("K", j, 0)],
                    res[("V", j, 0)], writes=3)
        mem.free(work)
        if st.final:
            mem.compute(_normalise, O, L, writes=1)
            mem.store(O, arr.O, slice(q0[i], q0[i + 1]), slice(0, ch[-1][1]))
        return
    S = res[("S", i, j)]
    if st.op == "scores":
        mem.compute(_score_chunk(scale, s.eager), S, res[("Q", i, c)], res[("K", j, c)], writes=1)
    elif st.op == "softmax":
        if s.eager:
            outs = [res[("O", i, k)] for k in range(len(ch))]
            mem.compute(_fold_eager, S, res[("L", i, 0)], *outs, writes=2 + len(outs))
        else:
            mem.compute(_fold, S, res[("L", i, 0)], writes=2)
    else:
        O = res[("O", i, c)]
        mem.compute(_pv_eager if s.eager else _pv, O, S, res[("V", j, c)], writes=1)
        if st.final:
            mem.compute(_normalise, O, res[("L", i, 0)], writes=1)
            mem.store(O, arr.O, slice(q0[i], q0[i + 1]), slice(*ch[c]))


def _row_update(scale: float) -> Callable[..., None]:
    def fn(O: np.ndarray, L: np.ndarray, w: np.ndarray, Q: np.ndarray, K: np.ndarray,
           V: np.ndarray) -> None:
        # one key at a time through a score column; the rescale factor of a row is a scalar used
        # at once (row by row it needs no word: numpy's vector of them is a temporary)
        for k in range(K.shape[0]):
            w[:, 0] = (Q @ K[k]) * scale
            new = np.maximum(L[:, 0], w[:, 0])
            alpha = np.exp(L[:, 0] - new)
            w[:, 0] = np.exp(w[:, 0] - new)
            L[:, 1] = L[:, 1] * alpha + w[:, 0]
            O *= alpha[:, None]
            O += np.outer(w[:, 0], V[k])
            L[:, 0] = new
    return fn


def _score_chunk(scale: float, eager: bool) -> Callable[..., None]:
    def fn(S: np.ndarray, Q: np.ndarray, K: np.ndarray) -> None:
        if eager:
            S += (Q @ K.T) * scale
        else:
            S[:, :-1] += (Q @ K.T) * scale
    return fn


def _fold(S: np.ndarray, L: np.ndarray) -> None:
    """S (scores | spare column) -> (P = exp(S - m_new) | alpha = exp(m_old - m_new)); (m, l)."""
    new = np.maximum(L[:, 0], S[:, :-1].max(axis=1))
    S[:, -1] = np.exp(L[:, 0] - new)
    S[:, :-1] = np.exp(S[:, :-1] - new[:, None])
    L[:, 1] = L[:, 1] * S[:, -1] + S[:, :-1].sum(axis=1)
    L[:, 0] = new


def _fold_eager(S: np.ndarray, L: np.ndarray, *Os: np.ndarray) -> None:
    """S (scores) -> P = exp(S - m_new); (m, l); every output chunk rescaled now (the factors are
    used at once, row by row: no word kept for them)."""
    new = np.maximum(L[:, 0], S.max(axis=1))
    alpha = np.exp(L[:, 0] - new)
    S[:] = np.exp(S - new[:, None])
    L[:, 1] = L[:, 1] * alpha + S.sum(axis=1)
    L[:, 0] = new
    for O in Os:
        O *= alpha[:, None]


def _pv_eager(O: np.ndarray, S: np.ndarray, V: np.ndarray) -> None:
    O += S @ V


def _pv(O: np.ndarray, S: np.ndarray, V: np.ndarray) -> None:
    O *= S[:, -1:]
    O += S[:, :-1] @ V


def _normalise(O: np.ndarray, L: np.ndarray) -> None:
    O /= L[:, 1:2]


def _setup(mem: TwoLevelMemory, Nq: int, Nkv: int, d: int,
           data: tuple[np.ndarray, np.ndarray, np.ndarray] | None) -> _Arrays:
    Qd, Kd, Vd = data if data is not None else (None, None, None)
    return _Arrays(mem.slow("Q", (Nq, d), Qd), mem.slow("K", (Nkv, d), Kd),
                   mem.slow("V", (Nkv, d), Vd), mem.slow("O", (Nq, d)),
                   mem.scratch("ML", (Nq, 2)))


def _validate(s: LoopSchedule, Nq: int, Nkv: int, d: int) -> None:
    if s.outer not in ("q", "kv"):
        raise ParameterError(f"outer must be 'q' or 'kv', got {s.outer!r}", param="outer")
    for name, blocks, n in (("q_blocks", s.q_blocks, Nq), ("kv_blocks", s.kv_blocks, Nkv)):
        if sum(blocks) != n or min(blocks) < 1:
            raise ParameterError(f"{name} must be positive sizes summing to {n}, got "
                                 f"{list(blocks)}", param=name)
    check_int("d_chunk", s.d_chunk, minimum=1, maximum=d)


def run_schedule(s: LoopSchedule, Nq: int, Nkv: int, d: int, M: int, *,
                 seed: int | None = None) -> SearchRun | None:
    """Run one schedule on the referee: count mode when ``seed`` is None, else compute mode on
    standard-normal inputs drawn from ``seed``, the output compared with
    :func:`attnio.core.reference.attention` (``max_error``).  None when the schedule does not fit
    in M.  Sizes up to :data:`RUN_LIMITS` (beyond the search's: one schedule at a time)."""
    _check(Nq, Nkv, d, M, RUN_LIMITS)
    _validate(s, Nq, Nkv, d)
    data = None
    if seed is not None:
        rng = np.random.default_rng(seed)
        data = (rng.standard_normal((Nq, d)), rng.standard_normal((Nkv, d)),
                rng.standard_normal((Nkv, d)))
    mem = TwoLevelMemory(M, "count" if data is None else "compute", bulk=False)
    arr = _setup(mem, Nq, Nkv, d, data)
    scale = 1.0 / float(np.sqrt(d))
    if not _execute(s, Nq, Nkv, d, mem, arr, scale):
        return None
    st = mem.stats()
    err = None
    if data is not None:
        out = mem.contents(arr.O)
        assert out is not None
        ref = reference_attention(*data, scale=scale)
        err = float(np.max(np.abs(out - ref)))
    return SearchRun(st.reads, st.writes, st.peak, err)


def search(Nq: int, Nkv: int, d: int, M: int, *,
           every_upto: int = ALL_COMPOSITIONS_UPTO) -> list[Scored]:
    """Every schedule of the space that fits in M, run on the referee in count mode, least I/O
    first (ties: the enumeration order, so the result is deterministic)."""
    _check(Nq, Nkv, d, M)
    out: list[tuple[int, int, Scored]] = []
    for n, s in enumerate(enumerate_schedules(Nq, Nkv, d, every_upto=every_upto)):
        r = run_schedule(s, Nq, Nkv, d, M)
        if r is not None:
            out.append((r.io, n, Scored(s, r.reads, r.writes, r.peak)))
    out.sort(key=lambda x: (x[0], x[1]))
    return [x[2] for x in out]
