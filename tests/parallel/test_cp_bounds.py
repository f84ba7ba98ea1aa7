"""attnio.parallel: the memory-dependent bound (Theorem 4) and the backward bounds, every
schedule (forward and backward) held above every bound at the local memory it uses (its
footprint, from the referee and in closed form); the grid's and window_ring's backward passes;
bad input on ``attnio cp``."""

from __future__ import annotations

import json
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import attnio.parallel as cp
from attnio.core.errors import ParameterError
from attnio.core.reference import attention_backward
from attnio.core.workload import Shape
from attnio.parallel import backward, bounds


@st.composite
def small(draw):
    P = draw(st.sampled_from([2, 3, 4, 6]))
    kv = draw(st.sampled_from([1, 2]))
    heads = kv * draw(st.sampled_from([1, 2]))
    Nq = 2 * P * draw(st.integers(1, 2))
    Nkv = draw(st.sampled_from([Nq, 2 * P * draw(st.integers(1, 2))]))
    causal = draw(st.sampled_from([False, "bottom_right", "top_left"]))
    window = draw(st.sampled_from([None, 2, 5])) if causal else None
    return Shape.make(d=draw(st.integers(1, 2)), Nq=Nq, Nkv=Nkv, heads=heads, kv_heads=kv,
                      batch=draw(st.integers(1, 2)), causal=causal, window=window), P


def _candidates(shape, P):
    for name in cp.names():
        for c in cp.mapspace(name, shape, P).candidates:
            yield name, c


def _every_bound(shape, P, L, bw):
    """Every theorem at local memory L (the largest is ``bound``'s value)."""
    b = bounds.bound(shape, P, memory=L, backward=bw).value
    assert b >= bounds.memory_bound(shape, P, L, backward=bw)
    assert b >= bounds.linear_bound(shape, P, backward=bw)
    assert b >= bounds.group_bound(shape, P, backward=bw)
    assert b >= int(bounds.busiest_bound(shape, P, backward=bw))
    return b


def test_referee_counts_the_memory_and_refuses_dropped_rows():
    from attnio.core.errors import ScheduleError
    from attnio.parallel.cluster import Cluster, Layout

    s = Shape(4, 4, 2)
    c = Cluster(s, Layout.sequence(s, 2))
    c.send(1, 0, "K", [0], [2, 3])
    c.send(1, 0, "V", [0], [2, 3])  # processor 0: 2 Q rows, 4 K and 4 V rows of 2 words
    c.drop(0, "K", [0], [2, 3])
    c.drop(0, "V", [0], [2, 3])
    with pytest.raises(ScheduleError, match="does not hold the K rows"):
        c.compute(0, [0], [0, 1], [2])
    c.send(1, 0, "K", [0], [2])  # held again: counted again, below the earlier peak
    assert c.mem == [2 * (2 + 2 + 2) + 2, 2 * 6] and c.peak == [2 * 10, 2 * 6]


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(small())
def test_footprints_equal_the_referee_and_schedules_sit_above_every_bound(case):
    shape, P = case
    for name, params in _candidates(shape, P):
        stats, _ = cp.execute(name, shape, P, params)
        fp = cp.footprint(name, shape, P, params)
        assert list(fp) == stats.memory, (name, params)
        assert stats.critical >= _every_bound(shape, P, max(fp), False), (name, params)
        cl = backward.BackwardCluster(shape, cp.get(name).layout(shape, P, params))
        backward.run_backward(cl, name, params)
        sent, received, work = cl.finish()
        c = backward.cost_backward(name, shape, P, params)
        assert (list(c.sent), list(c.received), list(c.work)) == (sent, received, work)
        fpb = cp.footprint(name, shape, P, params, backward=True)
        assert list(fpb) == cl.memory(), (name, params)
        assert c.words_per_device >= _every_bound(shape, P, max(fpb), True), (name, params)


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 1 << 12), st.integers(1, 64), st.integers(0, 5), st.integers(0, 3),
       st.sampled_from([False, True, "top_left"]), st.sampled_from([1, 2, 4, 8, 16, 64, 256]),
       st.sampled_from([None, 1, 100, 5000]))
def test_closed_forms_above_every_bound_large(n, d, lh, lk, causal, P, window):
    shape = Shape.make(n * 2 * P, d, heads=1 << lh, kv_heads=1 << min(lk, lh), causal=causal,
                       window=window if causal else None)
    for name, params in _candidates(shape, P):
        f = cp.cost(name, shape, P, params, work=False)
        assert f.words_per_device >= _every_bound(
            shape, P, max(cp.footprint(name, shape, P, params)), False), (name, params)
        b = backward.cost_backward(name, shape, P, params)
        assert b.words_per_device >= _every_bound(
            shape, P, max(cp.footprint(name, shape, P, params, backward=True)), True)


@pytest.mark.parametrize("name, shape, P, params", [
    ("grid", Shape.make(d=2, Nq=16, Nkv=16, heads=4, kv_heads=1, batch=2, causal="top_left",
                        window=5), 4, {"u": 2, "a": 2, "b": 1}),
    ("grid", Shape(12, 24, 3, heads=2, causal=True), 6, {"u": 1, "a": 2, "b": 3}),
    ("window_ring", Shape(32, 32, 2, heads=2, kv_heads=1, causal=True, window=6), 4, None),
])
def test_grid_and_window_ring_backward_gradients(name, shape, P, params):
    rng = np.random.default_rng(3)
    Q = rng.standard_normal((shape.batch, shape.heads, shape.Nq, shape.d))
    K = rng.standard_normal((shape.batch, shape.kv_heads, shape.Nkv, shape.d))
    V, dO = rng.standard_normal(K.shape), rng.standard_normal(Q.shape)
    (sent, received, work), grads = backward.execute_backward(name, shape, P, params,
                                                              data=(Q, K, V, dO))
    c = backward.cost_backward(name, shape, P, params)
    assert (list(c.sent), list(c.received), list(c.work)) == (sent, received, work)
    for got, want in zip(grads, attention_backward(Q, K, V, dO, causal=shape.mask,
                                                   window=shape.window)):
        assert np.abs(got - want).max() <= 1e-10


def test_backward_closed_forms_in_words():
    s = Shape(4096, 4096, 64, heads=4, kv_heads=2, causal=True, window=300)
    # window_ring: S = 2 blocks of 256 behind; 8·kv_heads·S·(N/P)·d words per device
    assert backward.cost_backward("window_ring", s, 16).words_per_device == 8 * 2 * 2 * 256 * 64
    g = Shape(4096, 4096, 64, heads=2)
    # grid 4 x 4: (b-1)·cq·H·(3d+2) + 4·(a-0)·ck·d·H_kv per direction, cq = ck = N/16
    c = backward.cost_backward("grid", g, 16, {"u": 1, "a": 4, "b": 4})
    assert c.words_per_device == 2 * (3 * 256 * 2 * (3 * 64 + 2) + 4 * 4 * 256 * 64 * 2)


def test_memory_bound_is_the_segment_argument():
    s = Shape(1 << 16, 1 << 16, 128)
    P, L0 = 256, bounds.initial_words(s, 256)
    assert L0 == 3 * 128 * 256  # one head: N/P query rows (d) and keys (2d)
    L = 2 * L0
    W = (1 << 16) ** 2  # unmasked: every row sees every key
    F = Fraction(L * L, 128 * 256)  # segment pairs: XY with d·X + 2d·Y <= 2L
    assert bounds.memory_bound(s, P, L) == 2 * L * (Fraction(W, P) / F - 1)
    vals = [bounds.memory_bound(s, P, k * L0) for k in (1, 2, 4, 8)]
    assert vals == sorted(vals, reverse=True) and vals[-1] == 0  # vacuous for large L
    assert bounds.bound(s, P, memory=L).theorem.startswith("Theorem 4")
    # backward: 2d + 2 words a query row in memory
    assert bounds.initial_words(s, P, backward=True) == (2 * 128 + 2 + 2 * 128) * 256
    with pytest.raises(ParameterError) as e:
        bounds.memory_bound(s, P, L0 - 1)
    assert e.value.param == "memory"


def test_backward_bounds_exceed_the_forward():
    for s, P in ((Shape(1 << 14, 1 << 14, 64), 16), (Shape(1 << 14, 1 << 14, 64, heads=32), 8),
                 (Shape(1 << 14, 1 << 14, 64, heads=8, kv_heads=2, causal=True), 64)):
        assert bounds.bound(s, P, backward=True).value > bounds.bound(s, P).value


# ---------------------------------------------------------------------- bad input, one line
def _cli(capsys, *argv):
    from attnio.cli.app import main

    rc = main(list(argv))
    out = capsys.readouterr()
    return rc, out.out, out.err


@pytest.mark.parametrize("argv, flag", [
    (["bound", "--N", "64", "--d", "8", "--P", "4", "--memory", "10"], "--memory"),
    (["bound", "--N", "64", "--d", "8", "--P", "4", "--memory", "0"], "--memory"),
    (["run", "--scheme", "ring", "--P", "0", "--N", "8", "--d", "2"], "--P"),
    (["run", "--scheme", "ring", "--P", "3", "--N", "8", "--d", "2"], "--N"),
    (["run", "--scheme", "ulysses", "--P", "4", "--N", "8", "--d", "2", "--heads", "2"],
     "--heads"),
    (["run", "--scheme", "ring", "--P", "2", "--N", "8", "--d", "2", "--params", "{x"],
     "--params"),
    (["run", "--scheme", "usp", "--P", "4", "--N", "16", "--d", "2", "--heads", "4",
      "--params", '{"u": 3}'], "--params"),
    (["run", "--scheme", "window_ring", "--P", "2", "--N", "8", "--d", "2"], "--window"),
])
def test_cp_bad_input_one_line_naming_the_flag(capsys, argv, flag):
    rc, out, err = _cli(capsys, "cp", *argv)
    assert rc == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and flag in err, err


def test_cli_cp_bound_memory_and_backward_json(capsys):
    rc, out, _ = _cli(capsys, "cp", "bound", "--N", "65536", "--d", "128", "--P", "256",
                      "--memory", "196608", "--backward", "--scheme", "grid", "--json")
    assert rc == 0
    got = json.loads(out)
    s = Shape(65536, 65536, 128)
    assert got["bound"] == bounds.bound(s, 256, memory=196608, backward=True).value
    c = backward.cost_backward("grid", s, 256, got["params"])
    assert got["words_per_device"] == c.words_per_device
    # the grid does not fit in L = 196,608 words, so Theorem 4 at that L does not bind it
    assert max(cp.footprint("grid", s, 256, got["params"], backward=True)) > 196608
    assert c.words_per_device >= bounds.bound(s, 256, backward=True).value
