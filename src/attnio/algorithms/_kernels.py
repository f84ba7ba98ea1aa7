"""Arithmetic shared by the exact schedules: functions on fast-tile arrays only.

Each function here receives numpy arrays that :meth:`TwoLevelMemory.compute` took from fast
tiles, and works in place.  Elementwise temporaries are register-level and not counted.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np

from ..core.memory import Block, FastTile, SlowArray, TwoLevelMemory
from ..core.workload import Shape

NEG_INF = -np.inf


def apply_causal_mask(S: np.ndarray, r0: int, c0: int, offset: int, window: int | None = None) -> None:
    """Set ``S[r, c] = -inf`` where key ``c0 + c`` is after query ``r0 + r`` + offset, or (with a
    window) ``window`` or more keys before it."""
    rows = np.arange(r0, r0 + S.shape[0])[:, None] + offset
    cols = np.arange(c0, c0 + S.shape[1])[None, :]
    masked = cols > rows
    if window is not None:
        masked |= cols <= rows - window
    S[masked] = NEG_INF


def tile_needs_mask(shape: Shape, r0: int, c1: int, r1: int | None = None,
                    c0: int | None = None) -> bool:
    """True when the tile of rows [r0, r1) x cols [c0, c1) has masked entries."""
    if not shape.causal:
        return False
    if (c1 - 1) > r0 + shape.offset:
        return True
    if shape.window is not None and r1 is not None and c0 is not None:
        return c0 <= (r1 - 1) + shape.offset - shape.window
    return False


def mask_tile(mem: TwoLevelMemory, S: FastTile, shape: Shape, qb: Block, kb: Block) -> None:
    """Mask the score tile of query block ``qb`` x key block ``kb`` in fast memory, if needed."""
    if tile_needs_mask(shape, qb.start, kb.stop, qb.stop, kb.start):
        r0, c0, off, w = qb.start, kb.start, shape.offset, shape.window
        mem.compute(lambda s: apply_causal_mask(s, r0, c0, off, w), S, writes=1)


def safe_max(t: np.ndarray) -> np.ndarray:
    """Row maxima with -inf (rows that saw nothing) replaced by 0, for subtraction."""
    return np.where(np.isfinite(t), t, 0.0)


def online_update_fa2(S: np.ndarray, m: np.ndarray, l: np.ndarray, t: np.ndarray, O: np.ndarray,
                      V: np.ndarray) -> None:
    """FlashAttention-2 inner step: fold the score tile S into (m, l, unnormalised O).

    The unnormalised accumulator sum_j e^{s_j - m} V_j grows with l (up to the number of keys
    times max |V|), so it is kept divided by 2^e, e = the binary exponent of l (l < 2^e <= 2l):
    then |O| <= max |V| at every step, finite whenever V is (the reference's own bound), and
    never below half the normalised output.  Scaling by powers of two is exact; the words moved
    are the same.  :func:`normalise_rows` finishes with O / mantissa(l) = O_unnormalised / l.
    """
    np.max(S, axis=1, out=t)
    np.maximum(t, m, out=t)  # t = new row max
    ts = safe_max(t)
    S -= ts[:, None]
    np.exp(S, out=S)
    alpha = np.exp(m - ts)  # e^{m_old - m_new}; 0 where m_old = -inf
    e_old = np.frexp(l)[1]
    l *= alpha
    l += S.sum(axis=1)
    e_new = np.frexp(l)[1]
    O *= np.ldexp(alpha, e_old - e_new)[:, None]
    np.ldexp(S, -e_new[:, None], out=S)
    O += S @ V
    m[:] = t


def online_lse_step(s: np.ndarray, g: np.ndarray, O: np.ndarray) -> None:
    """Rows that each take one visible (finite) score ``s``: the new key's weight among the
    keys seen so far, ``β = e^s / (e^g + e^s) = 1 / (1 + e^(g - s))`` (1 for a row that has seen
    nothing: g = -inf), the running log-sum-exp ``g <- logaddexp(g, s)``, and the normalised
    accumulator ``O <- O - β·O`` (the caller adds ``β·v``); ``s`` becomes β.  O stays a convex
    combination of value rows (within max |V|, finite near the largest float), and β as a
    logistic of the score gap (not e^(s - g') with a rounded g') keeps the weights summing to 1:
    float32 runs stay within twice the naive softmax's error (``tests/core/test_numerics.py``)."""
    with np.errstate(over="ignore", invalid="ignore"):  # non-finite inputs propagate quietly
        beta = 1.0 / (1.0 + np.exp(g - s))
        g[:] = np.logaddexp(g, s)
        O -= beta[:, None] * O
    s[:] = beta


def logsumexp(out: np.ndarray, m: np.ndarray, l: np.ndarray) -> None:
    """out = m + log(l) per row (-inf where the row saw no key)."""
    with np.errstate(divide="ignore"):
        out[:] = np.where(l > 0, safe_max(m) + np.log(np.where(l > 0, l, 1.0)), -np.inf)


def normalise_rows(O: np.ndarray, l: np.ndarray) -> None:
    """O <- diag(l)^-1 O for an accumulator kept divided by 2^e (e the binary exponent of l, as
    :func:`online_update_fa2` keeps it): O / mantissa(l), with rows of l = 0 (fully masked)
    left at 0."""
    mant = np.frexp(l)[0]
    O /= np.where(l > 0, mant, 1.0)[:, None]


def online_update_fa1(S: np.ndarray, m: np.ndarray, l: np.ndarray, t1: np.ndarray,
                      t2: np.ndarray, O: np.ndarray, V: np.ndarray) -> None:
    """FlashAttention-1 inner step (Algorithm 1, lines 10-12) on a normalised O block.

    Line 12, O <- diag(l_new)^-1 (diag(l) e^{m - m_new} O + e^{m~ - m_new} P~ V), is computed with
    diag(l_new)^-1 distributed over both terms: every coefficient is then at most 1 and they sum
    to 1, so O stays within max |V| (no intermediate overflow when V is near the largest float).
    """
    np.max(S, axis=1, out=t1)
    np.maximum(t1, m, out=t1)  # m_new
    ts = safe_max(t1)
    S -= ts[:, None]
    np.exp(S, out=S)  # P~ scaled by e^{m~ - m_new}
    np.sum(S, axis=1, out=t2)
    alpha = np.exp(m - ts)
    t2 += alpha * l  # l_new
    safe = np.where(t2 > 0, t2, 1.0)
    O *= (alpha * l / safe)[:, None]
    S /= safe[:, None]
    O += S @ V
    m[:] = t1
    l[:] = t2


def apply_block_mask(S: np.ndarray, layout: np.ndarray, bq: int, bk: int, r0: int,
                     c0: int) -> None:
    """Set ``S[r, c] = -inf`` where query ``r0 + r``'s block does not see key ``c0 + c``'s block
    in a block-sparse ``layout`` of ``bq`` x ``bk`` blocks."""
    rows = (r0 + np.arange(S.shape[0])) // bq
    cols = (c0 + np.arange(S.shape[1])) // bk
    S[~layout[rows][:, cols]] = NEG_INF


def block_tile_is_full(shape: Shape, r0: int, r1: int, c0: int, c1: int) -> bool:
    """True when every block of a block-sparse layout the tile [r0, r1) x [c0, c1) meets is kept
    (the tile needs no masking)."""
    bm = shape.block_mask
    assert bm is not None
    return bool(bm.layout[r0 // bm.bq:(r1 - 1) // bm.bq + 1,
                          c0 // bm.bk:(c1 - 1) // bm.bk + 1].all())


def mask_block_tile(mem: TwoLevelMemory, S: FastTile, shape: Shape, qb: Block, kb: Block) -> None:
    """Mask the score tile of ``qb`` x ``kb`` by the shape's block-sparse layout, if needed."""
    if block_tile_is_full(shape, qb.start, qb.stop, kb.start, kb.stop):
        return
    bm = shape.block_mask
    assert bm is not None
    lay, bq, bk, r0, c0 = bm.layout, bm.bq, bm.bk, qb.start, kb.start
    mem.compute(lambda s: apply_block_mask(s, lay, bq, bk, r0, c0), S, writes=1)


def sparse_blocks(mem: TwoLevelMemory, total: int, size: int, kept: np.ndarray
                  ) -> Iterator[Block]:
    """The blocks of size ``size`` of [0, total) whose flag in ``kept`` is True, each through
    :meth:`TwoLevelMemory.blocks` (so it counts as a step), step by step."""
    for jj in np.flatnonzero(kept):
        j = int(jj)
        yield from mem.blocks(total, size, lo=j * size, hi=min(total, (j + 1) * size),
                              uniform=False)


def store_empty_rows(mem: TwoLevelMemory, Os: Sequence[SlowArray], qb: Block, d: int,
                     lse: Sequence[SlowArray] | None = None, cols: slice | None = None) -> None:
    """A query block no row of which sees a key: each head's output rows are 0 (``d`` words a
    row written, or the columns ``cols`` only) and, with ``lse``, their logsumexp -inf (one word
    a row)."""
    width = d if cols is None else cols.stop - cols.start
    for g, O in enumerate(Os):
        z = mem.alloc((qb.size, width), 0.0, label="O_i")
        mem.store(z, O, qb, cols)
        mem.free(z)
        if lse is not None:
            zl = mem.alloc((qb.size,), -np.inf, label="lse_i")
            mem.store(zl, lse[g], qb)
            mem.free(zl)


def row_sum_dot(D: np.ndarray, dO: np.ndarray, O: np.ndarray) -> None:
    """D = rowsum(dO ∘ O), the backward's row term."""
    D[:] = np.sum(dO * O, axis=1)


def tile_scores(T: np.ndarray, L: np.ndarray, *, scale: float,
                mask: tuple[int, int, int, int | None] | None) -> None:
    """T = exp(scale·T − L) row by row (masked entries and rows with L = -inf give 0)."""
    T *= scale
    if mask is not None:
        apply_causal_mask(T, *mask)
    T -= np.where(np.isfinite(L), L, np.inf)[:, None]
    np.exp(T, out=T)


def tile_dscores(T: np.ndarray, P: np.ndarray, D: np.ndarray) -> None:
    """dS = P ∘ (dP − D) on a chunk of rows (T holds dP)."""
    T -= D[:, None]
    T *= P


def row_dot(D: np.ndarray, a: np.ndarray, b: np.ndarray) -> None:
    """D += rowsum(a ∘ b)."""
    D += np.sum(a * b, axis=1)


def mask_of(shape: Shape, qb: Block, kb: Block) -> tuple[int, int, int, int | None] | None:
    """The (causal / window) mask arguments of tile (qb, kb), or None when it is fully visible."""
    if tile_needs_mask(shape, qb.start, kb.stop, qb.stop, kb.start):
        return (qb.start, kb.start, shape.offset, shape.window)
    return None
