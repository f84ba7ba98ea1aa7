"""attnio.parallel: the referee refuses what the model forbids; every scheme's closed form equals
the referee's counts (per processor: sent, received, work), its output equals the float64
reference, and no scheme moves fewer words than the proven bound (hypothesis, random shapes and
P: causal both alignments, windows, GQA, batch)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import attnio.parallel as cp
from attnio.core.errors import ParameterError, ScheduleError
from attnio.core.reference import attention
from attnio.core.workload import Shape
from attnio.parallel import bounds
from attnio.parallel.cluster import Cluster, Layout

SLOW = settings(max_examples=25, deadline=None,
                suppress_health_check=[HealthCheck.too_slow])


def _data(shape, seed=0):
    rng = np.random.default_rng(seed)
    Q = rng.standard_normal((shape.batch, shape.heads, shape.Nq, shape.d))
    K = rng.standard_normal((shape.batch, shape.kv_heads, shape.Nkv, shape.d))
    V = rng.standard_normal(K.shape)
    return Q, K, V


@st.composite
def cases(draw, max_rows=4):
    P = draw(st.sampled_from([1, 2, 3, 4, 6, 8]))
    kv = draw(st.sampled_from([1, 2, 4]))
    heads = kv * draw(st.sampled_from([1, 2, 4]))
    unit = 2 * P
    Nq = unit * draw(st.integers(1, max_rows))
    Nkv = draw(st.sampled_from([Nq, unit * draw(st.integers(1, max_rows))]))
    causal = draw(st.sampled_from([False, "bottom_right", "top_left"]))
    window = draw(st.sampled_from([None, 1, 3, 7])) if causal else None
    shape = Shape.make(d=draw(st.integers(1, 3)), Nq=Nq, Nkv=Nkv, heads=heads, kv_heads=kv,
                       batch=draw(st.integers(1, 2)), causal=causal, window=window)
    return shape, P


def _all_candidates(shape, P):
    for name in cp.names():
        for c in cp.mapspace(name, shape, P).candidates:
            yield name, c


# ---------------------------------------------------------------------- the referee
def test_referee_refuses_compute_on_rows_not_held():
    s = Shape(4, 4, 2)
    c = Cluster(s, Layout.sequence(s, 2))
    with pytest.raises(ScheduleError, match="does not hold the K rows"):
        c.compute(0, [0], [0, 1], [2])


def test_referee_refuses_sending_rows_not_held_and_double_counting():
    s = Shape(4, 4, 2)
    lay = Layout.sequence(s, 2)
    c = Cluster(s, lay)
    with pytest.raises(ScheduleError, match="does not hold Q row"):
        c.send(0, 1, "Q", [0], [3])
    c.compute(0, [0], [0, 1], [0, 1])
    with pytest.raises(ScheduleError, match="counted twice"):
        c.compute(0, [0], [0], [1])


def test_referee_refuses_unfinished_outputs():
    s = Shape(4, 4, 2)
    c = Cluster(s, Layout.sequence(s, 2))
    c.compute(0, [0], [0, 1], [0, 1])
    with pytest.raises(ScheduleError, match="not finished"):
        c.finish()


def test_referee_counts_links_and_partial_words():
    s = Shape(4, 4, 3)
    c = Cluster(s, Layout.sequence(s, 2))
    c.send(1, 0, "K", [0], [2, 3])
    c.send(1, 0, "V", [0], [2, 3])
    c.compute(0, [0], [0, 1], [0, 1, 2, 3])
    c.send(0, 1, "K", [0], [0, 1])
    c.send(0, 1, "V", [0], [0, 1])
    c.compute(1, [0], [2, 3], [0, 1, 2, 3])
    st_ = c.finish()
    assert st_.links == {(1, 0): 12, (0, 1): 12}
    assert st_.total == 24 and st_.critical == 24 and st_.work == [8, 8]


def test_layouts_cover_the_sequence():
    s = Shape(16, 16, 1)
    for kind in ("contiguous", "zigzag", "striped"):
        lay = Layout.sequence(s, 4, kind)
        assert sorted(np.bincount(lay.q_owner[0])) == [4, 4, 4, 4]
    assert Layout.sequence(s, 4, "zigzag").q_rows(0).tolist() == [0, 1, 14, 15]
    assert Layout.sequence(s, 4, "striped").q_rows(1).tolist() == [1, 5, 9, 13]
    with pytest.raises(ParameterError, match="cover"):
        Layout(2, np.array([[0, 2]]), np.array([[0, 1]]))


def test_head_sharded_layout_needs_no_words():
    s = Shape(8, 8, 2, heads=4, kv_heads=2, causal=True)
    lay = Layout.heads(s, 2)
    assert lay.q_owner[:, 0].tolist() == [0, 0, 1, 1] and lay.kv_owner[:, 0].tolist() == [0, 1]
    c = Cluster(s, lay)
    for p in (0, 1):
        c.compute(p, [2 * p, 2 * p + 1], range(8), range(8))
    st_ = c.finish()
    assert st_.critical == 0 and st_.work == [72, 72]


def test_referee_refuses_large_shapes_before_allocating():
    s = Shape(1 << 14, 1 << 14, 2, heads=8)
    with pytest.raises(ParameterError, match="closed form"):
        Cluster(s, Layout.sequence(s, 2))


# ---------------------------------------------------------------------- closed forms = referee
@SLOW
@given(cases())
def test_closed_forms_equal_the_referee_and_outputs_the_reference(case):
    shape, P = case
    data = _data(shape)
    ref = attention(*data, causal=shape.mask, window=shape.window)
    for name, params in _all_candidates(shape, P):
        stats, out = cp.execute(name, shape, P, params, data=data)
        c = cp.cost(name, shape, P, params)
        assert list(c.sent) == stats.sent, (name, params)
        assert list(c.received) == stats.received, (name, params)
        assert list(c.work) == stats.work, (name, params)
        assert c.words_per_device == stats.critical and c.total == stats.total
        assert np.abs(out - ref).max() <= 1e-10, (name, params)


@settings(max_examples=60, deadline=None)
@given(cases(max_rows=64))
def test_no_scheme_below_the_bound(case):
    shape, P = case
    b = cp.bound(shape, P).value
    assert b >= 0
    for name, params in _all_candidates(shape, P):
        assert cp.cost(name, shape, P, params, work=False).words_per_device >= b, (name, params)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 1 << 12), st.integers(1, 64), st.integers(0, 5), st.integers(0, 3),
       st.sampled_from([False, True, "top_left"]), st.sampled_from([1, 2, 4, 8, 16, 64]),
       st.sampled_from([None, 1, 100, 5000]))
def test_no_scheme_below_the_bound_large(n, d, lh, lk, causal, P, window):
    kv = 1 << min(lk, lh)
    shape = Shape.make(n * 2 * P, d, heads=1 << lh, kv_heads=kv, causal=causal,
                       window=window if causal else None)
    b = cp.bound(shape, P).value
    for name, params in _all_candidates(shape, P):
        assert cp.cost(name, shape, P, params, work=False).words_per_device >= b


@SLOW
@given(cases())
def test_backward_closed_forms_equal_the_referee_and_gradients_the_reference(case):
    from attnio.core.reference import attention_backward
    from attnio.parallel import backward

    shape, P = case
    Q, K, V = _data(shape)
    dO = np.random.default_rng(1).standard_normal(Q.shape)
    ref = attention_backward(Q, K, V, dO, causal=shape.mask, window=shape.window)
    b = cp.bound(shape, P).value
    for name in backward.SCHEMES:
        for params in cp.mapspace(name, shape, P).candidates:
            (sent, received, work), grads = backward.execute_backward(
                name, shape, P, params, data=(Q, K, V, dO))
            c = backward.cost_backward(name, shape, P, params)
            assert (list(c.sent), list(c.received), list(c.work)) == (sent, received, work)
            assert c.words_per_device >= b
            for got, want in zip(grads, ref):
                assert np.abs(got - want).max() <= 1e-10, (name, params)


def test_planner_backward_adds_the_passes():
    from attnio.parallel import backward
    from attnio.parallel.planner import plan

    s = Shape(4096, 4096, 64, heads=8, kv_heads=2, causal=True)
    p = plan(s, 8, backward=True)
    best = min(cp.cost(n, s, 8, c, work=False).words_per_device
               + backward.cost_backward(n, s, 8, c).words_per_device
               for n in backward.SCHEMES for c in cp.mapspace(n, s, 8).candidates)
    assert p.words_per_device == best and p.bound <= best
    assert p.bound >= cp.bound(s, 8).value


def test_backward_refuses_unknown_schemes():
    from attnio.parallel import backward

    assert set(backward.SCHEMES) == set(cp.names())  # every scheme has its backward now
    with pytest.raises(ParameterError) as e:
        backward.cost_backward("carousel", Shape(16, 16, 2), 4)
    assert e.value.param == "scheme"


def test_work_is_balanced_by_zigzag_and_ulysses():
    s = Shape(64, 64, 2, causal=True)
    ring = cp.cost("ring", s, 4).work
    zz = cp.cost("zigzag", s, 4).work
    assert ring[-1] > 4 * ring[0]
    assert len(set(zz)) == 1 and sum(zz) == sum(ring)
    s4 = Shape(64, 64, 2, heads=4, causal=True)
    assert len(set(cp.cost("ulysses", s4, 4).work)) == 1


def test_closed_forms_in_words():
    s = Shape(1024, 1024, 64, heads=8, kv_heads=2)
    # ring: 4·kv_heads·d·N·(P-1)/P; Ulysses: 2·d·(P-1)/P·(2·N·H/P + 2·N·K_P)
    assert cp.cost("ring", s, 4).words_per_device == 4 * 2 * 64 * 1024 * 3 // 4
    assert cp.cost("ulysses", s, 2).words_per_device == 2 * 64 * 1 * (2 * 1024 * 8 // 2
                                                                      + 2 * 1024 * 1) // 2


def test_window_ring_stops_after_the_window():
    s = Shape(1 << 12, 1 << 12, 8, heads=2, causal=True, window=300)
    w = cp.cost("window_ring", s, 16)  # blocks of 256 keys: 2 behind
    assert w.words_per_device == 4 * 2 * 2 * 256 * 8
    assert w.work == cp.cost("ring", s, 16).work
    assert not cp.mapspace("window_ring", Shape(64, 64, 2, causal=True), 4).supported
    assert not cp.mapspace("window_ring", Shape.make(d=2, Nq=16, Nkv=64, causal=True, window=4),
                           4).supported  # bottom-right, Nq < Nkv: a later block is needed


# ---------------------------------------------------------------------- mapspace reasons
def test_mapspace_reasons_name_the_parameter():
    ms = cp.mapspace("ulysses", Shape(64, 64, 2, heads=4), 8)
    assert not ms.supported and ms.reasons[0][0] == "heads"
    ms = cp.mapspace("ulysses", Shape(64, 64, 2, heads=8, kv_heads=1), 8)
    assert ms.supported  # one key/value head, replicated
    ms = cp.mapspace("ring", Shape(100, 100, 2), 3)
    assert ms.reasons[0][0] == "N"
    with pytest.raises(ParameterError) as e:
        cp.cost("zigzag", Shape(24, 24, 2), 8)
    assert e.value.param == "N"
    with pytest.raises(ParameterError) as e:
        cp.cost("ring", Shape(8, 8, 2), 0)
    assert e.value.param == "P"


# ---------------------------------------------------------------------- the bounds
def test_bound_orders():
    N, d = 1 << 16, 128
    # h >= P: of order N·d·h/P (whole heads); Ulysses within a small factor
    s = Shape(N, N, d, heads=64)
    for P in (8, 64):
        b = cp.bound(s, P).value
        u = cp.cost("ulysses", s, P, work=False).words_per_device
        assert b >= N * d * 64 / P and u / b < 2
    # h = 1: of order N·d/√P (the busiest processor's rectangle)
    s1 = Shape(N, N, d)
    b16, b256 = cp.bound(s1, 16).value, cp.bound(s1, 256).value
    assert 3.0 < b16 / b256 < 5.0
    assert bounds.bound(Shape(N, N, d), 1).value == 0


# ---------------------------------------------------------------------- the planner
def test_planner_picks_the_least_words_and_reports_the_ratio():
    from attnio.parallel.planner import plan

    s = Shape(4096, 4096, 64, heads=32, kv_heads=8, causal=True)
    for P in (1, 2, 8, 64):
        p = plan(s, P)
        every = [cp.cost(n, s, P, c, work=False).words_per_device
                 for n, c in _all_candidates(s, P)]
        assert p.words_per_device == min(every)
        assert p.bound == cp.bound(s, P).value <= p.words_per_device
        assert p.ratio is None or p.ratio >= 1
    assert plan(Shape(4096, 4096, 64, heads=1), 1).words_per_device == 0
    assert plan(s, 8, "ring").scheme == "ring"
    with pytest.raises(ParameterError) as e:
        plan(Shape(64, 64, 2, heads=4), 8, "ulysses")
    assert e.value.param == "heads"


def test_planner_regimes():
    from attnio.parallel.planner import plan

    N, d = 1 << 16, 128
    assert plan(Shape(N, N, d, heads=64), 8).scheme == "ulysses"  # heads >= P
    assert plan(Shape(N, N, d, heads=1), 64).scheme == "grid"  # one head: the 2-D grid


def test_time_estimate_and_planning_by_time():
    from attnio.hardware import devices
    from attnio.parallel.planner import plan
    from attnio.parallel.timing import LINKS, predict

    s = Shape(1 << 14, 1 << 14, 128, heads=8, kv_heads=2, causal=True)
    c = cp.cost("ring", s, 8)
    t = predict(s, c, "ib-ndr", "h100", "bf16")
    assert t["comm_s"] == max(c.sent) * 2 / LINKS["ib-ndr"].bytes_per_s
    assert t["compute_s"] == 4 * 128 * max(c.work) / devices.get("h100").flops("bf16")
    assert t["time_s"] == max(max(max(c.sent) * 2 / 50e9, 4 * 128 * w / devices.get(
        "h100").flops("bf16")) for w in c.work)
    p = plan(s, 8, link="ib-ndr")
    best = min(predict(s, cp.cost(n, s, 8, prm), "ib-ndr")["time_s"]
               for n, prm in _all_candidates(s, 8))
    assert p.time["time_s"] == best
    with pytest.raises(ParameterError) as e:
        plan(s, 8, link="carrier-pigeon")
    assert e.value.param == "link"


# ---------------------------------------------------------------------- the command line
def _cli(capsys, *argv):
    from attnio.cli.app import main

    rc = main(list(argv))
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_cli_cp_plan_json(capsys):
    import json

    rc, out, _ = _cli(capsys, "cp", "plan", "--N", "4096", "--d", "64", "--heads", "8",
                      "--kv-heads", "2", "--causal", "--P", "4", "--json")
    assert rc == 0
    got = json.loads(out)
    assert {"scheme", "words_per_device", "total_words", "bound", "ratio"} <= set(got)
    shape = Shape(4096, 4096, 64, heads=8, kv_heads=2, causal=True)
    c = cp.cost(got["scheme"], shape, 4, got["params"], work=False)
    assert got["words_per_device"] == c.words_per_device and got["total_words"] == c.total
    assert got["bound"] == cp.bound(shape, 4).value
    rc, out, _ = _cli(capsys, "cp", "bound", "--N", "4096", "--d", "64", "--P", "4",
                      "--scheme", "ring", "--json")
    assert rc == 0 and json.loads(out)["bound"] == cp.bound(Shape(4096, 4096, 64), 4).value


@pytest.mark.parametrize("argv, flag", [
    (["--P", "0"], "--P"),
    (["--P", "8", "--scheme", "ulysses", "--heads", "4"], "--heads"),
    (["--P", "8", "--scheme", "ulysses", "--heads", "8", "--kv-heads", "8", "--N", "60"], "--N"),
    (["--P", "3", "--N", "100"], "--N"),
    (["--P", "8", "--scheme", "zigzag", "--N", "24"], "--N"),
    (["--P", "4", "--scheme", "nope"], "--scheme"),
    (["--P", "8", "--heads", "8", "--kv-heads", "3"], "--kv-heads"),
    (["--P", "2", "--link", "smoke"], "--link"),
])
def test_cli_cp_bad_input_one_line_naming_the_flag(capsys, argv, flag):
    rc, out, err = _cli(capsys, "cp", "plan", "--N", "64", "--d", "8", *argv)
    assert rc == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and flag in err, err


# ---------------------------------------------------------------------- the real run (torchrun)
def _torchrun_case(shape, P, scheme, params=None, backward=False):
    pytest.importorskip("torch")
    from attnio.parallel.distributed import launch

    res = launch(shape, P, scheme, params, backward=backward)
    assert res["measured_words"] == res["predicted_words"], res
    assert res["measured_sent"] == res["predicted_sent"], res
    assert res["max_abs_err"] <= 1e-5, res
    if backward:
        assert res["measured_words_backward"] == res["predicted_words_backward"], res
        assert res["max_abs_err_grad"] <= 1e-4, res
    return res


def test_torchrun_ring_counts_equal_the_closed_form_gqa_causal():
    _torchrun_case(Shape(16, 16, 4, heads=4, kv_heads=2, causal=True), 2, "ring", backward=True)


@pytest.mark.slow  # the fast suite runs the P = 2 ring cases; the grid and P = 3, 4 here
def test_torchrun_grid_three_ranks():
    _torchrun_case(Shape(12, 12, 3, heads=2, batch=2), 3, "grid", {"u": 1, "a": 1, "b": 3},
                   backward=True)


@pytest.mark.slow
@pytest.mark.parametrize("shape, scheme, params", [
    (Shape(18, 18, 2, heads=3, kv_heads=1, causal="top_left"), "zigzag", None),
])
def test_torchrun_three_ranks_backward(shape, scheme, params):
    _torchrun_case(shape, 3, scheme, params, backward=True)


@pytest.mark.slow
@pytest.mark.parametrize("shape, scheme, params", [
    (Shape(32, 32, 4, heads=4, kv_heads=2, causal="top_left", window=5), "usp",
     {"u": 2, "ring": "zigzag"}),
    (Shape(16, 16, 4, heads=4, kv_heads=1), "ulysses", None),
    (Shape(32, 32, 2, heads=2, causal=True), "zigzag", None),
    (Shape(16, 24, 2, heads=2, causal=True), "striped", None),
    (Shape(16, 16, 2, heads=4, kv_heads=2, causal=True), "grid", {"u": 2, "a": 2, "b": 1}),
    (Shape(16, 16, 2, heads=1, causal=True), "grid", {"u": 1, "a": 2, "b": 2}),
    (Shape(32, 32, 2, heads=2, kv_heads=1, causal=True, window=6), "window_ring", None),
])
def test_torchrun_four_ranks(shape, scheme, params):
    from attnio.parallel.backward import SCHEMES

    _torchrun_case(shape, 4, scheme, params, backward=scheme in SCHEMES)


def test_cp_run_without_torchrun_is_one_line(capsys, monkeypatch):
    import shutil

    monkeypatch.setattr(shutil, "which", lambda *a, **k: None)
    rc, out, err = _cli(capsys, "cp", "run", "--scheme", "ring", "--P", "2", "--N", "8",
                        "--d", "2")
    assert rc == 2 and "torchrun is not installed" in err and len(err.strip().splitlines()) == 1
