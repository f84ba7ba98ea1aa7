"""Helpers the schedules share: the views a group of heads runs on, sizes worth scoring, bisection,
divisors, causal sums, the scale.

Public so that a schedule module imports them from here, never a private name from another
schedule's module.
"""

from __future__ import annotations

import bisect
import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ..core import masks
from ..core.checks import check_real
from ..core.memory import SlowArray, TwoLevelMemory
from ..core.workload import Shape, cdiv

if TYPE_CHECKING:
    import numpy.typing as npt

__all__ = ["HeadGroup", "block_sizes", "default_scale", "divisors_upto", "fp_group_pass_a", "fp_split_pass1",
           "ladder", "largest_true", "prefix_block_keys", "prefix_block_keys_many",
           "stacked_rows"]


@dataclass(frozen=True)
class HeadGroup:
    """The slow-memory views one group of query heads runs on, as one value (the arguments of
    :meth:`~attnio.algorithms.base.GroupedAlgorithm.schedule_group` and of the kernels it calls):
    each query head's rows of Q and of the output O (``Qs``, ``Os``, in the same order), the
    K and V rows of their key/value head, and each head's logsumexp rows (Nq words) when the
    forward writes it for a backward pass (``lse``; None: it is not written)."""

    Qs: tuple[SlowArray, ...]
    K: SlowArray
    V: SlowArray
    Os: tuple[SlowArray, ...]
    lse: tuple[SlowArray, ...] | None = None

    @classmethod
    def one(cls, Q: SlowArray, K: SlowArray, V: SlowArray, O: SlowArray,
            lse: SlowArray | None = None) -> HeadGroup:
        """A group of one query head."""
        return cls((Q,), K, V, (O,), None if lse is None else (lse,))


def default_scale(d: int, scale: object | None) -> float:
    """``scale`` as a finite float (None: 1/sqrt(d))."""
    if scale is None:
        return 1.0 / math.sqrt(d)
    return check_real("scale", scale)


def block_sizes(n: int, most: int, *, more: int = 4, powers: bool = True) -> list[int]:
    """Row-block sizes worth scoring for n rows with at most ``most`` rows a block, ascending:
    the sizes of the fewest blocks (⌈n/t⌉ for t = ⌈n/most⌉ .. + ``more``) and, if ``powers``, the
    powers of two below ``most`` ([] when most < 1)."""
    if most < 1:
        return []
    tr = -(-n // most)
    out = {-(-n // x) for x in range(tr, min(n, tr + more) + 1)}
    k = 1
    while powers and k < most:
        out.add(k)
        k *= 2
    return sorted(b for b in out if b <= most)


def largest_true(pred: Callable[[int], bool], lo: int, hi: int) -> int:
    """The largest x in [lo, hi] with ``pred(x)``, for a predicate true up to some point and false
    after it, by bisection (``pred(lo)`` is taken as true and never asked: ``lo`` is returned
    when no larger x has it)."""
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if pred(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo


def divisors_upto(n: int, most: int) -> list[int]:
    """The divisors of n that are <= most, ascending, in O(min(most, sqrt(n))) steps (a group
    of 2**40 query heads per key/value head is as quick as one of 4): n's prime factors up to
    ``most`` by trial division (a divisor <= most has no larger one), their products <= most."""
    if most <= 64:
        return [k for k in range(1, most + 1) if n % k == 0]
    out, m, p = [1], n, 2
    while p <= most and p * p <= m:
        if m % p == 0:
            k = 0
            while m % p == 0:
                m //= p
                k += 1
            out = [y for x in out for e in range(k + 1) if (y := x * p ** e) <= most]
        p += 1 if p == 2 else 2
    if 1 < m <= most and p * p > m:  # what is left is one prime, small enough
        out += [x * m for x in out if x * m <= most]
    return sorted(out)


def prefix_block_keys(Nkv: int, off: int, n: int, B: int) -> float | None:
    """A lower bound, in O(1), on ``Σ_i hi_i`` over T = ⌈n/B⌉ blocks of n consecutive query
    rows under a causal mask (no window) where row k of them sees the keys [0, k + 1 + off),
    none clipped (``0 <= off <= Nkv - n``; None otherwise): T - 1 blocks of B rows and a last
    of r = n - (T - 1)·B holding the last row, block i streaming the keys [0, hi_i) its rows
    see (hi_i at least its last row's count).

    A block of m rows sees at most ``m·hi_i - m(m - 1)/2`` pairs (its rows see distinct
    counts, all <= hi_i); the rows see ``P = n·off + n(n + 1)/2`` pairs; so with
    ``X = P + (T - 1)·B(B - 1)/2 + r(r - 1)/2``, ``B·Σ_{i<T-1} hi_i + r·hi_last >= X`` and
    ``Σ_i hi_i >= X/B + (1 - r/B)·hi_last``, ``hi_last >= n + off``."""
    if not 0 <= off <= Nkv - n or n < 1:
        return None
    T = cdiv(n, B)
    r = n - (T - 1) * B
    X = n * off + n * (n + 1) // 2 + (T - 1) * B * (B - 1) // 2 + r * (r - 1) // 2
    return X / B + (1 - r / B) * (n + off)


def prefix_block_keys_many(Nkv: int, off: npt.ArrayLike, n: npt.ArrayLike, B: npt.ArrayLike
                           ) -> npt.NDArray[np.float64]:
    """:func:`prefix_block_keys` over arrays of (off, n, B) (broadcast), in float64, NaN where
    it is None: for a search that bounds a pool of candidates at once (within float rounding
    of the one-at-a-time bound, which the mapper's margin covers)."""
    if isinstance(off, int) and isinstance(n, int):  # one (off, n), many B: its terms once
        b = np.maximum(np.asarray(B, dtype=np.int64), 1)
        if not 0 <= off <= Nkv - n or n < 1:
            return np.full(b.shape, np.nan)
        T = -(-n // b)
        r = (n - (T - 1) * b).astype(np.float64)
        bf = b.astype(np.float64)
        X = (float(n) * off + n * (n + 1.0) / 2 + (T - 1).astype(np.float64) * bf * (bf - 1) / 2
             + r * (r - 1) / 2)
        one: npt.NDArray[np.float64] = X / bf + (1 - r / bf) * float(n + off)
        return one
    o, m = np.asarray(off, dtype=np.int64), np.asarray(n, dtype=np.int64)
    b = np.maximum(np.asarray(B, dtype=np.int64), 1)
    T = -(-m // b)
    r = (m - (T - 1) * b).astype(np.float64)
    mf, of, bf = m.astype(np.float64), o.astype(np.float64), b.astype(np.float64)
    X = mf * of + mf * (mf + 1) / 2 + (T - 1).astype(np.float64) * bf * (bf - 1) / 2 + r * (r - 1) / 2
    ok = (o >= 0) & (o <= Nkv - m) & (m >= 1)
    out: npt.NDArray[np.float64] = np.where(ok, X / bf + (1 - r / bf) * (mf + of), np.nan)
    return out


def fp_group_pass_a(d: int, G: int, Br: int, Bc2: int) -> int:
    """group_split_backward's pass A footprint (G stacked heads of Br rows, a Bc2 key block);
    group_spill_backward shares the pass."""
    return G * Br * (3 * d + 2) + 2 * Bc2 * d + 2 * Br * Bc2


def stacked_rows(shape: Shape, group: int) -> int:
    """The heads stacked in pass A: gcd(group, g), a divisor of the heads per K/V head."""
    return math.gcd(group, shape.group)


def fp_split_pass1(d: int, Bc: int, Br1: int) -> int:
    """split_backward's pass 1 footprint (dK, dV of Bc keys against Br1 query rows);
    group_split_backward runs the same pass."""
    return 4 * Bc * d + 2 * Br1 * d + 2 * Br1 + 2 * Br1 * Bc


def _geometric(limit: float) -> tuple[tuple[float, ...], tuple[int, ...]]:
    """The spread of :func:`ladder`: b = 1, 1.18, 1.18², ... (the same float products) while
    b <= limit, and their integer parts."""
    bs = []
    b = 1.0
    while b <= limit:
        bs.append(b)
        b *= 1.18
    return tuple(bs), tuple(int(b) for b in bs)


_SPREAD, _SPREAD_INT = _geometric(2.0 ** 64)  # ladder's rungs up to 2^64, computed once


def ladder(total: int, vmax: int) -> tuple[int, ...]:
    """Block sizes worth trying in [1, min(total, vmax)]: a geometric spread and the largest few,
    each snapped down to the smallest size with the same number of blocks (cached by
    (total, min(total, vmax)): the searches ask it of one axis with several vmax at or above
    its length)."""
    return _ladder(total, min(total, vmax))


@functools.lru_cache(maxsize=1024)
def _ladder(total: int, vmax: int) -> tuple[int, ...]:
    """:func:`ladder` with vmax <= total."""
    if vmax < 1:
        return ()
    if vmax < _SPREAD[-1]:  # the rungs b <= vmax, from the table
        vals = set(_SPREAD_INT[:bisect.bisect_right(_SPREAD, vmax)])
    else:
        vals = set(_geometric(vmax)[1])
    vals.add(vmax)
    t0 = -(-total // vmax)
    for t in range(t0, t0 + 8):
        vals.add(-(-total // t))
    out = set()
    for v in vals:  # (every v >= 1: the rungs from 1, the others ceilings of total >= vmax)
        if v <= vmax:
            out.add(v)
            out.add(-(-total // -(-total // v)))
    return tuple(sorted(out))


def split_sizes(total: int, n: int) -> tuple[tuple[int, int], ...]:
    """n sizes summing to ``total`` as (size, how many): ``total mod n`` of ⌈total/n⌉ and the
    rest of ⌊total/n⌋ (none at 0 words: every line and score column is at least one word); a
    bulk count's stand-in for n lines of differing lengths (the same words and stores)."""
    q, r = divmod(total, n)
    return tuple((size, k) for size, k in ((q + 1, r), (q, n - r)) if k and size)


def store_lines(mem: TwoLevelMemory, A: SlowArray, by_rows: bool, lines: int, words: int) -> None:
    """Store ``lines`` score lines of ``words`` words in all into A (a bulk count's stand-in for
    a tile's lines of differing lengths, :func:`split_sizes`): the same stores and words, one
    line resident at a time (rows of A ``by_rows``, else columns)."""
    for size, many in split_sizes(words, lines) if lines else ():
        for _ in mem.repeat(many):
            line = mem.alloc((1, size) if by_rows else (size, 1), label="S_line")
            if by_rows:
                mem.store(line, A, 0, slice(0, size))
            else:
                mem.store(line, A, slice(0, size), 0)
            mem.free(line)


def row_stream_lower(shape: Shape) -> Callable[[int, int], float] | None:
    """A bound in O(1) on the count of a schedule that streams K and V past query blocks of Br
    rows, G heads of a group at a time (flash2 and q_stationary_min; their ``_lower_total``),
    as a function of (Br, G): the count itself unmasked; under a causal mask without a window
    ``G·d·rows1`` of Q (the rows that see a key) and ``2d·Σ_i hi_i`` of K and V (the keys
    block i sees, :func:`prefix_block_keys`, exact where no row is clipped, else 0), plus
    ``G·Nq·d`` written, per group.  None under a window or a block mask."""
    if shape.block_mask is not None or (shape.causal and shape.window is not None):
        return None
    d, Nq, Nkv, n, causal, off = (shape.d, shape.Nq, shape.Nkv, shape.n_heads, shape.causal,
                                  shape.offset)
    rows1 = masks.row_counts(shape).rows1

    def lower(Br: int, G: int) -> float:
        Br = min(Br, Nq)
        keys = cdiv(Nq, Br) * Nkv if not causal else prefix_block_keys(Nkv, off, Nq, Br) or 0
        return (n // G) * (G * d * rows1 + 2 * d * keys + G * Nq * d)
    return lower
