"""Row-block hybrid: query blocks built from the last row down, each run in the mode that moves
the fewest words per row for the keys it sees.

Every mode reads a block's query rows once and writes its output rows once; they differ in what
fast memory holds per row while the block's keys [lo, hi) (w of them) stream past, hence in how
many rows fit and in what else moves.  Per group of G query heads on one K/V head, r rows:

* ``a`` (score rows resident, :mod:`~attnio.algorithms.score_resident`): the whole score rows,
  Q, K, V streamed by single columns.  Footprint ``G·r·w + (w + r)``; moves ``2·w·d`` of K and V.
* ``c`` (Q-stationary, :mod:`~attnio.algorithms.q_stationary_min`): Q_i, O_i, m, l and a score
  column held, K and V streamed a word at a time.  Footprint ``G·r·(2d + 3) + 1``; moves ``2·w·d``.
* ``b`` (scores spilled): phase 1 holds Q_i, a score column, m and l (``G·r·(d + 3) + 1``),
  streams K a word at a time and writes each raw score column (G·r words a key) and at the end
  g = m + log l (G·r); phase 2 holds O_i, g and a weight column (``G·r·(d + 2) + 1``), reads each
  score column back, forms exp(s - g) — the probabilities themselves — and streams V a word at a
  time.  Moves ``2·w·d + 2·G·r·w + 2·G·r``: the scores twice, but twice as many rows per block
  as ``c`` when d is large.

A block that sees no key writes its output rows as zeros (one r-word column at a time).

Blocks.  From the last row e down: for each allowed mode, the most rows r that fit in ``budget``
(``a``: the largest r with ``G·r·w(e - r, e) + w + r <= budget``; ``b``, ``c``: independent of
w), the block's words c (the list above plus the ``2·G·r·d`` of Q and O), and the mode of least
c/r is taken (ties: a, c, b).  Under a causal mask this puts the short remainder block on the first
rows, which see the fewest keys (FlashAttention-2's uniform partition puts it last, where a row
costs most: at N = 3000, d = 160, M = 240000 its five blocks of 600 rows read K and V for
9000 keys, the hybrid's four of 743 and one of 28 for 7570), and it runs the first rows, whose
score rows are shorter than 2d, with their scores resident.

Closed form (exact; ``tests/algorithms/test_kv_and_q_stationary.py``), per group, blocks b with r_b rows, w_b
keys and mode μ_b::

    reads  = Σ_{w_b > 0} (G·r_b·d + 2·w_b·d + [μ_b = b]·(G·r_b·w_b + G·r_b))
    writes = G·Nq·d + Σ_{w_b > 0, μ_b = b} (G·r_b·w_b + G·r_b)

Tiling: ``budget`` (the most words any block holds), ``modes`` (the modes allowed, a subset of
"abc"), ``group`` (query heads per block).  A partition of more than :data:`MAX_BLOCKS` blocks is
not offered: the walk is the count (O(1) a block without a window), so plans stay fast at
N = 10⁹, where it gives up after a constant-time estimate.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from ..core.errors import ParameterError
from ..core.memory import Block, IOCount, SlowArray, TwoLevelMemory
from ..core.workload import Shape, kv_range
from . import _kernels as K_
from .base import GroupedAlgorithm, divisors_upto
from .common import HeadGroup
from .q_stationary_min import accumulate_output, accumulate_score, stationary_block
from .score_resident import resident_block

__all__ = ["ALGORITHM", "MAX_BLOCKS", "RowHybrid", "RowHybridTiling", "blocks"]

#: The most query blocks a partition may have to be offered: the walk that builds it is the
#: count, so this bounds a cold plan's time (about 10 us a block).
MAX_BLOCKS = 512
MODES = "abc"

#: (q0, q1, lo, hi, mode) per query block, ascending; mode "z" for a block that sees no key.
_Part = tuple[tuple[int, int, int, int, str], ...]


@dataclass(frozen=True)
class RowHybridTiling:
    """``budget`` words per block; ``modes`` allowed (a subset of "abc"); ``group`` query heads
    per block."""

    budget: int
    modes: str = "abc"
    group: int = 1


def _fp(mode: str, G: int, r: int, w: int, d: int) -> int:
    if mode == "a":
        return G * r * w + w + r
    if mode == "b":
        return G * r * (d + 3) + 1
    if mode == "c":
        return G * r * (2 * d + 3) + 1
    return r  # "z": one zero column


def _words(mode: str, G: int, r: int, w: int, d: int) -> tuple[int, int]:
    """(reads, writes) of one block of r rows seeing w > 0 keys, per group."""
    reads, writes = G * r * d + 2 * w * d, G * r * d
    if mode == "b":
        reads += G * r * w + G * r
        writes += G * r * w + G * r
    return reads, writes


@functools.lru_cache(maxsize=4096)
def blocks(shape: Shape, budget: int, modes: str, G: int) -> _Part | None:
    """The query blocks ``(q0, q1, lo, hi, mode)``, ascending, built from the last row down
    (module docstring); None when a row fits in no allowed mode or there would be more than
    :data:`MAX_BLOCKS` blocks."""
    if _simple(shape):
        walk = _simple_walk(shape, budget, modes, G)
        return None if walk is None else walk.blocks()
    Nq, d = shape.Nq, shape.d
    fixed = _fixed_rows(d, budget, modes, G)
    out: list[tuple[int, int, int, int, str]] = []
    e = Nq
    while e > 0:
        if len(out) >= MAX_BLOCKS:
            return None
        best: tuple[int, int, int, int, str] | None = None
        best_key: tuple[float, int] | None = None
        for rank, m in enumerate("acb"):
            if m not in modes:
                continue
            if m == "a":
                a, b = 0, e
                while a < b:
                    mid = (a + b + 1) // 2
                    lo, hi = kv_range(shape, e - mid, e)
                    if _fp("a", G, mid, max(0, hi - lo), d) <= budget:
                        a = mid
                    else:
                        b = mid - 1
                r = a
            else:
                r = fixed[m]
            r = min(r, e)
            if r < 1:
                continue
            lo, hi = kv_range(shape, e - r, e)
            hi = max(lo, hi)
            if hi == lo:
                mode = "z"
                cost = 0
            else:
                mode = m
                rd, wr = _words(m, G, r, hi - lo, d)
                cost = rd + wr
            key = (cost / r, rank)
            if best_key is None or key < best_key:
                best, best_key = (e - r, e, lo, hi, mode), key
        if best is None:
            return None
        out.append(best)
        e = best[0]
    return tuple(reversed(out))


def _simple(shape: Shape) -> bool:
    """Whether a block's keys depend on its end only, [0, hi(e)) (unmasked, or causal without a
    window): :func:`_simple_walk`'s case."""
    return not shape.causal or shape.window is None


def _fixed_rows(d: int, budget: int, modes: str, G: int) -> dict[str, int]:
    """The rows a block holds in modes b and c (those allowed), independent of its keys."""
    return {m: (budget - 1) // (G * (d + 3 if m == "b" else 2 * d + 3))
            for m in modes if m in "bc"}


@dataclass(frozen=True)
class _Walk:
    """:func:`_simple_walk`'s partition, from the last row down: ``singles``, the blocks
    ``(q0, q1, 0, w, mode)`` the loop took one by one, and ``runs``, the mode-c runs of r_c
    rows it took at once, each ``(i, ends, ws)``: its blocks' ends and keys (int64, descending
    ends) come after the first i singles."""

    singles: list[tuple[int, int, int, int, str]]
    runs: list[tuple[int, npt.NDArray[np.int64], npt.NDArray[np.int64]]]
    rc: int

    def blocks(self) -> _Part:
        """The blocks, ascending (:func:`blocks`)."""
        out: list[tuple[int, int, int, int, str]] = []
        at = 0
        for i, ends, ws in self.runs:
            out.extend(self.singles[at:i])
            at = i
            e = ends.tolist()
            n = len(e)
            out.extend(zip([x - self.rc for x in e], e, [0] * n, ws.tolist(), ["c"] * n))
        out.extend(self.singles[at:])
        return tuple(reversed(out))


@functools.lru_cache(maxsize=4096)
def _simple_walk(shape: Shape, budget: int, modes: str, G: int) -> _Walk | None:
    """:func:`blocks` where a block's keys are those its last row sees, [0, hi(e)) (unmasked,
    or causal without a window): the same walk with the modes' words a row inline (the
    integers of :func:`_words` over r, compared in the order a, c, b, the first kept on
    ties), a few times faster for the search's many calls.  After a block taken in mode c
    with r_c rows, the next block ends lie on the progression e - k·r_c: :func:`_c_run`
    decides them all in one numpy pass (the same integers and the same float quotients) and
    the run of blocks mode c takes there is kept as arrays (:class:`_Walk`), which
    :func:`_sums` adds up at once.  None where :func:`blocks` makes no partition: a cheap
    refusal first, the rows of each eighth see at least the keys of its first row, so a
    block there has at most r_best rows; too many blocks in all is refused in O(1)."""
    Nq, Nkv, d, off, causal = shape.Nq, shape.Nkv, shape.d, shape.offset, shape.causal
    fixed = _fixed_rows(d, budget, modes, G)
    least = 0.0
    for k in range(8):
        a, b = Nq * k // 8, Nq * (k + 1) // 8
        if b <= a:
            continue
        lo, hi = kv_range(shape, a, a + 1)
        w = hi - lo
        if w <= 0:
            continue
        r_best = max([*fixed.values(), budget // (G * w) if "a" in modes else 0])
        least += (b - a) / max(1, r_best)
    if least > MAX_BLOCKS:
        return None
    out: list[tuple[int, int, int, int, str]] = []
    runs: list[tuple[int, npt.NDArray[np.int64], npt.NDArray[np.int64]]] = []
    append = out.append
    has_a, rc, rb = "a" in modes, fixed.get("c", 0), fixed.get("b", 0)
    base = 2 * G * d  # words a row of Q and O, both ways; 2·w·d of K and V a block
    e, n_run, jump = Nq, 0, rc > 0  # (n_run: the blocks in runs)
    while e > 0:
        if len(out) + n_run >= MAX_BLOCKS:
            return None
        w = (Nkv if e + off >= Nkv else (e + off if e + off > 0 else 0)) if causal else Nkv
        if w == 0:
            r = e if e < budget else budget
            append((e - r, e, 0, 0, "z"))
            e -= r
            continue
        kv = 2 * w * d
        best_r, mode, least = 0, "", 0.0
        if has_a:
            r = (budget - w) // (G * w + 1)
            if r > e:
                r = e
            if r >= 1:
                best_r, mode, least = r, "a", (base * r + kv) / r
        if rc:
            r = rc if rc < e else e
            if r >= 1:
                v = (base * r + kv) / r
                if not mode or v < least:
                    best_r, mode, least = r, "c", v
        if rb:
            r = rb if rb < e else e
            if r >= 1:
                v = (base * r + kv + 2 * (G * r * w + G * r)) / r
                if not mode or v < least:
                    best_r, mode, least = r, "b", v
        if not mode:
            return None
        append((e - best_r, e, 0, w, mode))
        e -= best_r
        if mode == "c" and best_r == rc and jump and e >= RUN_MIN * rc:
            k_max = min(e // rc, MAX_BLOCKS - len(out) - n_run)
            ends, ws = _c_run(shape, e, k_max, (budget, modes, G, fixed))
            jump = ends.size >= RUN_MIN  # (a short run: the walk is near its end; stop trying)
            if ends.size:
                runs.append((len(out), ends, ws))
                n_run += ends.size
                e = int(ends[-1]) - rc
    return _Walk(out, runs, rc)


#: The fewest blocks a mode-c run must be able to hold for :func:`_simple_walk` to try one.
RUN_MIN = 8


def _keys_seen(shape: Shape, ends: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """The keys ``[0, w)`` the blocks ending at ``ends`` see where :func:`_simple_walk` walks
    (its ``w``, int64)."""
    if not shape.causal:
        return np.full(ends.shape, shape.Nkv, dtype=np.int64)
    return np.minimum(np.maximum(ends + shape.offset, 0), shape.Nkv)  # (np.clip: slower)


def _c_run(shape: Shape, e: int, k_max: int, walk: tuple[int, str, int, dict[str, int]]
           ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """The ends ``e, e - r_c, ...`` (at most ``k_max``) of the blocks :func:`_simple_walk`
    takes in mode c with ``r_c`` rows one after the other from the block end e down, and the
    keys each sees (:func:`_keys_seen`), int64 (empty where the first is not such a block, or
    where the words could be inexact in float64).

    At each end x >= r_c seeing w(x) > 0 keys its loop takes mode c with r_c rows exactly
    when c's words a row are below a's (where a fits a row) and b's are not below c's (where
    b fits one): here the same integers in int64 and the same quotients, every numerator and
    denominator below 2^53, so that numpy's float64 division of the two is Python's
    correctly rounded ``int / int``."""
    budget, modes, G, fixed = walk
    d, rc, rb = shape.d, fixed["c"], fixed.get("b", 0)
    base = 2 * G * d
    if (base + 2 * G * (shape.Nkv + 1)) * (budget + 1) + 2 * shape.Nkv * d >= 1 << 53:
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
    x = e - rc * np.arange(k_max, dtype=np.int64)
    w = _keys_seen(shape, x)
    kv = 2 * d * w
    vc = (base * rc + kv) / rc
    ok = (x >= rc) & (w > 0)
    if "a" in modes:
        ra = np.minimum((budget - w) // (G * w + 1), x)
        fits = ra >= 1
        ra1 = np.where(fits, ra, 1)
        ok &= ~fits | (vc < (base * ra1 + kv) / ra1)
    if rb:
        r = np.minimum(rb, x)
        fits = r >= 1
        r1 = np.where(fits, r, 1)
        ok &= ~(fits & ((base * r1 + kv + 2 * (G * r1 * w + G * r1)) / r1 < vc))
    bad = np.flatnonzero(~ok)
    n = int(bad[0]) if bad.size else k_max
    return x[:n], w[:n]


@functools.lru_cache(maxsize=4096)
def _sums(shape: Shape, budget: int, modes: str, G: int) -> tuple[int, int, int, int] | None:
    """(footprint, steps, reads, writes per group) of the partition :func:`blocks` makes, in
    one pass over its blocks (None where it makes none): what the search asks of each
    candidate, the words of :func:`_words` and the footprint of :func:`_fp` inline; where
    :func:`_simple_walk` makes it, over its single blocks and its mode-c runs at once (the
    blocks themselves not made)."""
    d = shape.d
    fp = steps = reads = writes = 0
    part: Iterable[tuple[int, int, int, int, str]] | None
    if _simple(shape):
        walk = _simple_walk(shape, budget, modes, G)
        if walk is None:
            return None
        part, rc = walk.singles, walk.rc
        for _, ends, ws in walk.runs:  # mode-c blocks of r_c rows: the loop's sums at once
            n, sw = ends.size, int(ws.sum())
            steps += 2 * d * sw
            reads += n * G * rc * d + 2 * d * sw
            writes += n * G * rc * d
            fp = max(fp, G * rc * (2 * d + 3) + 1)
    else:
        part = blocks(shape, budget, modes, G)
        if part is None:
            return None
    for q0, q1, lo, hi, m in part:
        r, w = q1 - q0, hi - lo
        if w > 0:
            steps += 2 * d * w
            reads += G * r * d + 2 * w * d
            writes += G * r * d
            if m == "b":
                reads += G * r * w + G * r
                writes += G * r * w + G * r
                f = G * r * (d + 3) + 1
            elif m == "a":
                f = G * r * w + w + r
            else:  # "c"
                f = G * r * (2 * d + 3) + 1
        else:  # a block that sees no key: one zero column, its rows written
            steps += 2 * d
            writes += G * r * d
            f = _fp(m, G, r, w, d)
        if f > fp:
            fp = f
    return fp, steps, reads, writes


def spill_never_wins(d: int, budget: int, G: int) -> bool:
    """Whether mode ``b`` is never taken by :func:`blocks` with modes "abc" (so its blocks are
    those of "ac"): mode c fits a row, ``r_c = ⌊(budget - 1)/(G(2d + 3))⌋ >= 1``, and
    ``G·r_c·r_b >= d·(r_b - r_c)`` with ``r_b = ⌊(budget - 1)/(G(d + 3))⌋``.

    At a block end e, c takes ``r = min(r_c, e)`` rows seeing w_c keys and b takes
    ``min(r_b, e)`` rows seeing w_b >= w_c; their words a row are ``2Gd + 2·w_c·d/r`` and
    ``2Gd + 2·w_b·d/r' + 2G(w_b + 1)``, and b is taken only if strictly fewer (c ranks first).
    That needs ``G(w_b + 1)·r·r' < d·w_b·(r' - r)``, so ``G·r·r' < d·(r' - r)``, which is
    increasing in e up to e = r_b, where it is the condition above: it never holds."""
    rc = (budget - 1) // (G * (2 * d + 3))
    rb = (budget - 1) // (G * (d + 3))
    return rc >= 1 and G * rc * rb >= d * (rb - rc)


def resident_blocks_least(shape: Shape, budget: int, G: int) -> float:
    """A lower bound on the blocks :func:`blocks` makes with modes "a" alone (0: none known;
    unmasked or causal without a window, where a block's keys depend on its end e only).

    A block ending at row e takes at most ``r(e) = ⌊(budget - w(e))/(G·w(e) + 1)⌋`` rows, w(e)
    the keys row e - 1 sees (a block that sees none, w = 0, at most ``budget``); w grows with
    e, so r shrinks, and every row x of the block has ``r(x) >= r(e)``: the block's rows add
    at most 1 to ``Σ_x 1/r(x)``, which is thus at most the number of blocks.  The sum is
    taken over 4096 slices of the rows at most, each at its first row's r (a lower sum)."""
    if shape.causal and shape.window is not None:
        return 0.0
    Nq, Nkv = shape.Nq, shape.Nkv
    if not shape.causal:  # every block sees the Nkv keys
        r1 = (budget - Nkv) // (G * Nkv + 1)
        return float("inf") if r1 < 1 else Nq / r1
    off = shape.offset
    step = max(1, Nq // 4096)
    x = np.arange(1, Nq + 1, step, dtype=np.int64)  # the slices' first rows (block ends)
    n = np.minimum(step, Nq + 1 - x)  # rows a slice holds
    w = np.clip(x + off, 0, Nkv)
    r = np.where(w > 0, (budget - w) // (G * w + 1), budget)  # exact: G <= 64, sizes <= 2^50
    if (r < 1).any():
        return float("inf")  # some row fits in no block: blocks() refuses
    return float(np.sum(n / r))


class RowHybrid(GroupedAlgorithm[RowHybridTiling]):
    name = "row_hybrid"
    summary = ("query blocks from the last row down, each with its score rows resident, Q/O "
               "resident, or its scores spilled, whichever moves fewest words a row")
    Tiling = RowHybridTiling
    supports_window = True

    def _part(self, shape: Shape, tiling: RowHybridTiling) -> _Part:
        part = blocks(shape, tiling.budget, tiling.modes, tiling.group)
        if part is None:
            raise ParameterError(f"{self.name}: budget={tiling.budget} fits no query row of this "
                                 f"shape in modes {tiling.modes!r} with group={tiling.group}, or "
                                 f"needs more than {MAX_BLOCKS} blocks", param="tiling")
        return part

    def footprint(self, shape: Shape, tiling: RowHybridTiling) -> int:
        sums = _sums(shape, tiling.budget, tiling.modes, tiling.group)
        if sums is None:
            return 1 << 62  # fits no memory: the search skips it
        return sums[0]

    def min_M(self, shape: Shape) -> int:
        """An M from which a partition of at most :data:`MAX_BLOCKS` blocks always exists (the
        least such M, to within two blocks' rows; the planner and the sweep read M >= min_M as
        "a tiling fits"): mode c alone with
        ``r_c >= ceil(Nq / (MAX_BLOCKS - 2))`` rows a block (the blocks that see a key, and those
        that see none, whose r is the budget, at most ``Nq/r_c + 2`` in all); ``2d + 4`` (one
        row) when Nq is small."""
        r = max(1, -(-shape.Nq // (MAX_BLOCKS - 2)))
        return _fp("c", 1, r, 0, shape.d)

    def validate_tiling(self, shape: Shape, tiling: RowHybridTiling) -> None:
        check = tiling.modes
        if not isinstance(check, str) or not check or set(check) - set(MODES):
            raise ParameterError(f"tiling.modes must be a non-empty subset of {MODES!r}, got "
                                 f"{check!r}", param="tiling")
        super().validate_tiling(shape, tiling)
        self._part(shape, tiling)

    def steps(self, shape: Shape, tiling: RowHybridTiling) -> int:
        sums = _sums(shape, tiling.budget, tiling.modes, tiling.group)
        return 1 << 62 if sums is None else sums[1]

    def count_walk(self, shape: Shape, tiling: RowHybridTiling) -> int:
        """Count mode walks the query blocks one by one (at most :data:`MAX_BLOCKS`)."""
        part = blocks(shape, tiling.budget, tiling.modes, tiling.group)
        return 0 if part is None else len(part)

    def candidate_tilings(self, shape: Shape, M: int) -> list[RowHybridTiling]:
        """The budget M with modes "abc", "ac", "a" and "c" for each query-head group G (a
        divisor of the group, at most 64) whose blocks exist, less those that cannot be chosen.

        Where mode b is never taken (:func:`spill_never_wins`), "ac" has the blocks of "abc",
        listed before it.  Where moreover every row sees a key and a block's keys are
        [0, hi(e)), hi(e) those of its last row e - 1 (unmasked, or causal without a window
        and offset >= 0), "a" and "c" alone cannot beat "abc" either: modes a and c move the
        same words for the same rows, a block of r rows ending at e costs
        ``2·G·r·d + 2·d·hi(e)``, so a partition's count is ``2·G·Nq·d + 2d·Σ_k hi(e_k)`` and its
        steps ``2d·Σ_k hi(e_k)``; from the last row down "abc" takes
        ``min(max(r_a(e), r_c), e)`` rows (the mode with more rows moves fewer words a row;
        a wins ties), "a" alone ``min(r_a(e), e)`` and "c" alone ``min(r_c, e)``, no more.  By
        induction its k-th block end is at or below theirs: at most as many blocks, each
        seeing at most as many keys, so its count and steps are at most theirs (listed first,
        it wins ties; where it has too many blocks, so have they).  Modes "a" are also left
        out where :func:`resident_blocks_least` shows :func:`blocks` would refuse them."""
        if shape.block_mask is not None:
            return []
        out: list[RowHybridTiling] = []
        # every row sees a key, and a block's keys are those its last row sees
        prefix = not shape.causal or (shape.window is None and shape.offset >= 0)
        for G in divisors_upto(shape.group, min(64, M)):
            quiet = spill_never_wins(shape.d, M, G)
            for modes in ("abc", "ac", "a", "c"):
                if quiet and (modes == "ac" or (prefix and modes in ("a", "c"))):
                    continue  # never chosen over "abc" (docstring)
                if modes == "a" and resident_blocks_least(shape, M, G) > MAX_BLOCKS + 0.5:
                    continue  # blocks() would refuse it, after walking MAX_BLOCKS blocks
                if _sums(shape, M, modes, G) is not None:  # (None: blocks() makes none)
                    out.append(RowHybridTiling(M, modes, G))
        return out

    # ------------------------------------------------------------------ counts
    def _group_count(self, shape: Shape, tiling: RowHybridTiling) -> IOCount:
        """Per block of the partition, :func:`_words` where it sees keys, its rows' outputs
        written where it sees none (:func:`_sums`, one pass)."""
        sums = _sums(shape, tiling.budget, tiling.modes, tiling.group)
        if sums is None:
            self._part(shape, tiling)  # (its message: there is no partition)
        assert sums is not None
        return IOCount(sums[2], sums[3])

    # ------------------------------------------------------------------ the schedule
    def schedule_group(self, mem: TwoLevelMemory, heads: HeadGroup, *, shape: Shape,
                       tiling: RowHybridTiling, scale: float) -> None:
        """Query heads ``heads.Qs`` (one group) against their K/V head, block by block (no
        logsumexp: no backward)."""
        G, Nq = len(heads.Qs), shape.Nq
        scratch = None
        for q0, q1, lo, hi, m in self._part(shape, tiling):
            rows = Block(0, q0, q1)
            if m in "az":
                resident_block(mem, heads, rows, lo, hi, shape=shape, bd=1, scale=scale)
            elif m == "c":
                stationary_block(mem, heads, rows, lo, hi, shape, scale)
            else:
                if scratch is None:  # the score columns [g, key, row] and each row's g
                    scratch = (mem.scratch("S_spill", (G * shape.Nkv * Nq,)),
                               mem.scratch("g_spill", (G * Nq,)))
                _spilled_block(mem, heads, rows, (lo, hi), shape, scale, scratch)


def _fold_column(shape: Shape, r0: int, j: int, scale: float) -> Callable[..., None]:
    """Scale and mask the score column of key j, then fold it into the running (m, l)."""
    off, window, causal = shape.offset, shape.window, shape.causal

    def fn(s: np.ndarray, m: np.ndarray, l: np.ndarray) -> None:
        s *= scale
        if causal:
            K_.apply_causal_mask(s[:, None], r0, j, off, window)
        mn = np.maximum(m, s)
        ms = K_.safe_max(mn)
        l *= np.exp(m - ms)
        l += np.exp(s - ms)
        m[:] = mn
    return fn


def _log_sum_exp(m: np.ndarray, l: np.ndarray) -> None:
    """m <- m + log l (+inf where the row saw no key: its weights become 0)."""
    with np.errstate(divide="ignore"):
        m[:] = np.where(l > 0, K_.safe_max(m) + np.log(np.where(l > 0, l, 1.0)), np.inf)


def _weights(p: np.ndarray, g: np.ndarray) -> None:
    with np.errstate(invalid="ignore"):
        p -= g
    np.exp(p, out=p)


def _spilled_block(mem: TwoLevelMemory, heads: HeadGroup, rows: Block, keys: tuple[int, int],
                   shape: Shape, scale: float, scratch: tuple[SlowArray, SlowArray]) -> None:
    """Mode b: the raw score columns of the query rows ``rows`` against the keys [lo, hi)
    (``keys``) written to ``scratch[0]`` (each row's g to ``scratch[1]``), then read back as
    exp(s - g) against V."""
    Qs, K, V, Os = heads.Qs, heads.K, heads.V, heads.Os
    (lo, hi), (spill, gsum) = keys, scratch
    q0, q1 = rows.start, rows.stop
    d, r, Nq, Nkv = shape.d, q1 - q0, shape.Nq, shape.Nkv
    hrows = [slice(g * Nq + q0, g * Nq + q1) for g in range(len(Qs))]

    def col(g: int, j: int) -> slice:  # the score column of head g, key j, rows [q0, q1)
        base = (g * Nkv + j) * Nq
        return slice(base + q0, base + q1)

    held = []
    for Qh in Qs:  # phase 1: Q_i, a score column, m, l
        held.append((mem.load(Qh, rows, label="Q_i"), mem.alloc((r,), label="s_i"),
                      mem.alloc((r,), -np.inf, label="m_i"), mem.alloc((r,), 0.0, label="l_i")))
    for kb in mem.blocks(shape.Nkv, 1, lo=lo, hi=hi):
        j = kb.start
        for _, s, _, _ in held:
            mem.compute(lambda x: x.fill(0.0), s, writes=1)
        for cb in mem.blocks(d, 1):
            w = mem.load(K, j, cb, label="k_jl")
            for Qi, s, _, _ in held:
                mem.compute(accumulate_score(cb.start), s, Qi, w, writes=1)
            mem.free(w)
        for h, (_, s, m, l) in enumerate(held):
            mem.compute(_fold_column(shape, q0, j, scale), s, m, l, writes=3)
            mem.store(s, spill, col(h, j))
    for (Qi, s, m, l), hr in zip(held, hrows):
        mem.compute(_log_sum_exp, m, l, writes=1)
        mem.store(m, gsum, hr)
        mem.free(Qi, s, m, l)
    outs = []
    for hr in hrows:  # phase 2: O_i, g, a weight column
        outs.append((mem.alloc((r, d), 0.0, label="O_i"), mem.load(gsum, hr, label="g_i")))
    for kb in mem.blocks(shape.Nkv, 1, lo=lo, hi=hi):
        j = kb.start
        ps = []
        for h, (_, gv) in enumerate(outs):
            p = mem.load(spill, col(h, j), label="p_j")
            mem.compute(_weights, p, gv, writes=1)
            ps.append(p)
        for cb in mem.blocks(d, 1):
            w = mem.load(V, j, cb, label="v_jl")
            for (Oi, _), p in zip(outs, ps):
                mem.compute(accumulate_output(cb.start), Oi, p, w, writes=1)
            mem.free(w)
        mem.free(*ps)
    for Oh, (Oi, gv) in zip(Os, outs):
        mem.store(Oi, Oh, rows)
        mem.free(Oi, gv)


ALGORITHM = RowHybrid()
