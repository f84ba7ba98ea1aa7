"""window_cache: sliding-window attention with the band's K/V rows cached across query blocks.

It must give the float64 reference's output within 1e-10; count in compute mode, in bulk count
mode and step by step exactly its closed form (the cached one, or FlashAttention-2's when the
band is streamed); never exceed its footprint nor M; never fall below an explicit bound; on
hypothesis-drawn shapes: windows, both causal alignments, Nq != Nkv, grouped-query heads.  And
the issue's example: N = 4096, d = 64, W = 512, causal, M = 70,000 moves the trivial bound.
"""

from __future__ import annotations

import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import attnio
from attnio.algorithms import window_cache as wc
from attnio.core.workload import Shape, kv_range
from conftest import check_run_equals_closed_form

ALG = attnio.algorithms.get("window_cache")
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def workloads(draw):
    Nq, Nkv = draw(st.integers(1, 24)), draw(st.integers(1, 24))
    d = draw(st.integers(1, 5))
    causal = draw(st.sampled_from([True, "top_left", True, "top_left", False]))
    window = draw(st.sampled_from([None, 1, 2, 3, 5, 9, 30])) if causal else None
    kvh, g, batch = (draw(st.sampled_from(v)) for v in ([1, 2], [1, 2, 3], [1, 2]))
    return Nq, Nkv, d, causal, window, batch, kvh * g, kvh


def _cached_tilings(shape, M):
    return [t for t in ALG.candidate_tilings(shape, M)
            if t.cache and ALG.footprint(shape, t) <= M]


@SETTINGS
@given(w=workloads(), extra=st.integers(0, 3000), seed=st.integers(0, 2**16),
       pick=st.integers(0, 10**6), cache=st.booleans())
def test_output_and_counts_equal_closed_form(w, extra, seed, pick, cache):
    Nq, Nkv, d, causal, window, batch, heads, kvh = w
    shape = Shape.make(Nq, d, Nkv=Nkv, causal=causal, window=window, heads=heads,
                       kv_heads=kvh, batch=batch)
    M = ALG.min_M(shape) + extra
    cands = [t for t in ALG.candidate_tilings(shape, M) if ALG.footprint(shape, t) <= M]
    assert cands, "min_M promises a candidate"
    pool = [t for t in cands if t.cache == cache] or cands
    tiling = pool[pick % len(pool)]
    check_run_equals_closed_form("window_cache", shape, M, tiling, seed)


@SETTINGS
@given(w=workloads(), extra=st.integers(0, 3000))
def test_cached_reads_each_seen_key_once(w, extra):
    """Cached: K and V are read once per key some query block sees (their union, one interval),
    Q once per row of a block that sees a key; the words match the simulator's per-array count."""
    Nq, Nkv, d, causal, window, batch, heads, kvh = w
    shape = Shape.make(Nq, d, Nkv=Nkv, causal=causal, window=window)
    M = ALG.min_M(shape) + extra
    for t in _cached_tilings(shape, M)[:3]:
        seen = [kv_range(shape, r0, min(Nq, r0 + t.Br)) for r0 in range(0, Nq, t.Br)]
        keys = set().union(*(range(lo, hi) for lo, hi in seen))
        rows = sum(min(Nq, r0 + t.Br) - r0 for r0, (lo, hi) in zip(range(0, Nq, t.Br), seen)
                   if hi > lo)
        cnt = attnio.run("window_cache", shape=shape, M=M, mode="count", tiling=t, bulk=False)
        pa = {k: (v.reads, v.writes) for k, v in cnt.io.per_array.items()}
        assert pa["K"] == pa["V"] == (d * len(keys), 0)
        assert pa["Q"] == (d * rows, 0)
        assert max(keys) - min(keys) + 1 == len(keys)  # one interval


def test_issue_example_moves_the_trivial_bound_and_the_planner_picks_it():
    shape = Shape.make(4096, 64, causal=True, window=512)
    M = 70_000
    io = ALG.predicted_io(shape, M)
    assert io.total == 4 * 4096 * 64 == 1_048_576
    t = ALG.default_tiling(shape, M)
    assert t.cache and ALG.footprint(shape, t) <= M
    cnt = attnio.run("window_cache", shape=shape, M=M, mode="count")
    assert (cnt.io.reads, cnt.io.writes) == (io.reads, io.writes)
    p = attnio.plan(N=4096, d=64, M=M, causal=True, window=512)
    assert p.chosen.algorithm == "window_cache"
    assert p.chosen.predicted.total <= 1.05 * 1_048_576


def test_issue_example_Br16_Bc28_fills_M_exactly():
    shape = Shape.make(4096, 64, causal=True, window=512)
    t = wc.WindowCacheTiling(16, 28)
    assert wc.capacity(shape, 16) == 512 + 16 - 1
    assert ALG.footprint(shape, t) == 70_000
    assert ALG.predicted_io(shape, 70_000, tiling=t).total == 1_048_576


def test_band_that_does_not_fit_streams():
    """M below the ring's need: only the streamed tilings fit, and they count FlashAttention-2's."""
    shape = Shape.make(4096, 64, causal=True, window=512)
    M = 20_000
    t = ALG.default_tiling(shape, M)
    assert not t.cache
    f2 = attnio.algorithms.get("flash2")
    from attnio.algorithms.flash2 import Flash2Tiling
    assert ALG.cost(shape, t).io == f2.cost(shape, Flash2Tiling(t.Br, t.Bc)).io
    assert ALG.predicted_io(shape, M).total > 1_048_576


@pytest.mark.parametrize("align", ["bottom_right", "top_left"])
def test_count_at_a_billion_is_bulk(align):
    shape = Shape(10**9, 10**9 + 12345, 128, causal=True, causal_align=align, window=4096,
                  heads=8, kv_heads=2)
    M = 4 * 4096 * 128
    t = ALG.default_tiling(shape, M)
    assert t.cache
    t0 = time.process_time()
    res = attnio.run("window_cache", shape=shape, M=M, mode="count", tiling=t)
    assert time.process_time() - t0 < 5.0  # generous: milliseconds in practice
    pred = ALG.cost(shape, t).io
    assert (res.io.reads, res.io.writes) == (pred.reads, pred.writes)


def test_bad_tiling_cache_flag():
    shape = Shape.make(64, 8, causal=True, window=8)
    with pytest.raises(attnio.ParameterError, match="tiling.cache"):
        ALG.predicted_io(shape, 10_000, tiling={"Br": 4, "Bc": 4, "cache": "yes"})


def test_capacity_without_a_window_is_the_last_blocks_band():
    """Without a window the ring's capacity is O(1), the last query block's band: equal to the
    widest band over every block (:func:`masks.query_block_max_width`, and a walk on small
    shapes) for both causal alignments and any Br."""
    import random

    from attnio.core import masks

    rng = random.Random(21)
    for _ in range(3000):
        Nq = rng.choice([rng.randint(1, 40), rng.randint(1, 10**6)])
        Nkv = rng.choice([Nq, rng.randint(1, 40), rng.randint(1, 10**6)])
        shape = Shape.make(Nq, 4, Nkv=Nkv, causal=rng.choice([True, "top_left"]))
        Br = rng.choice([1, 2, rng.randint(1, 100), rng.randint(1, Nq), Nq + 5])
        B = min(Br, Nq)
        want = masks.query_block_max_width(Nq, Nkv, B, 1, shape.offset, None)
        assert wc.capacity(shape, Br) == want
        if Nq <= 40:
            assert want == max(max(0, hi - lo) for lo, hi in
                               (kv_range(shape, r, min(Nq, r + B)) for r in range(0, Nq, B)))
