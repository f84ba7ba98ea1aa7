"""window_stream: sliding-window attention in the small-cache regime (stream tiling cut to the band).

It must give the float64 reference's output within 1e-10; count in compute mode, in bulk count
mode and step by step exactly its closed form; never exceed its footprint nor M; never fall below
an explicit bound; on hypothesis-drawn shapes: windows, both causal alignments, Nq != Nkv,
grouped-query heads, any tiling.  Each array's words are the derivation's sums, counted here by
brute force over the rows and keys; without a window it is stream_tiling word for word.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import attnio
from attnio.algorithms import window_stream as ws
from attnio.algorithms.stream_tiling import StreamTilingTiling
from attnio.core.reference import attention
from attnio.core.workload import Shape, cdiv, kv_range, q_range
from conftest import check_run_equals_closed_form

ALG = attnio.algorithms.get("window_stream")
T = ws.WindowStreamTiling
SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def workloads(draw):
    Nq, Nkv = draw(st.integers(1, 20)), draw(st.integers(1, 20))
    d = draw(st.integers(1, 5))
    causal = draw(st.sampled_from([True, "top_left", True, "top_left", False]))
    window = draw(st.sampled_from([None, 1, 2, 3, 5, 9, 30])) if causal else None
    kvh, g, batch = (draw(st.sampled_from(v)) for v in ([1, 2], [1, 2], [1, 2]))
    return Nq, Nkv, d, causal, window, batch, kvh * g, kvh


@SETTINGS
@given(w=workloads(), extra=st.integers(0, 400), seed=st.integers(0, 2**16),
       pick=st.integers(0, 10**6), sides=st.tuples(*(st.integers(1, 24),) * 4),
       free=st.booleans())
def test_output_and_counts_equal_closed_form(w, extra, seed, pick, sides, free):
    Nq, Nkv, d, causal, window, batch, heads, kvh = w
    shape = Shape.make(Nq, d, Nkv=Nkv, causal=causal, window=window, heads=heads,
                       kv_heads=kvh, batch=batch)
    M = ALG.min_M(shape) + extra
    cands = [t for t in ALG.candidate_tilings(shape, M) if ALG.footprint(shape, t) <= M]
    assert cands, "min_M promises a candidate"
    tiling = T(*sides) if free else cands[pick % len(cands)]
    M = max(M, ALG.footprint(shape, tiling))
    check_run_equals_closed_form("window_stream", shape, M, tiling, seed)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(w=workloads(), sides=st.tuples(*(st.integers(1, 24),) * 4))
def test_each_array_moves_the_derivations_sums(w, sides):
    """Q: d words per row of each key block's q_range; K: d per key of each Phase-1 block's
    kv_range; V: d per key of each Phase-2 block's kv_range; the scores A written once and read
    once per output slice: all counted here row by row and key by key."""
    Nq, Nkv, d, causal, window, *_ = w
    shape = Shape.make(Nq, d, Nkv=Nkv, causal=causal, window=window)
    t = T(*sides)
    qs = sum(np.subtract(*q_range(shape, c0, min(Nkv, c0 + t.Bc))[::-1])
             for c0 in range(0, Nkv, t.Bc))

    def ks(B):
        return sum(np.subtract(*kv_range(shape, r0, min(Nq, r0 + B))[::-1])
                   for r0 in range(0, Nq, B))

    H = sum(np.subtract(*kv_range(shape, r, r + 1)[::-1]) for r in range(Nq))
    cnt = attnio.run("window_stream", shape=shape, M=ALG.footprint(shape, t), mode="count",
                     tiling=t, bulk=False)
    pa = {k: (v.reads, v.writes) for k, v in cnt.io.per_array.items()}
    assert pa["Q"] == (d * qs, 0)
    assert pa["K"] == (d * ks(t.Br), 0)
    assert pa["V"] == (d * ks(t.Br2), 0)
    assert pa["A"] == (cdiv(d, t.Bd2) * H, H)
    assert pa["O"] == (0, Nq * d)
    assert H <= Nq * (window or Nkv)


@settings(max_examples=100, deadline=None)
@given(N=st.integers(1, 400), Nkv=st.integers(1, 400), d=st.integers(1, 40),
       causal=st.sampled_from([False, True, "top_left"]),
       sides=st.tuples(*(st.integers(1, 60),) * 4))
def test_without_a_window_it_is_stream_tiling_word_for_word(N, Nkv, d, causal, sides):
    shape = Shape.make(N, d, Nkv=Nkv, causal=causal)
    ours = ALG.cost(shape, T(*sides))
    theirs = attnio.algorithms.get("stream_tiling").cost(shape, StreamTilingTiling(*sides))
    assert (ours.io, ours.footprint) == (theirs.io, theirs.footprint)
    assert ALG.covered_by(shape) == "stream_tiling"
    assert ALG.covered_by(Shape.make(N, d, Nkv=Nkv, causal=True, window=8)) is None


def test_windowed_count_is_the_two_banded_matmuls():
    """N = 65,536, d = 128, W = 512, M = 4,096 (M < d²/4): about 4·N·W·d/√M + N·W + N·d, far
    below FlashAttention-2's streaming of the band; the planner picks it, below window_square."""
    N, d, W, M = 65536, 128, 512, 4096
    shape = Shape.make(N, d, causal=True, window=W)
    io = ALG.predicted_io(shape, M)
    ideal = 4 * N * W * d / M**0.5 + N * W + N * d
    assert ideal <= io.total <= 1.1 * ideal
    assert io.total < 0.6 * attnio.algorithms.get("flash2").predicted_io(shape, M).total
    p = attnio.plan(N=N, d=d, M=M, causal=True, window=W)
    assert p.chosen.algorithm == "window_stream"
    assert p.chosen.predicted.total == io.total
    assert io.total < attnio.algorithms.get("window_square").predicted_io(shape, M).total


def test_count_is_linear_in_N_for_a_fixed_window():
    totals = [ALG.predicted_io(Shape.make(N, 64, causal=True, window=256), 2048).total
              for N in (4096, 8192, 16384)]
    assert totals[2] - totals[1] == pytest.approx(2 * (totals[1] - totals[0]), rel=0.01)


@pytest.mark.parametrize("Nq,Nkv,align,W,sides", [
    (240, 240, "bottom_right", 37, (7, 5, 9, 3)), (301, 257, "top_left", 50, (12, 8, 6, 2)),
    (199, 260, "bottom_right", 16, (5, 7, 11, 4)), (180, 180, "bottom_right", 90, (9, 6, 8, 5))])
def test_bulk_classes_of_interior_blocks_count_as_step_by_step(Nq, Nkv, align, W, sides):
    """Long enough for interior blocks in several classes (Bc/gcd(Br, Bc) of them)."""
    shape = Shape(Nq, Nkv, 4, causal=True, causal_align=align, window=W)
    t = T(*sides)
    M = ALG.footprint(shape, t)
    bulk = attnio.run("window_stream", shape=shape, M=M, mode="count", tiling=t)
    step = attnio.run("window_stream", shape=shape, M=M, mode="count", tiling=t, bulk=False)
    pred = ALG.cost(shape, t).io
    assert (bulk.io.reads, bulk.io.writes) == (step.io.reads, step.io.writes) == (
        pred.reads, pred.writes)
    assert (bulk.io.steps, bulk.io.per_array, bulk.io.peak) == (
        step.io.steps, step.io.per_array, step.io.peak)


def test_windowed_count_at_a_billion_equals_the_closed_form():
    shape = Shape(10**9, 10**9 + 12345, 128, causal=True, window=4096, heads=2, kv_heads=1)
    t = ALG.default_tiling(shape, 4096)
    res = attnio.run("window_stream", shape=shape, M=4096, mode="count", tiling=t)
    pred = ALG.cost(shape, t).io
    assert (res.io.reads, res.io.writes) == (pred.reads, pred.writes)


def test_the_score_ring_is_narrow_under_a_window():
    shape = Shape.make(4096, 16, causal=True, window=100)
    t = T(32, 30, 32, 16)
    assert ws.ring_width(shape, 30) == 120  # ⌈100/30⌉·30
    assert ALG.slow_workspace(shape, t) == 4096 * 120
    assert ws.ring_width(Shape.make(64, 16, causal=True), 30) == 64  # no window: every key


def test_a_tiling_that_does_not_fit_is_refused_naming_it():
    shape = Shape.make(64, 8, causal=True, window=8)
    with pytest.raises(attnio.CapacityError):
        ALG.predicted_io(shape, 100, tiling=T(16, 16, 4, 4))
    with pytest.raises(attnio.ParameterError, match="tiling.Bd2"):
        ALG.predicted_io(shape, 10_000, tiling={"Br": 4, "Bc": 4, "Br2": 4, "Bd2": 0})


@pytest.mark.slow
def test_issue_shape_runs_and_equals_reference_and_closed_form():
    """The windowed small-cache run of issue 36 at a size compute mode takes in seconds (N =
    2,048, d = 64, W = 512, M = 4,096 = d²), and the count at N = 65,536, d = 128, M = 4,096."""
    rng = np.random.default_rng(36)
    Q, K, V = (rng.standard_normal((2048, 64)) for _ in range(3))
    res = attnio.run("window_stream", Q, K, V, M=4096, causal=True, window=512)
    assert np.abs(res.output - attention(Q, K, V, causal=True, window=512)).max() <= 1e-10
    shape = Shape.make(2048, 64, causal=True, window=512)
    assert res.io.total == ALG.cost(shape, res.tiling).io.total
    big = Shape.make(65536, 128, causal=True, window=512)
    cnt = attnio.run("window_stream", shape=big, M=4096, mode="count")
    assert cnt.io.total == ALG.predicted_io(big, 4096).total == 337_265_920
