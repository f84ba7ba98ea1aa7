"""The certificate as two factors (issue 25, point 4): ``attnio plan`` and ``Plan.factors``.

The planner's count over the best schedule found by any means (schedule slack), and that over the
best explicit bound (bound slack): they multiply to the printed ratio, the JSON carries both, and
on a tiny shape where the loop-order search finds a better schedule than the planner's pick the
schedule factor is above 1.
"""

from __future__ import annotations

import dataclasses
import json
import math

import pytest

import attnio
from attnio.algorithms import mapper
from attnio.algorithms.base import divisors_upto
from attnio.cli import main
from attnio.core.workload import Shape
from attnio.pebble import loops
from attnio.planner import certificate_factors


@pytest.mark.parametrize("kw", [dict(N=4096, d=64, M=65536), dict(N=300, d=40, M=621, causal=True),
                                dict(N=5, d=2, M=12), dict(N=96, d=8, M=128, heads=4, kv_heads=2)])
def test_the_two_factors_multiply_to_the_ratio(kw):
    p = attnio.plan(**kw)
    f = p.factors(cheap=8)
    assert f.best_found <= f.total == p.chosen.predicted.total
    assert f.schedule_factor >= 1.0
    assert f.bound == p.certificate.best_bound.value
    assert math.isclose(f.schedule_factor * f.bound_factor, p.certificate.ratio, rel_tol=1e-12)
    assert f.complete and f.how


#: Tiny shapes where the loop-order search beat every registered schedule when this was written
#: (docs/pebbling.md): N = 3, d = 1, M = 8: 16 words against 24; N = 2, d = 1, M = 8: 8 / 12;
#: M = 6: 10 / 12.
TINY = [(3, 1, 8), (2, 1, 8), (2, 1, 6)]


@pytest.mark.parametrize("N,d,M", TINY)
def test_on_a_tiny_shape_the_loop_search_is_one_of_the_means(N, d, M):
    p = attnio.plan(N, d, M)
    best = loops.search(N, N, d, M)[0]
    f = p.factors(loop_search=True)
    g = p.factors(loop_search=False)
    assert g.loop_orders == 0 and "loop orders" not in g.how
    assert f.loop_orders > 0 and "loop orders" in f.how
    assert f.best_found == min(g.best_found, best.io)
    if best.io < g.best_found:  # the search beats every registered schedule: schedule slack
        assert f.best_found_by == "loop search" and f.best_found_tiling == best.schedule.short()
        assert f.schedule_factor == p.chosen.predicted.total / best.io > 1
    assert math.isclose(f.schedule_factor * f.bound_factor, p.certificate.ratio, rel_tol=1e-12)


def test_some_tiny_shape_shows_schedule_slack():
    slack = [N for N, d, M in TINY if attnio.plan(N, d, M).factors(loop_search=True)
             .schedule_factor > 1]
    if not slack:
        pytest.skip("the registered schedules now reach the loop search's best on these shapes")
    assert slack


def test_a_budget_stops_the_search_and_says_so():
    p = attnio.plan(4096, 64, 65536)
    f = certificate_factors(p, budget_s=0.0)
    assert not f.complete and "budget" in f.how
    assert f.best_found == p.chosen.predicted.total  # nothing searched beyond the candidates


def test_plan_prints_both_factors_under_the_ratio(capsys):
    assert main(["plan", "--N", "3", "--d", "1", "--M", "8", "--json"]) == 0
    f = json.loads(capsys.readouterr().out)["factors"]
    assert main(["plan", "--N", "3", "--d", "1", "--M", "8"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    at = next(k for k, ln in enumerate(lines) if "Ratio total/bound" in ln)
    assert "Schedule slack:" in lines[at + 1] and f["best_found_by"] in lines[at + 1]
    assert "Bound slack:" in lines[at + 2]
    assert "Searched with:" in lines[at + 3] and "loop orders" in lines[at + 3]
    ratio = float(lines[at].split()[-1])
    sf = float(lines[at + 1].split("Schedule slack:")[1].split("x")[0])
    bf = float(lines[at + 2].split("Bound slack:")[1].split("x")[0])
    assert sf == round(f["schedule_factor"], 2) and bf == round(f["bound_factor"], 2)
    assert abs(sf * bf - ratio) < 0.02  # two decimals each


def test_plan_json_has_the_factors(capsys):
    assert main(["plan", "--N", "3", "--d", "1", "--M", "8", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    f = d["factors"]
    assert f["best_found"] <= d["total"] == f["total"]
    assert math.isclose(f["schedule_factor"] * f["bound_factor"], d["ratio"], rel_tol=1e-12)
    assert f["schedule_factor"] == d["total"] / f["best_found"]
    assert f["complete"] is True and f["loop_orders_searched"] > 0
    assert set(f) >= {"how", "best_found_by", "best_found_tiling", "bound", "tilings_searched"}


def test_no_factors_and_approximate_plans_print_none(capsys):
    assert main(["plan", "--N", "64", "--d", "8", "--M", "512", "--no-factors", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["factors"] is None
    assert main(["plan", "--N", "64", "--d", "8", "--M", "512", "--no-factors"]) == 0
    assert "slack" not in capsys.readouterr().out
    # an approximate pick: exact schedules and bounds do not compare with it
    assert main(["plan", "--N", "65536", "--d", "4", "--M", "4096", "--eps", "1e-2",
                 "--entry-bound", "0.5", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["error"] is not None and d["factors"] is None


def test_factors_and_no_factors_exclude_each_other(capsys):
    assert main(["plan", "--N", "64", "--d", "8", "--M", "512", "--factors", "--no-factors"]) == 2
    assert "--no-factors" in capsys.readouterr().err


def test_the_dense_flag_searches_at_least_as_well(capsys):
    assert main(["plan", "--N", "300", "--d", "40", "--M", "621", "--json"]) == 0
    quick = json.loads(capsys.readouterr().out)["factors"]
    assert main(["plan", "--N", "300", "--d", "40", "--M", "621", "--json", "--factors"]) == 0
    dense = json.loads(capsys.readouterr().out)["factors"]
    assert dense["best_found"] <= quick["best_found"]
    assert "64 rows" in dense["how"] and "16 rows" in quick["how"]


# ---------------------------------------------------------------- head groups in O(√group) (issue 31)
def test_divisors_upto_equal_every_k_that_divides():
    for n in list(range(1, 400)) + [720720, 2**20, 3**12, 999983, 2 * 999983, 999983**2]:
        for most in (0, 1, 3, 64, 65, 100, 5000, 10**6):
            assert divisors_upto(n, most) == [k for k in range(1, min(n, most) + 1)
                                              if n % k == 0]
    assert divisors_upto(2**39, 2**39) == [2**e for e in range(40)]
    assert divisors_upto((1 << 61) - 1, 10**5) == [1]  # a prime: trial division up to 10**5
    assert divisors_upto(3 * ((1 << 61) - 1), 10**5) == [1, 3]


@pytest.mark.parametrize("alg", ["flash2", "kv_stationary", "q_stationary_min"])
def test_the_dense_search_footprints_grow_with_every_side(alg):
    """What lets the dense search bisect for the largest group whose least tiling fits."""
    a = attnio.algorithms.get(alg)
    fields = {f.name for f in dataclasses.fields(a.Tiling)}
    for shape in (Shape(50, 40, 8, heads=12, kv_heads=1), Shape(9, 30, 3, heads=6, kv_heads=2)):
        sides = {"Br": [1, 2, 7, 50, 60], "Bc": [1, 3, 39, 40, 41], "group": [1, 2, 3, 6, 12],
                 "Bs": [1, 2, 40]}
        for f in fields:
            for kw in _corners(fields, sides):
                for lo, hi in zip(sides[f], sides[f][1:]):
                    small, big = a.Tiling(**{**kw, f: lo}), a.Tiling(**{**kw, f: hi})
                    assert a.footprint(shape, small) <= a.footprint(shape, big)


def _corners(fields, sides):
    out = [{}]
    for f in sorted(fields):
        out = [{**kw, f: v} for kw in out for v in (sides[f][0], sides[f][2], sides[f][-1])]
    return out


@pytest.mark.parametrize("kw", [dict(N=64, d=8, M=1000, heads=12, kv_heads=1),
                                dict(N=100, d=4, M=300, heads=36, kv_heads=3, causal=True),
                                dict(N=40, d=16, M=4096, heads=60, kv_heads=1)])
def test_the_dense_search_equals_every_divisor_of_the_group(kw, monkeypatch):
    """The groups up to the largest that fits (bisection) find what every divisor found, with the
    same number of tilings scored."""
    p = attnio.plan(**kw)
    fast = certificate_factors(p, cheap=8, loop_search=False)

    def every_divisor(alg, shape, M, fields):
        return [g for g in range(1, shape.group + 1) if shape.group % g == 0]

    monkeypatch.setattr(mapper, "dense_groups", every_divisor)  # the mapper's dense search
    slow = certificate_factors(p, cheap=8, loop_search=False)
    assert (fast.best_found, fast.best_found_by, fast.best_found_tiling, fast.searched) == \
        (slow.best_found, slow.best_found_by, slow.best_found_tiling, slow.searched)


def test_a_group_of_2_to_the_39_heads_answers_with_its_factors(capsys):
    assert main(["plan", "--N", "64", "--d", "8", "--M", "1000", "--heads", "549755813888",
                 "--kv-heads", "1", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    f = d["factors"]
    assert f is not None and f["complete"] and f["tilings_searched"] > 0
    assert f["best_found"] <= d["total"]
    assert math.isclose(f["schedule_factor"] * f["bound_factor"], d["ratio"], rel_tol=1e-12)


@pytest.mark.parametrize("alg", ["flash2", "kv_stationary", "q_stationary_min"])
def test_the_dense_grid_is_every_grid_tiling_that_fits_in_order(alg):
    """dense_tilings stops each sweep at the first side that does not fit (the footprints grow
    with every side): what is left is the full grid's tilings that fit, in the grid's order."""
    a = attnio.algorithms.get(alg)
    fields = {f.name for f in dataclasses.fields(a.Tiling)}
    for shape, M in ((Shape(50, 40, 8, heads=12, kv_heads=1), 900),
                     (Shape(300, 300, 16, causal=True), 3000),
                     (Shape(100, 70, 4, heads=6, kv_heads=2), 400)):
        groups = mapper.dense_groups(a, shape, M, fields) if "group" in fields else [None]
        grid = []
        for G in groups:
            for Br in mapper.dense_sizes(shape.Nq, 8):
                for Bc in (mapper.dense_sizes(shape.Nkv, 8) if "Bc" in fields else [None]):
                    kw = {"Br": Br, **({"Bc": Bc} if Bc else {}), **({"group": G} if G else {}),
                          **({"Bs": 1} if "Bs" in fields else {})}
                    grid.append(a.Tiling(**kw))
        fit = [t for t in grid if a.footprint(shape, t) <= M]
        assert fit and len(fit) < len(grid)
        assert mapper.dense_tilings(a, shape, M, 8) == fit


@pytest.mark.parametrize("kw", [dict(N=300, d=16, M=3000), dict(N=300, d=16, M=3000, causal=True),
                                dict(N=200, Nkv=500, d=8, M=2000, causal="top_left"),
                                dict(N=500, Nkv=200, d=8, M=2000, causal=True),
                                dict(N=100, d=8, M=2000, heads=12, kv_heads=2, causal=True)])
def test_flash2s_bound_prunes_the_dense_search_to_the_full_loops_choice(kw):
    """flash2's ``_lower_total`` is at most the count of every dense tiling, and the dense
    search by branch and bound on it picks what scoring every tiling picks (count, steps,
    tilings that fit)."""
    a = attnio.algorithms.get("flash2")
    p = attnio.plan(**kw)
    shape, M = p.shape, p.memory.M
    lower = a._lower_total(shape)
    assert lower is not None
    tilings = mapper.dense_tilings(a, shape, M, 16)
    for t in tilings:
        assert lower(t) <= a.cost(shape, t).io.total * (1 + 1e-12)
    assert mapper.search(a, shape, M, tilings) == mapper._least(a, shape, M, tilings)
