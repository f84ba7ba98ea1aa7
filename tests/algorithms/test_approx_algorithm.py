"""approx_poly on the simulator: error within its guarantee, counts = closed form, near-linear I/O."""

from __future__ import annotations

import json
import math
import warnings

import numpy as np
import pytest

import attnio
from attnio import reference
from attnio.algorithms.approx_poly import approx_tilings
from attnio.approx.radius import UnboundedWarning
from attnio.bounds.approximate import approx_w_stationary
from attnio.cli import main as cli_main
from attnio.core.errors import ParameterError

ALG = attnio.algorithms.get("approx_poly")


def bounded(Nq, Nkv, d, B, seed=0):
    rng = np.random.default_rng(seed)
    return rng.uniform(-B, B, (Nq, d)), rng.uniform(-B, B, (Nkv, d)), rng.standard_normal((Nkv, d))


def test_registered_as_approximate():
    assert not ALG.exact and "approx_poly" in attnio.algorithms.names()


CASES = [  # Nq, Nkv, d, M, causal, tiling
    (120, 120, 4, 100_000, False, {"eps": 1e-3, "entry_bound": 0.8}),
    (120, 120, 4, 400, False, {"eps": 1e-3, "entry_bound": 0.8}),  # r-blocked
    (77, 130, 4, 100_000, True, {"eps": 1e-4, "entry_bound": 0.8}),
    (130, 77, 4, 600, True, {"eps": 1e-4, "entry_bound": 0.8}),
    (96, 96, 3, 5_000, True, {"eps": 1e-3, "entry_bound": 1.0, "variant": "taylor", "Bn": 7}),
    (50, 64, 6, 30_000, False, {"eps": 1e-2}),  # entry bound and radius from the data
]


@pytest.mark.parametrize("Nq,Nkv,d,M,causal,tiling", CASES)
def test_output_within_guaranteed_error_and_counts_equal_closed_form(Nq, Nkv, d, M, causal, tiling):
    Q, K, V = bounded(Nq, Nkv, d, tiling.get("entry_bound", 0.9), seed=Nq + M)
    res = attnio.run("approx_poly", Q, K, V, M=M, causal=causal, tiling=tiling)
    t = res.tiling
    err = float(np.abs(res.output - reference.attention(Q, K, V, causal=causal)).max())
    bound = t.error_bound_for(V)
    print(f"Nq={Nq} Nkv={Nkv} d={d} M={M} causal={causal}: degree {t.degree}, r={t.r}, "
          f"{t.r_blocks} block(s); measured {err:.2e} <= guaranteed {bound:.2e}")
    assert err <= bound
    assert t.kernel_error <= t.eps and t.r == math.comb(d + t.degree, t.degree)
    assert res.io.peak <= M
    pred = ALG.predicted_io((Nq, Nkv, d), M, tiling=t, causal=causal)
    for bulk in (True, False):
        c = attnio.run("approx_poly", shape=(Nq, Nkv, d), M=M, mode="count", causal=causal,
                       tiling=t, bulk=bulk)
        assert (c.io.reads, c.io.writes) == (res.io.reads, res.io.writes) == (pred.reads, pred.writes)
    assert res.io.total >= approx_w_stationary(N=Nq, Nkv=Nkv, d=d, M=M, r=t.r).value or Nkv <= M
    assert res.io.total >= 2 * (Nq + Nkv) * d


def test_one_pass_attains_the_trivial_bound_exactly():
    for N in (1000, 4096, 65536):
        io = ALG.predicted_io((N, 8), 20_000, tiling={"entry_bound": 0.6})
        assert io.total == 4 * N * 8


def _slope(ns, totals):
    return float(np.polyfit(np.log(ns), np.log(totals), 1)[0])


@pytest.mark.parametrize("M", [20_000, 3_000])  # one pass, and r-blocked (r(d+1) > M)
def test_io_grows_near_linearly_in_n_unlike_flash2(M):
    ns = [2**k for k in range(10, 17)]
    tiling = {"eps": 1e-3, "entry_bound": 0.6}
    approx = [attnio.run("approx_poly", shape=(n, 8), M=M, mode="count", tiling=tiling).io.total
              for n in ns]
    flash = [attnio.run("flash2", shape=(n, 8), M=M, mode="count").io.total for n in ns]
    sa, sf = _slope(ns, approx), _slope(ns, flash)
    ta, tf = _slope(ns[-3:], approx[-3:]), _slope(ns[-3:], flash[-3:])  # top of the grid
    print(f"M={M}: log-log slope over 2^10..2^16: approx_poly {sa:.3f}, flash2 {sf:.3f}; "
          f"over 2^14..2^16: approx_poly {ta:.3f}, flash2 {tf:.3f}")
    assert sa <= 1.1 and ta <= 1.1
    assert sf >= 1.5 and tf >= 1.9  # flash2 tends to 2 (its linear term fades as n grows)
    assert approx[-1] < flash[-1]
    r = approx_tilings((2**16, 8), M, False, 1e-3, 0.6)[0].r
    if r * 9 > M:
        assert ALG.coerce_tiling(attnio.Shape(1024, 1024, 8), M, tiling).r_blocks > 1


def test_entries_beyond_the_bound_are_refused_or_warned():
    Q, K, V = bounded(40, 40, 4, 1.0)
    Q[3, 2] = 1.7
    with pytest.raises(ParameterError, match=r"entry_bound=1: Q has an entry of magnitude 1\.7"):
        attnio.run("approx_poly", Q, K, V, M=10_000, tiling={"entry_bound": 1.0})
    with pytest.warns(UnboundedWarning, match="guaranteed error bound is LOST"):
        res = attnio.run("approx_poly", Q, K, V, M=10_000,
                         tiling={"entry_bound": 1.0, "allow_unbounded": True})
    assert np.all(np.isfinite(res.output))
    with pytest.raises(ParameterError, match="radius"):
        attnio.run("approx_poly", Q, K, V, M=10_000, tiling={"radius": 0.1})


@pytest.mark.parametrize("eps", [0.0, -1e-3, 1.5])
def test_eps_outside_the_precondition_is_refused(eps):
    Q, K, V = bounded(20, 20, 4, 0.5)
    with pytest.raises(ParameterError, match="eps"):
        attnio.run("approx_poly", Q, K, V, M=10_000, tiling={"eps": eps})


def test_count_mode_needs_the_entry_bound():
    with pytest.raises(ParameterError, match="entry_bound"):
        attnio.run("approx_poly", shape=(100, 8), M=10_000, mode="count")
    with pytest.raises(ParameterError, match="entry_bound"):
        ALG.predicted_io((100, 8), 10_000)


def test_scale_must_match_the_tiling():
    Q, K, V = bounded(20, 20, 4, 0.5)
    with pytest.raises(ParameterError, match="scale"):
        attnio.run("approx_poly", Q, K, V, M=10_000, scale=0.9)
    res = attnio.run("approx_poly", Q, K, V, M=10_000, scale=0.9, tiling={"scale": 0.9})
    ref = reference.attention(Q, K, V, scale=0.9)
    assert np.abs(res.output - ref).max() <= res.tiling.error_bound_for(V)


def test_too_small_M_and_bad_blocks_refused():
    with pytest.raises(ParameterError, match="M=10"):
        attnio.run("approx_poly", shape=(100, 8), M=10, mode="count", tiling={"entry_bound": 0.5})
    with pytest.raises(attnio.CapacityError):
        attnio.run("approx_poly", shape=(100, 8), M=2000, mode="count",
                   tiling={"entry_bound": 0.5, "Bn": 100, "rb": 1000})
    with pytest.raises(ParameterError, match="Bn"):
        attnio.run("approx_poly", shape=(100, 8), M=2000, mode="count",
                   tiling={"entry_bound": 0.5, "Bn": 0})


def test_planner_tilings_show_r_and_guaranteed_error():
    ts = approx_tilings((4096, 8), 20_000, False, 1e-3, 0.6)
    assert {t.variant for t in ts} == {"chebyshev", "taylor"}
    for t in ts:
        assert t.r == math.comb(8 + t.degree, t.degree)
        assert 0 < t.guaranteed_error <= 1e-3 / (1 - 1e-3)
        assert ALG.footprint(attnio.Shape(4096, 4096, 8), t) <= 20_000
    p = attnio.planner.plan(4096, 8, 20_000, approx_eps=1e-3, entry_bound=0.6)
    assert p.chosen.algorithm == "approx_poly" and p.chosen.error is not None


def test_multihead_inputs_and_counts():
    rng = np.random.default_rng(5)
    Q, K = rng.uniform(-0.7, 0.7, (2, 2, 40, 4)), rng.uniform(-0.7, 0.7, (2, 2, 50, 4))
    V = rng.standard_normal((2, 2, 50, 4))
    res = attnio.run("approx_poly", Q, K, V, M=500, causal=True, tiling={"entry_bound": 0.7})
    ref = reference.attention(Q, K, V, causal=True)
    assert np.abs(res.output - ref).max() <= res.tiling.guaranteed_error * float(np.ptp(V))
    c = attnio.run("approx_poly", shape=res.shape, M=500, mode="count", causal=True,
                   tiling=res.tiling)
    assert c.io.total == res.io.total == ALG.cost(res.shape, res.tiling).io.total


def test_cli_reports_guaranteed_next_to_measured_error(capsys):
    # in-process through the CLI's entry (tests/runner and tests/cli run ``python -m attnio``)
    assert cli_main(["run", "approx_poly", "--N", "300", "--d", "4", "--M", "5000", "--eps",
                     "1e-4", "--entry-bound", "0.8", "--json"]) == 0
    obj = json.loads(capsys.readouterr().out)
    assert obj["max_abs_err"] <= obj["guaranteed_error"]
    assert obj["tiling"]["eps"] == 1e-4 and obj["tiling"]["entry_bound"] == 0.8
    assert cli_main(["run", "approx_poly", "--N", "64", "--d", "4", "--M", "5000",
                     "--count-only"]) == 2
    assert "--entry-bound" in capsys.readouterr().err
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert cli_main(["run", "approx_poly", "--N", "64", "--d", "4", "--M", "5000",
                         "--entry-bound", "0.5", "--count-only"]) == 0
    assert "approx" in capsys.readouterr().out


def test_estimate_tiling_fills_in_the_entry_bound_inputs_will_have():
    """The runner prices an approximate run at the bound its inputs are drawn with (read: 1);
    an exact schedule's tiling, or one that sets a bound or a radius, is priced as given."""
    ap, f2 = attnio.algorithms.get("approx_poly"), attnio.algorithms.get("flash2")
    assert ap.estimate_tiling(None, 2.0) == {"entry_bound": 2.0}
    assert ap.estimate_tiling({"eps": 1e-2}, None) == {"eps": 1e-2, "entry_bound": 1.0}
    assert ap.estimate_tiling({"radius": 3.0}, 2.0) == {"radius": 3.0}
    assert ap.estimate_tiling({"entry_bound": 0.5}, 2.0) == {"entry_bound": 0.5}
    assert f2.estimate_tiling({"Br": 8, "Bc": 8}, 2.0) == {"Br": 8, "Bc": 8}
    # priced at the drawn bound: the estimate of a run drawn in [-2, 2] is that of entry_bound 2
    shape = attnio.Shape.make(64, 4)
    drawn = attnio.runner.estimate("approx_poly", shape, 512, tiling={"entry_bound": 2.0})
    assert drawn == attnio.runner.estimate("approx_poly", shape, 512,
                                           tiling=ap.estimate_tiling(None, 2.0))


def test_count_needs_names_the_missing_entry_bound():
    ap, f2 = attnio.algorithms.get("approx_poly"), attnio.algorithms.get("flash2")
    assert ap.count_needs(None) == ap.count_needs({"eps": 1e-3}) == "entry_bound"
    assert ap.count_needs({"entry_bound": 1.0}) is None and ap.count_needs({"radius": 2.0}) is None
    assert f2.count_needs(None) is None
    with pytest.raises(ParameterError, match="needs the entry bound B"):  # the run agrees
        attnio.run("approx_poly", shape=(16, 4), M=2000, tiling={"eps": 1e-3})
