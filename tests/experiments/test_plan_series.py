"""``--algo plan``: the planner's choice per configuration as a series of its own.

A plan row runs exactly the planner's pick (its counts equal that schedule's closed form, its
output the reference in compute mode), stores the chosen schedule in its tiling, never falls
below a proven bound, is drawn with a style of its own and is not ranked against the schedule it
names in the best-configuration table.
"""

from __future__ import annotations

import json

import pytest

import attnio
from attnio.core.workload import Shape
from attnio.experiments import Config, Grid, ResultsStore, run_sweep
from attnio.experiments.plan_series import series
from attnio.experiments.report.pages import best_configurations
from attnio.experiments.report.style import algorithm_styles, series_styles
from attnio.experiments.row import run_config
from attnio.experiments.values import parse_algorithms


def test_plan_is_a_name_of_its_own_never_part_of_all():
    assert parse_algorithms("plan,flash2") == ("plan", "flash2")
    assert "plan" not in parse_algorithms("all")
    assert series("plan").exact and series("plan").supports_window
    with pytest.raises(attnio.ParameterError):
        parse_algorithms("plann")


def test_issue_example_row_is_the_planners_pick_within_5_percent_of_the_trivial_bound():
    shape = Shape.make(4096, 64, causal=True, window=512)
    row = run_config(Config("plan", shape, 70_000))
    assert row["status"] == "ok" and row["algorithm"] == "plan"
    p = attnio.plan(N=4096, d=64, M=70_000, causal=True, window=512)
    assert row["tiling"]["schedule"] == p.chosen.algorithm
    assert row["total"] == p.chosen.predicted.total <= 1.05 * 1_048_576
    assert (row["reads"], row["writes"]) == (row["predicted_reads"], row["predicted_writes"])
    assert row["total"] >= row["bound"]


def test_compute_mode_row_equals_the_reference():
    shape = Shape.make(48, 8, causal=True, window=6)
    row = run_config(Config("plan", shape, 300, mode="compute"))
    assert row["status"] == "ok" and row["max_err"] <= 1e-10
    assert (row["reads"], row["writes"]) == (row["predicted_reads"], row["predicted_writes"])
    assert row["tiling"]["schedule"] == attnio.plan(N=48, d=8, M=300, causal=True,
                                                    window=6).chosen.algorithm


def test_a_sweep_stores_the_plan_series_and_export_names_the_schedule(tmp_path):
    db = tmp_path / "p.sqlite"
    s = run_sweep(Grid(N=(256, 1024), d=(16,), M=(512, 4096), algorithms=("plan", "flash2"),
                       causal=(True,), window=(None, 64)), db, jobs=1)
    assert s.errors == 0
    with ResultsStore(db) as st:
        rows = st.rows("ok", decode=True)
    plan = [r for r in rows if r["algorithm"] == "plan"]
    assert len(plan) == 8 and all(r["tiling"]["schedule"] in attnio.algorithms.names()
                                  for r in plan)
    f2 = {(r["Nq"], r["M"], r["window"]): r["total"] for r in rows if r["algorithm"] == "flash2"}
    assert all(r["total"] <= f2[(r["Nq"], r["M"], r["window"])] for r in plan)
    best = best_configurations(rows)
    assert all(b["algorithm"] != "plan" for b in best)


def test_plan_has_a_style_no_registered_algorithm_has():
    own = algorithm_styles()
    assert own["plan"].color not in {own[n].color for n in attnio.algorithms.names()}
    st = series_styles([("plan", None), ("flash2", None)])
    assert st[("plan", None)] == own["plan"]


def test_export_flattens_the_schedule(tmp_path):
    import csv

    db = tmp_path / "e.sqlite"
    run_sweep(Grid(N=(128,), d=(8,), M=(256,), algorithms=("plan",)), db, jobs=1)
    with ResultsStore(db) as st:
        (row,) = st.rows("ok")
        st.export(tmp_path / "e.csv", "csv")
    name = json.loads(row["tiling"])["schedule"]
    assert name in attnio.algorithms.names()
    with open(tmp_path / "e.csv", newline="") as f:
        (out,) = list(csv.DictReader(f))
    assert out["tiling_schedule"] == name


def test_backward_and_too_small_M():
    """In a backward grid the plan row counts the planner's forward (with the logsumexp) and the
    backward pass; below every schedule's least M the grid stores a skipped row with the reason."""
    shape = Shape.make(256, 16, causal=True, window=32)
    row = run_config(Config("plan", shape, 2048, backward=True))
    assert row["status"] == "ok" and row["backward"] and row["backward_total"] > 0
    assert (row["reads"], row["writes"]) == (row["predicted_reads"], row["predicted_writes"])
    from attnio.experiments.grid import expand

    ex = expand(Grid(N=(64,), d=(16,), M=(3,), algorithms=("plan",)))
    assert not ex.configs and "min_M" in ex.skipped[0][1]
