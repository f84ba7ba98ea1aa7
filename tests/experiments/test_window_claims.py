"""The report's windowed claims: windowed I/O linear in N (fitted where N >= 4·W) for every
algorithm with windowed rows, and the windowed schedules within WINDOW_BOUND_C of the best
explicit bound; a grid without windows leaves them not covered, a quadratic series fails."""

from __future__ import annotations

import pytest

from attnio.experiments import Grid, ResultsStore, run_sweep
from attnio.experiments.report import claims
from attnio.experiments.report.claims import NOT_COVERED, WINDOW_BOUND_C


@pytest.fixture(scope="module")
def windowed_rows(tmp_path_factory):
    db = tmp_path_factory.mktemp("wclaims") / "w.sqlite"
    run_sweep(Grid(N=(128, 512, 2048), d=(16,), M=(512, 4096), causal=(True,), window=(32,),
                   algorithms=("flash2", "window_cache", "window_square", "window_stream", "plan")),
              db, jobs=1)
    with ResultsStore(db) as st:
        return st.rows()


def _window_claims(cs):
    return [c for c in cs if "windowed" in c.claim]


def test_windowed_claims_pass_on_a_windowed_sweep(windowed_rows):
    cs = _window_claims(claims(windowed_rows))
    linear = [c for c in cs if "linear in N" in c.claim]
    assert {c.claim.split(":")[0] for c in linear} == {"flash2", "window_cache", "window_square",
                                                       "window_stream", "plan"}
    assert all(c.status == "pass" for c in cs), [(c.claim, c.measured) for c in cs]
    (bound,) = [c for c in cs if "explicit bound" in c.claim]
    assert f"<= {WINDOW_BOUND_C:g}" in bound.claim and "6 windowed workloads" in bound.measured  # 3 N x 2 M


def test_a_quadratic_windowed_series_fails_and_no_windows_is_not_covered(windowed_rows):
    bad = [dict(r, total=r["total"] * r["Nq"] // 128) if r["algorithm"] == "flash2" else r
           for r in windowed_rows]
    (f2,) = [c for c in _window_claims(claims(bad)) if c.claim.startswith("flash2")]
    assert f2.status == "fail"
    unwindowed = [dict(r, window=None) for r in windowed_rows]
    cs = _window_claims(claims(unwindowed))
    assert cs and all(c.status == NOT_COVERED for c in cs)


def test_short_series_are_not_covered(windowed_rows):
    short = [r for r in windowed_rows if r["Nq"] != 2048]  # N >= 4·W keeps only N = 512
    cs = [c for c in _window_claims(claims(short)) if "linear in N" in c.claim]
    assert cs and all(c.status == NOT_COVERED for c in cs)
