"""The mapper's branch and bound over a schedule's families of tilings (issue 33: the searches
that lived inside flash2 and small_cache_backward are the mapper's): every family's bound is
below every member's count, the pruned search picks what scoring every member picks, and it
lists a family only while its bound can still win."""

from __future__ import annotations

import pytest

from attnio import algorithms as _alg
from attnio.algorithms import mapper
from attnio.algorithms.protocol import Families
from attnio.core.memory import IOCount
from attnio.core.workload import Shape

#: schedules that declare families (``_families``), forward and backward
FAMILIES = [s for s in (*_alg.all_algorithms(exact=True), *_alg.all_backwards())
            if getattr(s, "_families", None) is not None]
WORKLOADS = [(Shape.make(50, 16, causal=True), 300),
             (Shape.make(40, 8, Nkv=70, heads=4, kv_heads=2, causal="top_left"), 5000),
             (Shape.make(64, 8, causal=True, window=9), 600),
             (Shape.make(300, 32, causal=True), 13615),
             (Shape.make(777, 24, heads=6, kv_heads=2, causal=True), 300),
             (Shape.make(600, 16, Nkv=1000, causal=True), 5000),
             (Shape.make(256, 16), 4096)]


def test_flash2_square_tiling_standard_and_the_small_cache_backwards_declare_families():
    names = {s.name for s in FAMILIES}
    assert {"flash2", "square_tiling", "standard", "small_cache_backward",
            "fused_small_cache_backward"} <= names


@pytest.mark.parametrize("s", FAMILIES, ids=lambda s: s.name)
def test_every_family_bounds_its_members_and_the_search_equals_scoring_them_all(s):
    checked = 0
    for shape, M in WORKLOADS:
        if mapper.can_run(s, shape, M) is not None:
            continue
        families = s._families(shape, M)
        if families is None:  # (flash2 unmasked: every candidate scored)
            continue
        every = []  # (count, steps, place, tiling) of every member that fits
        for i, lower in enumerate(families.lower):
            prev = None  # member_lower never falls along a family (the mapper stops a run on it)
            for j, t in enumerate(families.members(i)):
                if families.member_lower is not None:
                    low = families.member_lower(i, t)
                    assert lower <= low * (1 + 1e-12) and (prev is None or prev <= low), \
                        (s.name, shape, t)
                    assert low <= s.cost(shape, t).io.total * (1 + 1e-12), (s.name, shape, t)
                    prev = low
                if s.footprint(shape, t) > M:
                    continue
                count = s.cost(shape, t).io.total
                assert lower <= count * (1 + 1e-12), (s.name, shape, t)
                if families.refined is not None:
                    assert families.refined(i) <= count * (1 + 1e-12), (s.name, shape, t)
                place = (i, j) if families.order is None else families.order(i, j, t)
                every.append((count, s.steps(shape, t), place, t))
        found = mapper.search(s, shape, M)
        assert found is not None and every
        least = min(every, key=lambda c: c[:3])
        assert (found.predicted.total, found.steps, found.tiling) == \
            (least[0], least[1], least[3])
        assert found.tried == sum(c[0] == least[0] for c in every)
        # the same choice as the plain loop over the candidates (ties included)
        full = mapper.search(s, shape, M, s.candidate_tilings(shape, M))
        assert full is not None
        assert (full.tiling, full.predicted, full.steps) == \
            (found.tiling, found.predicted, found.steps)
        checked += 1
    assert checked >= 3


def test_pruned_tilings_are_the_members_of_least_count_in_order():
    flash2 = _alg.get("flash2")
    for shape, M in WORKLOADS:
        cands = [t for t in flash2.candidate_tilings(shape, M) if flash2.footprint(shape, t) <= M]
        pruned = mapper.pruned_tilings(flash2, shape, M)
        if not shape.causal:  # no families: every candidate
            assert pruned == list(flash2.candidate_tilings(shape, M))
            continue
        least = min(flash2.cost(shape, t).io.total for t in cands)
        assert pruned == [t for t in cands if flash2.cost(shape, t).io.total == least]


def test_a_plans_second_ask_for_flash2s_ties_is_the_first_answer():
    """flash2's search and window_cache's streamed tilings (``pruned_tilings``) share one branch
    and bound per (schedule, shape, M): the second ask is a cache hit, the same choice and
    tilings as a fresh search."""
    flash2 = _alg.get("flash2")
    for shape, M in WORKLOADS:
        if mapper.can_run(flash2, shape, M) is not None:
            continue
        mapper._default_ties.cache_clear()
        found = mapper.search(flash2, shape, M)
        hits = mapper._default_ties.cache_info().hits
        pruned = mapper.pruned_tilings(flash2, shape, M)
        families = flash2._families(shape, M)
        if families is None:
            continue
        assert mapper._default_ties.cache_info().hits == hits + 1
        fresh = mapper._family_ties(flash2, shape, M, families)
        assert pruned == [t for _, t, _ in fresh]
        assert found == mapper._least_families(flash2, shape, M, families)


class _Toy:
    """A schedule whose count is its tiling (an int), listed through families."""

    name = "toy"

    def __init__(self) -> None:
        self.listed: list[str] = []

    def footprint(self, shape, t):
        return 0 if t >= 0 else 10**9  # a negative tiling does not fit

    def steps(self, shape, t):
        return t % 2

    def _total(self, shape, t):
        return IOCount(reads=abs(t), writes=0)

    def families(self, fams):
        """``fams``: (label, lower, members, refined or None) per family."""
        def members(i):
            self.listed.append(fams[i][0])
            return fams[i][2]

        return Families([f[1] for f in fams], members,
                        lambda i: fams[i][3] if fams[i][3] is not None else fams[i][1])


def test_a_family_is_listed_only_while_its_bound_can_win():
    toy, shape = _Toy(), Shape.make(8, 2)
    fams = toy.families([("far", 50, [60], None),             # bound above the least: never listed
                         ("refined away", 5, [40], 30),       # refined above the least: skipped
                         ("first", 1, [-3, 11, 10], None),    # -3 does not fit
                         ("tie", 10, [10, 12], None)])
    found = mapper._least_families(toy, shape, 100, fams)
    assert found is not None
    # the least count 10 twice (the "first" family's, then "tie"'s): fewest steps, then the
    # first in the families' order
    assert (found.tiling, found.predicted.total, found.steps, found.tried) == (10, 10, 0, 2)
    assert toy.listed == ["first", "tie"]


def test_no_member_that_fits_gives_none():
    toy, shape = _Toy(), Shape.make(8, 2)
    assert mapper._least_families(toy, shape, 100, toy.families([("x", 0, [-1], None)])) is None
    assert mapper._least_families(toy, shape, 100, toy.families([])) is None


def test_member_lower_stops_a_family_once_its_bound_passes_the_least():
    toy, shape = _Toy(), Shape.make(8, 2)
    scored: list[int] = []
    total = toy._total

    def counted(shape, t):
        scored.append(t)
        return total(shape, t)

    toy._total = counted  # type: ignore[method-assign]
    runs = [[4, 6, 9, 20], [5, 7, 30]]  # each member bounded at its count less 2: sorted runs
    fams = Families([r[0] - 2 for r in runs], lambda i: runs[i],
                    member_lower=lambda i, t: t - 2)
    found = mapper._least_families(toy, shape, 100, fams)
    assert found is not None and (found.tiling, found.tried) == (4, 1)
    assert scored == [4, 6, 5]  # each run stops at its first member bounded above 4 (9, 7)


def test_standard_masked_search_scores_no_more_than_its_runs_need():
    """Standard's masked grid through the mapper: the least of every grid point, found while
    scoring a few of them (each run stops once its bound passes the least count)."""
    std = _alg.get("standard")
    shape, M = Shape.make(4096, 64, causal=True), 65536
    every = [t for t in std.candidate_tilings(shape, M) if std.footprint(shape, t) <= M]
    least = min(std.cost(shape, t).io.total for t in every)
    calls: list[object] = []
    fams = std._families(shape, M)
    assert fams is not None and fams.member_lower is not None
    def members(i):
        calls.append(i)
        return fams.members(i)

    probe = Families(fams.lower, members, order=fams.order, member_lower=fams.member_lower)
    found = mapper._least_families(std, shape, M, probe)
    assert found is not None and found.predicted.total == least
    assert found == mapper.search(std, shape, M)
    assert len(calls) < len(fams.lower)  # some runs never listed



def test_standard_runs_at_once_are_the_grid_walk():
    """standard's runs over the (bk, bm, onepass) grid, taken at once (numpy): for each point
    in the grid's order, the largest bn whose matmul tiles (and, two-pass, the softmax tile)
    fit, as a walk down the sides finds it, and the run's bound, on random masked shapes."""
    import random

    from attnio.algorithms import standard as std
    from attnio.core import masks

    rng = random.Random(17)
    for _ in range(300):
        N = rng.choice([rng.randint(1, 80), rng.randint(1, 10**5), 10**9])
        Nkv = rng.choice([N, rng.randint(1, 10**5)])
        d = rng.choice([1, 3, 64, 128, rng.randint(1, 300)])
        shape = Shape.make(N, d, Nkv=Nkv, causal=rng.choice([True, "top_left"]),
                           heads=rng.choice([1, 8]))
        M = rng.choice([rng.randint(4, 5000), rng.randint(5000, 10**7), 2**40])
        sides, bks = std._sides(shape, M)
        pall = masks.row_counts(shape).pairs
        runs, lows = std.ALGORITHM._runs(shape, M, sides, bks, pall)
        want = []
        for ik, bk in enumerate(bks):
            bkc = min(bk, d)
            for im, bm in enumerate(sides):
                bmc = min(bm, N)
                for onepass in (False, True):
                    t = len(sides) - 1
                    while t >= 0 and (bmc * bkc + min(sides[t], Nkv) * (bmc + bkc) > M or (
                            not onepass and bmc * min(sides[t], Nkv) + 3 * bmc > M)):
                        t -= 1
                    if t >= 0:
                        want.append((ik, im, onepass, t))
        assert runs == want
        for (ik, im, onepass, t), lo in zip(runs, lows, strict=True):
            p = 1 if onepass else 2
            bound = (d * pall / sides[t] + 2 * d * pall / sides[im]
                     + (p + -(-d // bks[ik]) + 2) * pall + N * d)
            assert lo == pytest.approx(shape.n_heads * bound, rel=1e-12)


def test_flash2_refined_family_bound_is_below_every_member_on_random_shapes():
    """flash2's ``refined`` family bound (the keys its blocks see, :func:`row_stream_lower`) is
    at most every member's count on random causal shapes: both alignments, Nkv above and below
    Nq (rows clipped: the bound falls back to 0 keys), grouped heads, small and large M; and the
    search by it is the least (count, steps) of scoring every member."""
    import random

    f2 = _alg.get("flash2")
    rng = random.Random(47)
    refined_seen = 0
    for _ in range(150):
        N = rng.choice([rng.randint(1, 60), rng.randint(1, 3000)])
        Nkv = rng.choice([N, rng.randint(1, 60), rng.randint(1, 3000)])
        d = rng.choice([1, 2, 8, 64])
        kvh, g = rng.choice([1, 2]), rng.choice([1, 2, 4])
        shape = Shape.make(N, d, Nkv=Nkv, causal=rng.choice([True, "top_left"]),
                           heads=kvh * g, kv_heads=kvh)
        M = rng.choice([rng.randint(f2.min_M(shape), 400), rng.randint(400, 10**5)])
        fams = f2._families(shape, M)
        assert fams is not None and fams.refined is not None
        every = []
        for i, lower in enumerate(fams.lower):
            for t in fams.members(i):
                if f2.footprint(shape, t) > M:
                    continue
                count = f2.cost(shape, t).io.total
                assert lower <= count * (1 + 1e-12), (shape, M, t)
                assert fams.refined(i) <= count * (1 + 1e-12), (shape, M, t)
                refined_seen += fams.refined(i) > lower
                every.append((count, f2.steps(shape, t)))
        if every:
            found = mapper.search(f2, shape, M)
            assert found is not None
            assert (found.predicted.total, found.steps) == min(every)
    assert refined_seen > 100  # the refined bound is tighter than lower on many members
