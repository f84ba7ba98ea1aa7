"""The planner's choices frozen (issue 31): faster searches must pick the same tilings.

``tests/data/plan_regression.json`` records, on a grid of about a hundred workloads (forward and
backward, unmasked, causal of both alignments, sliding windows, grouped-query attention, Nq != Nkv,
M below and above d²), what the code of commit bc773e6 chose: every registered exact algorithm's
best tiling with its reads, writes and steps (or why it was skipped), every backward schedule's best
tiling and count, and on a subset the certificate factors' best schedule found (``cheap=8``).  The
tests recompute them and compare, value for value.  The lower bounds are not in the file (the
bounds have tests of their own); the plan-level test checks the chosen forward and backward
schedules on every fifth shape end to end.

Regenerate (only when a change of choice is intended, and say why in the commit):
``PYTHONPATH=src python tests/planner/test_plan_regression.py --write``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import sys
from typing import Any

import pytest

import attnio
from attnio import algorithms as _alg
from attnio.algorithms import mapper
from attnio.core import masks
from attnio.core.workload import Shape
from attnio.planner import certificate_factors
from attnio.planner import planner as _planner

DATA = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "plan_regression.json")


def _grid() -> list[dict[str, Any]]:
    """About a hundred workloads: the issue's three targets, a seeded draw, then a few large."""
    out: list[dict[str, Any]] = [
        dict(N=4096, d=64, M=65536), dict(N=3000, d=40, M=60000),
        dict(N=8192, d=128, M=65536, heads=32, kv_heads=8, causal=True),
    ]
    rng = random.Random(31)
    Ns = [17, 64, 100, 256, 1000, 1024, 3000, 4096]
    ds = [4, 8, 16, 40, 64, 128]
    heads = [(1, None), (1, None), (4, 2), (6, 1), (12, 3), (8, 8), (16, 1)]
    masks = [{}, {}, {"causal": True}, {"causal": "top_left"}, {"causal": True, "window": 100}]
    while len(out) < 100:
        N, d = rng.choice(Ns), rng.choice(ds)
        M = rng.choice([max(d * d // 4, 8 * d), d * d, 4 * d * d, 65536, 3 * d + 7 * rng.randrange(1, 60)])
        h, kv = rng.choice(heads)
        kw: dict[str, Any] = dict(N=N, d=d, M=int(M), heads=h, kv_heads=kv, **rng.choice(masks))
        if rng.random() < 0.2:
            kw["Nkv"] = rng.choice(Ns)
        if kw.get("window") and kw["window"] >= max(N, kw.get("Nkv", N)):
            kw.pop("window")
        out.append(kw)
    return out + [  # large workloads, where the searches' bounds meet big numbers
        dict(N=10**9, d=128, M=65536, causal=True), dict(N=10**9, d=128, M=65536, causal=True,
                                                         window=4096),
        dict(N=10**9, d=128, M=65536, causal="top_left"), dict(N=2**20, d=64, M=4096, causal=True),
        dict(N=2**20, d=64, M=65536), dict(N=2**20, d=64, M=65536, heads=32, kv_heads=8,
                                           causal="top_left"),
        dict(N=10**6, Nkv=2 * 10**6, d=96, M=20000, causal=True)]


GRID = _grid()


def _shape(kw: dict[str, Any]) -> tuple[Shape, int]:
    kw = dict(kw)
    M = kw.pop("M")
    return Shape.make(kw.pop("N"), kw.pop("d"), **kw), M


def _tiling(t: Any) -> Any:
    return dataclasses.asdict(t) if dataclasses.is_dataclass(t) and not isinstance(t, type) else t


def _record(kw: dict[str, Any]) -> dict[str, Any]:
    """Every exact algorithm's and backward schedule's choice on this workload (no bounds)."""
    shape, M = _shape(kw)
    fwd: dict[str, Any] = {}
    for alg in _alg.all_algorithms(exact=True):
        try:
            res = _planner._score(alg, shape, M, None, None, False)
        except attnio.AttnioError as e:
            res = f"{type(e).__name__}"
        fwd[alg.name] = (res if isinstance(res, str) else
                         {"tiling": _tiling(res.tiling), "reads": res.predicted.reads,
                          "writes": res.predicted.writes, "steps": res.steps})
    bwd: dict[str, Any] = {}
    for b in _alg.all_backwards():
        found = mapper.search(b, shape, M)  # None: the schedule cannot run it (mapper.can_run)
        bwd[b.name] = (None if found is None else
                       {"tiling": _tiling(found.tiling), "reads": found.predicted.reads,
                        "writes": found.predicted.writes, "steps": found.steps})
    return {"shape": kw, "forward": fwd, "backward": bwd}


#: the workloads whose certificate factors are recorded (small enough for a quick search)
FACTOR_SHAPES = [i for i, kw in enumerate(GRID) if kw["N"] <= 1024 and i % 3 == 0]


def _factors(kw: dict[str, Any]) -> dict[str, Any] | None:
    shape, M = _shape(kw)
    try:
        p = _planner.plan_shape(shape, M)
    except attnio.AttnioError:
        return None
    f = certificate_factors(p, cheap=8, loop_search=False)
    return {"best_found": f.best_found, "best_found_by": f.best_found_by,
            "best_found_tiling": _tiling(f.best_found_tiling), "searched": f.searched}


def _plan_level(kw: dict[str, Any]) -> dict[str, Any] | None:
    shape, M = _shape(kw)
    try:
        p = _planner.plan_shape(shape, M, backward=True)
    except attnio.AttnioError:
        return None
    assert p.backward is not None
    return {"algorithm": p.chosen.algorithm, "tiling": _tiling(p.chosen.tiling),
            "total": p.chosen.predicted.total, "backward": p.backward.algorithm,
            "backward_tiling": _tiling(p.backward.tiling),
            "backward_total": p.backward.predicted.total}


def _load() -> dict[str, Any]:
    with open(DATA) as f:
        data = json.load(f)
    for key in ("factors", "plans"):  # stored as lists of {"i", "value"}
        data[key] = {str(x["i"]): x["value"] for x in data[key]}
    return data


def _jsonable(x: Any) -> Any:
    return json.loads(json.dumps(x))


@pytest.fixture(scope="module")
def recorded() -> dict[str, Any]:
    data = _load()
    assert [r["shape"] for r in data["searches"]] == _jsonable(GRID)
    return data


@pytest.mark.parametrize("i", range(len(GRID)))
def test_every_schedule_picks_the_recorded_tiling(recorded, i):
    assert _jsonable(_record(GRID[i])) == recorded["searches"][i]


@pytest.mark.parametrize("i", FACTOR_SHAPES)
def test_the_certificate_factors_find_the_recorded_schedule(recorded, i):
    assert _jsonable(_factors(GRID[i])) == recorded["factors"][str(i)]


@pytest.mark.parametrize("i", range(0, len(GRID), 5))
def test_the_plan_chooses_the_recorded_forward_and_backward(recorded, i):
    assert _jsonable(_plan_level(GRID[i])) == recorded["plans"][str(i)]


def test_the_grid_covers_masks_gqa_and_both_regimes():
    shapes = [_shape(kw) for kw in GRID]
    assert any(s.causal and s.causal_align == "top_left" for s, _ in shapes)
    assert any(s.window is not None for s, _ in shapes)
    assert sum(s.group > 1 for s, _ in shapes) >= 20
    assert any(M < s.d ** 2 for s, M in shapes) and any(M >= s.d ** 2 for s, M in shapes)
    assert any(s.Nq != s.Nkv for s, _ in shapes)


#: workloads beyond the grid where the pruned searches are checked against the full loop
PRUNED_EXTRA = [dict(N=300, d=160, M=13615, causal=True),
                dict(N=5000, d=64, M=1000, causal=True, window=700),
                dict(N=2000, Nkv=3000, d=96, M=4000, causal="top_left"),
                dict(N=777, d=24, M=300, heads=6, kv_heads=2, causal=True),
                dict(N=1000, Nkv=600, d=32, M=5000, causal=True),
                dict(N=600, Nkv=1000, d=32, M=5000, causal="top_left"),
                dict(N=8192, d=128, M=65536, heads=32, kv_heads=8, causal="top_left")]


@pytest.mark.parametrize("name", ["small_cache_backward", "fused_small_cache_backward"])
def test_the_pruned_backward_searches_equal_scoring_every_candidate(name):
    """Branch and bound: every candidate's count is at least its bound (without and with the
    tile sums), and the search returns what the full loop over the candidates returns."""
    b = _alg.get_backward(name)
    for kw in GRID[::3] + PRUNED_EXTRA:
        shape, M = _shape(kw)
        if mapper.can_run(b, shape, M) is not None:
            continue
        rc = masks.row_counts(shape)
        for t in b.candidate_tilings(shape, M):
            s = b._sides(shape, t)
            total = b.cost(shape, t).io.total * (1 + 1e-12)
            assert b._least_total(shape, s.bm, s.bn, rc) <= total
            assert b._least_total(shape, s.bm, s.bn, rc, b._sums(shape, s)) <= total
        pruned = mapper.search(b, shape, M)  # over the pruned mapspace
        full = mapper.search(b, shape, M, b.candidate_tilings(shape, M))
        assert (pruned is None) == (full is None)
        if pruned is not None and full is not None:
            assert (pruned.tiling, pruned.predicted, pruned.steps) == \
                (full.tiling, full.predicted, full.steps)


@pytest.mark.parametrize("name", ["q_split", "q_stationary_min"])
def test_the_pruned_forward_searches_equal_scoring_every_candidate(name):
    """The mapper's search by branch and bound (an algorithm's ``_lower_total``): the bound is
    at most the count of every candidate that fits, and the choice, its count, steps and the
    number of tilings that fit are the full loop's."""
    a = _alg.get(name)
    for kw in GRID + PRUNED_EXTRA:
        shape, M = _shape(kw)
        if mapper.can_run(a, shape, M) is not None:
            continue
        lower = a._lower_total(shape)
        tilings = list(a.candidate_tilings(shape, M))
        if lower is not None:
            for t in tilings:
                if a.footprint(shape, t) <= M:
                    assert lower(t) <= a.cost(shape, t).io.total * (1 + 1e-12)
        assert mapper.search(a, shape, M, tilings) == mapper._least(a, shape, M, tilings)


def test_stream_tiling_search_totals_and_bounds_are_the_counts():
    """stream_tiling's search scores its phases with inline totals and, under a mask, prunes by
    lower bounds: the totals equal the closed forms and the bounds are below them."""
    from attnio.algorithms import stream_tiling as st

    for kw in GRID[::4] + PRUNED_EXTRA:
        shape, M = _shape(kw)
        if shape.window is not None:
            continue
        for a, b in [(1, 1), (3, 7), (64, 64), (100, 33), (4096, 17)]:
            for o in (0, 1):
                exact = st._phase1(shape, a, b, st.ORDERS[o]).total
                assert st._phase1_total(shape, (a, b, o)) == exact
                if shape.causal:
                    assert st._phase1_lower(shape, (a, b, o)) <= exact * (1 + 1e-12)
            for g in [(a, b), (a, b, 1, b, a)] if shape.d > 1 else [(a, b)]:
                exact = st._p2(shape, g).total
                assert st._p2_total(shape, g) == exact
                if shape.causal:
                    assert st._p2_lower(shape, g) <= exact * (1 + 1e-12)


def test_row_hybrid_abc_is_never_beaten_by_the_modes_it_leaves_out():
    """Random small workloads where row_hybrid lists "abc" alone: its (count, steps) is at most
    that of "ac", "a" and "c" wherever those have blocks (candidate_tilings' docstring)."""
    from attnio.algorithms import row_hybrid as rh

    a, rng, checked = rh.ALGORITHM, random.Random(7), 0
    for _ in range(400):
        d = rng.randint(1, 40)
        shape = Shape.make(rng.randint(1, 300), d, Nkv=rng.randint(1, 300),
                           causal=rng.choice([False, True, "top_left"]), heads=4, kv_heads=1)
        M = rng.randint(2 * d + 4, 4000)
        if shape.causal and shape.offset < 0:
            continue
        for G in (1, 2, 4):
            if not rh.spill_never_wins(d, M, G):
                continue
            best = rh.RowHybridTiling(M, "abc", G)
            for modes in ("ac", "a", "c"):
                if rh.blocks(shape, M, modes, G) is None:
                    continue
                t = rh.RowHybridTiling(M, modes, G)
                assert rh.blocks(shape, M, "abc", G) is not None
                assert (a.cost(shape, best).io.total, a.steps(shape, best)) <= \
                    (a.cost(shape, t).io.total, a.steps(shape, t))
                checked += 1
    assert checked > 500


def test_square_tiling_ranks_by_the_unmasked_phase_one_count():
    from attnio.algorithms import square_tiling as sq

    for shape in (Shape(100, 70, 8), Shape(4096, 4096, 64, causal=True), Shape(9, 3000, 40)):
        plain = shape.unmasked()
        for br, bc in [(1, 1), (3, 7), (64, 70), (100, 4096), (5000, 33)]:
            for order in sq.ORDERS:
                for stable, spill in [(True, "exp"), (True, "scores"), (False, "exp")]:
                    exact = sum(sq._phase1_io(plain, br, bc, order, stable, spill))
                    assert sq._phase1_plain(shape, sq._maxima(stable, spill),
                                            (br, bc, 1, order)) == exact


def test_row_hybrid_leaves_out_only_tilings_that_cannot_be_chosen():
    """row_hybrid skips modes "ac" where mode b can never be taken (spill_never_wins): there the
    blocks of "abc" are those of "ac", so the listing before it wins every tie (unmasked, "a"
    and "c" too: "abc" has at most their blocks); and modes "a" where its blocks would be more
    than MAX_BLOCKS (resident_blocks_least, a lower bound on them, is above it): blocks()
    refuses those.  The search over what is left chooses what the full list would."""
    from attnio.algorithms import row_hybrid as rh
    from attnio.algorithms.base import divisors_upto

    a, skipped = _alg.get("row_hybrid"), 0
    for kw in GRID + PRUNED_EXTRA:
        shape, M = _shape(kw)
        if mapper.can_run(a, shape, M) is not None:
            continue
        full = []
        for G in divisors_upto(shape.group, min(64, M)):
            if rh.spill_never_wins(shape.d, M, G):
                skipped += 1
                abc, ac = rh.blocks(shape, M, "abc", G), rh.blocks(shape, M, "ac", G)
                assert ac is None or ac == abc
                assert abc is None or all(m != "b" for *_, m in abc)
            full += [rh.RowHybridTiling(M, m, G) for m in ("abc", "ac", "a", "c")
                     if rh.blocks(shape, M, m, G) is not None]
            least, resident = rh.resident_blocks_least(shape, M, G), rh.blocks(shape, M, "a", G)
            assert resident is None or least <= len(resident) + 1e-9
            assert least <= rh.MAX_BLOCKS + 0.5 or resident is None
        found, ref = mapper.search(a, shape, M), mapper._least(a, shape, M, full)
        assert (found is None) == (ref is None)
        if found is not None and ref is not None:
            assert (found.tiling, found.predicted, found.steps) == \
                (ref.tiling, ref.predicted, ref.steps)
    assert skipped > 20


if __name__ == "__main__":  # python tests/planner/test_plan_regression.py --write
    if sys.argv[1:] != ["--write"]:
        raise SystemExit("usage: python tests/planner/test_plan_regression.py --write")
    data = {"searches": [_record(kw) for kw in GRID],
            "factors": {str(i): _factors(GRID[i]) for i in FACTOR_SHAPES},
            "plans": {str(i): _plan_level(GRID[i]) for i in range(0, len(GRID), 5)}}
    os.makedirs(os.path.dirname(DATA), exist_ok=True)
    with open(DATA, "w") as f:  # one workload a line: diffs name the workloads that changed
        f.write("{\n")
        for k, (key, v) in enumerate(sorted(data.items())):
            items = (v if isinstance(v, list) else
                     [{"i": i, "value": x} for i, x in sorted(v.items(), key=lambda kv: int(kv[0]))])
            f.write(f" {json.dumps(key)}: [\n")
            f.write(",\n".join("  " + json.dumps(x, sort_keys=True) for x in items))
            f.write("\n ]" + (",\n" if k < len(data) - 1 else "\n"))
        f.write("}\n")
    print(f"wrote {DATA}: {len(GRID)} workloads")
