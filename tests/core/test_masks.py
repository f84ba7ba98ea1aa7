"""core.masks: every closed form against brute force, exactly.

Two references, both independent of the closed forms' engine:

* pure-Python per-block / per-row loops written from the geometry
  (:func:`attnio.core.workload.kv_range` and :func:`~attnio.core.workload.q_range`), which
  also enumerate the met blocks by definition;
* the vectorised numpy per-block helpers the algorithms used before the closed forms (kept here,
  verbatim, as references: ``np_block_counts``, ``np_kv_ranges``, ``np_q_ranges``,
  ``np_meeting``, ``np_visible_hi``, ``np_covered``), fast enough for sizes up to a few 10^5.

The exhaustive grid and the large random sizes are marked slow; the default run draws 70
hypothesis examples per property (the helper that derived these forms ran 1,500 per property)
and a reduced exhaustive grid.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from attnio.core import masks as MK
from attnio.core.workload import Shape, kv_range, q_range

ALIGNS = ("bottom_right", "top_left")
SETTINGS = settings(max_examples=70, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# ---------------------------------------------------------------------------- references
def shape_of(Nq, Nkv, align, W, causal=True):
    return Shape(Nq, Nkv, 4, causal=causal, causal_align=align, window=W if causal else None)


def off_of(Nq, Nkv, align):
    return Nkv - Nq if align == "bottom_right" else 0


def brute_block_sums(total, B, Z, S, rng_of):
    """Per-block loop: ``rng_of(s, e) -> (lo, hi)``; the met blocks by enumeration."""
    blocks = seen = size_seen = count = width = size_count = size_width = mx = 0
    for s in range(0, total, B):
        e = min(total, s + B)
        lo, hi = rng_of(s, e)
        blocks += 1
        if hi > lo:
            met = [j for j in range(0, Z, S) if j < hi and min(Z, j + S) > lo]
            c = len(met)
            w = sum(min(Z, j + S) - j for j in met)
            seen += 1
            size_seen += e - s
            count += c
            width += w
            size_count += (e - s) * c
            size_width += (e - s) * w
            mx = max(mx, w)
    return MK.BlockSums(blocks, seen, size_seen, count, width, size_count, size_width), mx


def brute_query(Nq, Nkv, Br, Bc, align, W, causal=True):
    sh = shape_of(Nq, Nkv, align, W, causal)
    return brute_block_sums(Nq, Br, Nkv, Bc, lambda s, e: kv_range(sh, s, e))


def brute_key(Nq, Nkv, Br, Bc, align, W, causal=True):
    sh = shape_of(Nq, Nkv, align, W, causal)
    return brute_block_sums(Nkv, Bc, Nq, Br, lambda s, e: q_range(sh, s, e))


def brute_rows(Nq, Nkv, off, W):
    """Per-row loop: rows seeing >= 2 keys, their pairs, all pairs, K and V rows, rows >= 1."""
    vs, los, his = [], [], []
    for r in range(Nq):
        hi = min(Nkv, max(0, r + 1 + off))
        lo = 0 if W is None else min(Nkv, max(0, r + off - W + 1))
        vs.append(max(hi - lo, 0))
        los.append(lo)
        his.append(hi)

    def span(k):
        idx = [r for r in range(Nq) if vs[r] >= k]
        return max(his[r] for r in idx) - min(los[r] for r in idx) if idx else 0

    two = [v for v in vs if v >= 2]
    return MK.RowTotals(len(two), sum(two), sum(vs), span(2), span(1), sum(1 for v in vs if v >= 1))


# the numpy helpers the schedules' closed forms used before (O(N/B) arrays): references only
def np_block_counts(total, size):
    n = -(-total // size)
    starts = np.arange(n, dtype=np.int64) * size
    return starts, np.minimum(starts + size, total)


def np_visible_hi(shape, stops):
    if not shape.causal:
        return np.full_like(stops, shape.Nkv)
    return np.clip(stops + shape.offset, 0, shape.Nkv)


def np_covered(hi, size, total):
    nblk = -(-hi // size)
    return nblk, np.minimum(nblk * size, total)


def np_kv_ranges(shape, starts, stops):
    hi = np_visible_hi(shape, stops)
    lo = np.zeros_like(hi)
    if shape.causal and shape.window is not None:
        lo = np.clip(starts + shape.offset - shape.window + 1, 0, shape.Nkv)
    return lo, np.maximum(lo, hi)


def np_q_ranges(shape, starts, stops):
    if not shape.causal:
        return np.zeros_like(starts), np.full_like(starts, shape.Nq)
    lo = np.clip(starts - shape.offset, 0, shape.Nq)
    hi = np.full_like(starts, shape.Nq)
    if shape.window is not None:
        hi = np.clip(stops - 1 + shape.window - shape.offset, 0, shape.Nq)
    return lo, np.maximum(lo, hi)


def np_meeting(lo, hi, size, total):
    empty = hi <= lo
    first = lo // size
    last = np.maximum(hi - 1, 0) // size
    count = np.where(empty, 0, last - first + 1)
    width = np.where(empty, 0, np.minimum(total, (last + 1) * size) - first * size)
    return count, first * size, width


def _np_sums(total, B, Z, S, ranges):
    starts, stops = np_block_counts(total, B)
    lo, hi = ranges(starts, stops)
    cnt, _, w = np_meeting(lo, hi, S, Z)
    rows, seen = stops - starts, hi > lo
    return MK.BlockSums(len(starts), int(seen.sum()), int((rows * seen).sum()), int(cnt.sum()),
                        int(w.sum()), int((rows * cnt).sum()), int((rows * w).sum())), int(w.max())


def numpy_query(Nq, Nkv, Br, Bc, align, W, causal=True):
    sh = shape_of(Nq, Nkv, align, W, causal)
    return _np_sums(Nq, Br, Nkv, Bc, lambda a, b: np_kv_ranges(sh, a, b))


def numpy_key(Nq, Nkv, Br, Bc, align, W, causal=True):
    sh = shape_of(Nq, Nkv, align, W, causal)
    return _np_sums(Nkv, Bc, Nq, Br, lambda a, b: np_q_ranges(sh, a, b))


def numpy_covered(Nq, Nkv, Br, S, align, causal=True):
    sh = shape_of(Nq, Nkv, align, None, causal)
    starts, stops = np_block_counts(Nq, Br)
    r = stops - starts
    hi = np_visible_hi(sh, stops)
    n, w = np_covered(hi, S, Nkv)
    seen = hi > 0
    return (int(seen.sum()), int((r * seen).sum()), int(n.sum()), int(w.sum()),
            int((r * n).sum()), int((r * w).sum()))


def numpy_split(Nq, Nkv, Br, Bc, s, align, W, causal=True):
    """flash_decoding's per-split loop as it was before the closed form."""
    sh = shape_of(Nq, Nkv, align, W, causal)
    L = -(-Nkv // s)
    starts, stops = np_block_counts(Nq, Br)
    rows = stops - starts
    lo, hi = np_kv_ranges(sh, starts, stops)
    n_vis = np.zeros_like(rows)
    cov = np.zeros_like(rows)
    for p in range(-(-Nkv // L)):
        p0, p1 = p * L, min(Nkv, (p + 1) * L)
        slo, shi = np.maximum(lo, p0) - p0, np.minimum(hi, p1) - p0
        _, _, width = np_meeting(slo, shi, Bc, p1 - p0)
        n_vis += shi > slo
        cov += width
    seen = hi > lo
    return MK.SplitSums(len(rows), int(seen.sum()), int((seen * rows).sum()), int(n_vis.sum()),
                        int((n_vis * rows).sum()), int(cov.sum()))


def mq(Nq, Nkv, Br, Bc, off, W, causal=True):
    return (MK.query_block_sums(Nq, Nkv, Br, Bc, off, W, causal),
            MK.query_block_max_width(Nq, Nkv, Br, Bc, off, W, causal))


def mk(Nq, Nkv, Br, Bc, off, W, causal=True):
    return (MK.key_block_sums(Nq, Nkv, Br, Bc, off, W, causal),
            MK.key_block_max_width(Nq, Nkv, Br, Bc, off, W, causal))


sizes = st.integers(1, 90)
blocks = st.one_of(st.integers(1, 12), st.integers(1, 120))
windows = st.one_of(st.none(), st.integers(1, 12), st.integers(1, 200))
aligns = st.sampled_from(ALIGNS)


# ---------------------------------------------------------------------------- floor sums
@SETTINGS
@given(st.integers(0, 60), st.integers(1, 50), st.integers(-200, 200), st.integers(-500, 500))
def test_floor_sum_equals_the_sum(n, m, a, b):
    assert MK.floor_sum(n, m, a, b) == sum((a * i + b) // m for i in range(n))


def test_floor_sum_huge_arguments_are_exact():
    rnd = random.Random(7)
    for _ in range(60):
        n, m = rnd.randint(0, 2000), rnd.randint(1, 10**12)
        a, b = rnd.randint(-10**15, 10**15), rnd.randint(-10**18, 10**18)
        assert MK.floor_sum(n, m, a, b) == sum((a * i + b) // m for i in range(n))


def test_floor_sum_rejects_bad_m():
    with pytest.raises(ValueError):
        MK.floor_sum(3, 0, 1, 1)


@SETTINGS
@given(st.integers(-5, 40), st.integers(-5, 40), st.integers(0, 30), st.integers(-300, 300),
       st.integers(1, 200), st.integers(-3, 3), st.integers(1, 40))
def test_sum_floor_clip_equals_the_sum(i0, i1, a, b, Z, u, S):
    want = sum((min(max(a * i + b, 0), Z) + u) // S for i in range(i0, i1))
    assert MK.sum_floor_clip(i0, i1, a, b, Z, u, S) == want


# ---------------------------------------------------------------------------- scalar geometry
@SETTINGS
@given(sizes, sizes, aligns, windows, st.booleans(), st.data())
def test_scalar_ranges_match_the_workload(Nq, Nkv, align, W, causal, data):
    sh = shape_of(Nq, Nkv, align, W, causal)
    off = off_of(Nq, Nkv, align)
    r0 = data.draw(st.integers(0, Nq - 1))
    r1 = data.draw(st.integers(r0 + 1, Nq))
    c0 = data.draw(st.integers(0, Nkv - 1))
    c1 = data.draw(st.integers(c0 + 1, Nkv))
    assert MK.kv_block(Nkv, r0, r1, off, W, causal) == kv_range(sh, r0, r1)
    assert MK.q_block(Nq, c0, c1, off, W, causal) == q_range(sh, c0, c1)
    assert MK.Band.queries(sh).range(r0, r1) == kv_range(sh, r0, r1)
    assert MK.Band.keys(sh).range(c0, c1) == q_range(sh, c0, c1)


@SETTINGS
@given(st.integers(0, 120), st.integers(0, 120), st.integers(1, 40), st.integers(1, 120))
def test_meet_matches_the_vectorised_form(lo, hi, S, Z):
    lo, hi = min(lo, Z), min(hi, Z)
    c, f, w = np_meeting(np.array([lo]), np.array([hi]), S, Z)
    assert MK.meet(lo, hi, S, Z) == (int(c[0]), int(f[0]), int(w[0]))


# ---------------------------------------------------------------------------- block sums
@SETTINGS
@given(sizes, sizes, blocks, blocks, aligns, windows, st.booleans())
def test_query_block_sums_equal_brute_force(Nq, Nkv, Br, Bc, align, W, causal):
    got = mq(Nq, Nkv, Br, Bc, off_of(Nq, Nkv, align), W, causal)
    assert got == brute_query(Nq, Nkv, Br, Bc, align, W, causal)
    assert got == numpy_query(Nq, Nkv, Br, Bc, align, W, causal)


def test_single_key_sums_without_clipping_equal_brute_force():
    """The O(1) arithmetic series of single keys (S = 1, causal, no window, no row clipped:
    ``0 <= offset <= Nkv - Nq``) equal the per-block loop."""
    rng = random.Random(44)
    for _ in range(400):
        Nq = rng.randint(1, 60)
        Nkv = Nq + rng.choice([0, rng.randint(0, 40)])
        align = rng.choice(ALIGNS)
        Br = rng.choice([1, rng.randint(1, 12), rng.randint(1, Nq + 3)])
        got = mq(Nq, Nkv, Br, 1, off_of(Nq, Nkv, align), None, True)
        assert got == brute_query(Nq, Nkv, Br, 1, align, None), (Nq, Nkv, Br, align)


def test_unmasked_sums_in_o1_equal_brute_force_and_the_engine():
    """Unmasked (no lower end, no upper stop) the O(1) sums (every block sees [0, Z)) equal
    the per-block loop on small sizes and the general engine (_linear_sums) on large ones."""
    rng = random.Random(45)
    for _ in range(400):
        Nq, Nkv = rng.randint(1, 60), rng.randint(1, 60)
        Br, Bc = rng.randint(1, Nq + 3), rng.randint(1, Nkv + 3)
        got = mq(Nq, Nkv, Br, Bc, 0, None, False)
        assert got == brute_query(Nq, Nkv, Br, Bc, "bottom_right", None, False), (Nq, Nkv, Br, Bc)
    for _ in range(2000):
        total, B, Z, S = (rng.choice([rng.randint(1, 40), rng.randint(1, 10**6), 10**12])
                          for _ in range(4))
        n, rem, bl, bh = MK._affine(total, B, Z, S, None, None)
        seen, count, width = MK._linear_sums(n, B, bl, bh, Z, S, True)
        sums = [seen, B * seen, count, width, B * count, B * width]
        if rem:
            lo, hi = MK._last_block(total, B, Z, None, None)
            c, _, w = MK.meet(lo, hi, S, Z)
            v = int(hi > lo)
            sums = [a + b for a, b in zip(sums, (v, v * rem, c, w, c * rem, w * rem))]
        seen, size_seen, count, width, size_count, size_width = sums
        want = MK.BlockSums(n + (1 if rem else 0), seen, size_seen, count, width, size_count,
                            size_width)
        assert MK._block_sums(total, B, Z, S, None, None) == want, (total, B, Z, S)


@SETTINGS
@given(sizes, sizes, blocks, blocks, aligns, windows, st.booleans())
def test_key_block_sums_equal_brute_force(Nq, Nkv, Br, Bc, align, W, causal):
    got = mk(Nq, Nkv, Br, Bc, off_of(Nq, Nkv, align), W, causal)
    assert got == brute_key(Nq, Nkv, Br, Bc, align, W, causal)
    assert got == numpy_key(Nq, Nkv, Br, Bc, align, W, causal)


@SETTINGS
@given(sizes, sizes, blocks, blocks, aligns, st.booleans())
def test_covered_sums_equal_the_vectorised_form(Nq, Nkv, Br, S, align, causal):
    s = MK.covered_sums(Nq, Nkv, Br, S, off_of(Nq, Nkv, align), causal)
    assert (s.seen, s.size_seen, s.count, s.width, s.size_count, s.size_width) == \
        numpy_covered(Nq, Nkv, Br, S, align, causal)


@SETTINGS
@given(sizes, sizes, blocks, blocks, aligns, windows, st.booleans(), st.data())
def test_query_block_width_of_one_block(Nq, Nkv, Br, Bc, align, W, causal, data):
    sh = shape_of(Nq, Nkv, align, W, causal)
    i = data.draw(st.integers(0, -(-Nq // Br) - 1))
    lo, hi = kv_range(sh, i * Br, min(Nq, (i + 1) * Br))
    w = MK.meet(lo, hi, Bc, Nkv)[2]
    assert MK.query_block_width(Nq, Nkv, Br, Bc, off_of(Nq, Nkv, align), W, i, causal) == w


#: split_sums (the cheaper way) and each of its two ways forced
SPLIT_SUMS = {None: MK.split_sums, "splits": MK.split_sums_per_split,
              "blocks": MK.split_sums_per_block}


@SETTINGS
@given(sizes, sizes, blocks, blocks, st.integers(1, 90), aligns, windows, st.booleans(),
       st.sampled_from([None, "splits", "blocks"]))
def test_split_sums_equal_the_per_split_loop(Nq, Nkv, Br, Bc, s, align, W, causal, method):
    s = min(s, Nkv)
    got = SPLIT_SUMS[method](Nq, Nkv, Br, Bc, s, off_of(Nq, Nkv, align), W, causal)
    assert got == numpy_split(Nq, Nkv, Br, Bc, s, align, W, causal)


# ---------------------------------------------------------------------------- per-row totals
@SETTINGS
@given(sizes, sizes, aligns, windows)
def test_row_totals_equal_the_per_row_loop(Nq, Nkv, align, W):
    off = off_of(Nq, Nkv, align)
    got = MK.row_totals(Nq, Nkv, off, W)
    assert got == brute_rows(Nq, Nkv, off, W)
    rc = MK.row_counts(shape_of(Nq, Nkv, align, W))
    assert (rc.rows2, rc.pairs2, rc.pairs, rc.k_rows, rc.v_rows, rc.rows1) == tuple(got)


@SETTINGS
@given(st.integers(1, 400), st.integers(1, 400), st.integers(-500, 500), windows)
def test_row_totals_any_offset(Nq, Nkv, off, W):
    assert MK.row_totals(Nq, Nkv, off, W) == brute_rows(Nq, Nkv, off, W)


def test_row_counts_unmasked():
    rc = MK.row_counts(Shape(5, 7, 2))
    assert (rc.rows2, rc.pairs2, rc.pairs, rc.k_rows, rc.v_rows, rc.rows1) == (5, 35, 35, 7, 7, 5)
    one = MK.row_counts(Shape(5, 1, 2))  # one key: no row sees two
    assert (one.rows2, one.pairs2, one.pairs, one.k_rows, one.v_rows) == (0, 0, 5, 0, 1)


def test_row_totals_rejects_bad_window():
    with pytest.raises(ValueError):
        MK.row_totals(4, 4, 0, 0)


# ---------------------------------------------------------------------------- bands (bulk runs)
def brute_band(band, B, S):
    """Per-block: runs of (seen, size) and, per run, the full / short S-blocks met."""
    Z = band.Z
    out = []
    for i, s in enumerate(range(0, band.total, B)):
        e = min(band.total, s + B)
        lo, hi = band.range(s, e)
        met = [j for j in range(0, Z, S) if j < hi and min(Z, j + S) > lo] if hi > lo else []
        short = sum(1 for j in met if min(Z, j + S) - j < S)
        key = (hi > lo, e - s)
        if out and out[-1][0] == key:
            out[-1][2] += 1
            out[-1][3] += len(met) - short
            out[-1][4] += short
        else:
            out.append([key, i, 1, len(met) - short, short])
    return [(MK.Run(first, n, key[0]), (full, short)) for key, first, n, full, short in out]


@SETTINGS
@given(sizes, sizes, blocks, blocks, aligns, windows, st.booleans(), st.booleans())
def test_band_runs_and_visits_equal_brute_force(Nq, Nkv, B, S, align, W, causal, keys):
    sh = shape_of(Nq, Nkv, align, W, causal)
    band = MK.Band.keys(sh) if keys else MK.Band.queries(sh)
    want = brute_band(band, B, S)
    runs = band.runs(B)
    # consecutive runs may share (seen, size): compare after merging equal neighbours
    merged = []
    for r in runs:
        size = min(B, band.total - r.first * B)
        v = band.visits(B, r, S)
        if merged and merged[-1][0] == (r.seen, size):
            m = merged[-1]
            m[2] += r.blocks
            m[3] += v[0]
            m[4] += v[1]
        else:
            merged.append([(r.seen, size), r.first, r.blocks, v[0], v[1]])
    got = [(MK.Run(first, n, key[0]), (full, short)) for key, first, n, full, short in merged]
    assert got == want
    assert sum(r.blocks for r in runs) == -(-band.total // B)


# ---------------------------------------------------------------------------- exhaustive small
def _exhaustive(ns, windows_, brs, bcs):
    n = 0
    for Nq in ns:
        for Nkv in ns:
            for align in ALIGNS:
                off = off_of(Nq, Nkv, align)
                for W in windows_:
                    assert MK.row_totals(Nq, Nkv, off, W) == brute_rows(Nq, Nkv, off, W)
                    for Br in brs:
                        for Bc in bcs:
                            case = (Nq, Nkv, Br, Bc, align, W)
                            assert mq(Nq, Nkv, Br, Bc, off, W) == brute_query(*case), case
                            assert mk(Nq, Nkv, Br, Bc, off, W) == brute_key(*case), case
                            n += 2
    return n


def test_exhaustive_small_grid_reduced():
    assert _exhaustive(range(1, 7), (None, 1, 2, 5, 7), (1, 2, 3, 7), (1, 2, 4, 7)) > 5000


@pytest.mark.slow
def test_exhaustive_small_grid():
    """Every (Nq, Nkv, Br, Bc, alignment, window) with sizes <= 9: 145,152 block-sum cases."""
    assert _exhaustive(range(1, 10), (None, 1, 2, 3, 5, 9, 10, 30), (1, 2, 3, 4, 7, 9, 10, 16),
                       (1, 2, 3, 5, 8, 9, 12)) > 50000


EDGES = [
    # (Nq, Nkv, Br, Bc, W): Nq != Nkv both ways, Br/Bc = 1, Br > Nq, Bc > Nkv, W = 1, W >= Nkv
    (1, 1, 1, 1, None), (1, 1, 1, 1, 1), (1, 50, 1, 1, None), (50, 1, 1, 1, None),
    (50, 1, 64, 64, 1), (7, 100, 3, 10, 1), (100, 7, 3, 10, 1), (100, 7, 200, 3, 7),
    (100, 7, 3, 200, 8), (64, 64, 64, 64, 64), (64, 64, 64, 64, 65), (64, 64, 8, 8, 1000),
    (65, 63, 8, 8, None), (63, 65, 8, 8, None), (97, 31, 10, 6, 5), (31, 97, 10, 6, 5),
    (1000, 10, 7, 3, None), (10, 1000, 7, 3, None), (1000, 10, 7, 3, 4), (10, 1000, 7, 3, 4),
    (333, 333, 1, 1, 2), (333, 333, 1000, 1000, 2), (128, 4096, 16, 64, 256),
    (4096, 128, 16, 64, 256),
]


@pytest.mark.parametrize("align", ALIGNS)
@pytest.mark.parametrize("Nq,Nkv,Br,Bc,W", EDGES)
def test_edge_cases(Nq, Nkv, Br, Bc, W, align):
    off = off_of(Nq, Nkv, align)
    assert mq(Nq, Nkv, Br, Bc, off, W) == numpy_query(Nq, Nkv, Br, Bc, align, W)
    assert mk(Nq, Nkv, Br, Bc, off, W) == numpy_key(Nq, Nkv, Br, Bc, align, W)
    assert MK.row_totals(Nq, Nkv, off, W) == brute_rows(Nq, Nkv, off, W)
    for s in sorted({1, 2, 3, 16, min(Nkv, 200)}):
        if s <= Nkv:
            for method in (None, "splits", "blocks"):
                assert SPLIT_SUMS[method](Nq, Nkv, Br, Bc, s, off, W) == \
                    numpy_split(Nq, Nkv, Br, Bc, s, align, W)


def test_bottom_right_with_more_queries_than_keys_leaves_early_rows_blind():
    Nq, Nkv = 20, 5
    br = MK.row_totals(Nq, Nkv, Nkv - Nq)
    tl = MK.row_totals(Nq, Nkv, 0)
    assert br.rows1 == 5 and br.pairs == 15
    assert tl.rows1 == 20 and tl.pairs == 15 + 15 * 5
    q = MK.query_block_sums(Nq, Nkv, 4, 2, Nkv - Nq)
    assert q.seen == 2 and q.size_seen == 8  # blocks [12, 16) and [16, 20)


@pytest.mark.parametrize("seed", range(3))
def test_larger_sizes_against_numpy(seed):
    _large(seed)


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(3, 15))
def test_large_sizes_against_numpy(seed):
    _large(seed)


def _large(seed):
    rnd = random.Random(seed)
    Nq = rnd.choice([rnd.randint(1, 300_000), 262_144, 65_536 + rnd.randint(-3, 3)])
    Nkv = rnd.choice([Nq, rnd.randint(1, 300_000)])
    Br, Bc = rnd.randint(1, 4096), rnd.randint(1, 4096)
    W = rnd.choice([None, rnd.randint(1, 10), rnd.randint(1, 10_000), 4096])
    for align in ALIGNS:
        off = off_of(Nq, Nkv, align)
        assert mq(Nq, Nkv, Br, Bc, off, W) == numpy_query(Nq, Nkv, Br, Bc, align, W)
        assert mk(Nq, Nkv, Br, Bc, off, W) == numpy_key(Nq, Nkv, Br, Bc, align, W)
        s = rnd.choice([1, 2, 4, 8, 16, 37])
        assert MK.split_sums(Nq, Nkv, Br, Bc, s, off, W) == numpy_split(Nq, Nkv, Br, Bc, s,
                                                                          align, W)


def test_huge_sizes_are_exact_integers_and_consistent():
    """N = 10^9 (no reference can enumerate it): identities that must hold exactly."""
    N, W = 10**9, 4096
    for Br, Bc in ((128, 64), (251, 1), (64, 128), (1, 1), (999, 1001)):
        for off in (0,):
            q = MK.query_block_sums(N, N, Br, Bc, off, W)
            assert q.seen == q.blocks == -(-N // Br)
            assert q.size_seen == N
            assert MK.query_block_max_width(N, N, Br, Bc, off, W) <= min(
                N, ((Br + W - 2) // Bc + 2) * Bc)
            rt = MK.row_totals(N, N, off, W)
            assert rt.pairs == W * (W + 1) // 2 + (N - W) * W
            assert MK.row_totals(N, N, off).pairs == N * (N + 1) // 2
            assert q.width * Br >= rt.pairs  # flash2's branch-and-bound bound
