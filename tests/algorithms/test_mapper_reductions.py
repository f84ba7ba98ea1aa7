"""The mapper's declared reductions (issue 33: the searches that lived inside standard,
square_tiling, small_cache_backward and group_spill_backward are the mapper's): each primitive
does what it says on plain data, and each reduction a schedule declares finds the same least
as brute force over the unreduced mapspace on small shapes."""

from __future__ import annotations

import dataclasses
import itertools
import random

import numpy as np
import pytest

from attnio import algorithms as _alg
from attnio.algorithms import mapper
from attnio.algorithms.group_spill_backward import GroupSpillTiling
from attnio.algorithms.small_cache_backward import SmallCacheTiling
from attnio.algorithms.square_tiling import SquareTilingTiling, _fp2
from attnio.algorithms.standard import StandardTiling, _sides
from attnio.core.workload import Shape

UNMASKED = [(Shape.make(17, 4), 40), (Shape.make(40, 8, Nkv=23, heads=4, kv_heads=2), 84),
            (Shape.make(64, 16), 256), (Shape.make(30, 8, Nkv=70), 300),
            (Shape.make(50, 16), 100), (Shape.make(96, 12), 1500)]
MASKED = [(Shape.make(50, 16, causal=True), 300),
          (Shape.make(40, 8, Nkv=70, heads=4, kv_heads=2, causal="top_left"), 600),
          (Shape.make(64, 8, causal=True, window=9), 600)]


# ------------------------------------------------------------------------------ primitives
def test_dominated_is_the_largest_value_that_fits():
    rng = random.Random(0)
    for _ in range(300):
        values = sorted(rng.sample(range(1, 200), rng.randint(0, 12)))
        most = rng.randint(0, 200)
        brute = max((v for v in values if v <= most), default=None)
        assert mapper.dominated(values, most) == brute


def test_completion_is_the_first_side_of_least_score():
    rng = random.Random(1)
    for _ in range(300):
        sides = [(rng.randint(0, 5), i) for i in range(rng.randint(0, 9))]
        found = mapper.completion(sides, lambda s: s[0])
        if not sides:
            assert found is None
            continue
        least = min(s[0] for s in sides)
        first = next(s for s in sides if s[0] == least)
        assert found == (least, first)
    # a generator of sides is consumed once; keys compare as tuples (count, then steps)
    assert mapper.completion((x for x in (3, 1, 2, 1)), lambda x: (x, 0)) == ((1, 0), 1)


def test_completion_by_branch_and_bound_is_the_least_and_scores_fewer():
    """With a declared lower bound the mapper scores sides in order of it and stops once the
    bound passes the least count: the same least key as scoring every side, fewer scored."""
    rng = random.Random(2)
    saved = 0
    for _ in range(300):
        sides = list(range(rng.randint(1, 12)))
        counts = [rng.randint(0, 50) for _ in sides]
        slack = [rng.randint(0, 10) for _ in sides]
        scored: list[int] = []

        def key(s: int) -> tuple[int, int]:
            scored.append(s)
            return (counts[s], s)

        found = mapper.completion(sides, key, lower=lambda s: counts[s] - slack[s])
        least = min((counts[s], s) for s in sides)
        assert found == (least, least[1]), (counts, slack)
        saved += len(sides) - len(scored)
    assert saved > 0
    assert mapper.completion([], lambda s: s, lower=lambda s: s) is None


def test_completions_are_each_rows_completion():
    """mapper.completions (numpy, keyed by (count, steps)) picks, row by row, what completion
    picks over the valid columns in order (ties: the first), -1 where none is valid."""
    rng = np.random.default_rng(5)
    for _ in range(200):
        rows, cols = rng.integers(1, 6), rng.integers(1, 9)
        counts = rng.integers(0, 4, size=(rows, cols))  # few values: many ties
        steps = rng.integers(0, 3, size=(rows, cols))
        valid = rng.random((rows, cols)) < 0.7
        got = mapper.completions(counts, steps, valid)
        for i in range(rows):
            best = mapper.completion([j for j in range(cols) if valid[i, j]],
                                     lambda j, i=i: (int(counts[i, j]), int(steps[i, j])))
            assert got[i] == (-1 if best is None else best[1])


def test_standard_unmasked_reduction_by_numpy_equals_the_loop():
    """standard's unmasked candidates over the (bk, bm) grid at once (int64) are the loop's,
    the same tilings in the same order, on random shapes and M (small, large, powers of 2)."""
    alg = _alg.get("standard")
    rng = random.Random(1)
    for _ in range(600):
        Nq = rng.choice([rng.randint(1, 50), rng.randint(1, 5000), 2 ** rng.randint(0, 20)])
        Nkv = rng.choice([Nq, rng.randint(1, 5000)])
        d = rng.choice([rng.randint(1, 300), 64, 128])
        M = rng.choice([rng.randint(4, 5000), rng.randint(4, 10 ** 6), 2 ** rng.randint(2, 24)])
        shape = Shape.make(Nq, d, Nkv=Nkv)
        sides, bks = _sides(shape, M)
        assert (alg._unmasked_many(shape, M, sides, bks)
                == alg._unmasked_loop(shape, M, sides, bks)), (Nq, Nkv, d, M)


def test_preranked_is_sorted_then_cut_with_ties_in_order():
    rng = random.Random(2)
    for _ in range(300):
        items = [(rng.randint(0, 4), i) for i in range(rng.randint(0, 30))]
        keep = rng.randint(1, 10)
        assert mapper.preranked(items, lambda c: c[0], keep) == \
            sorted(items, key=lambda c: c[0])[:keep]


# ------------------------------------------------------------------------------ standard
@pytest.mark.parametrize("shape,M", UNMASKED, ids=str)
def test_standard_unmasked_reduction_finds_the_least_of_the_whole_grid(shape, M):
    """bn dominated (the largest that fits) and each (bk, onepass) completed with its bm: the
    least (count, steps) over every (bm, bn, bk, onepass) of the grid that fits."""
    s = _alg.get("standard")
    sides, bks = _sides(shape, M)
    grid = [StandardTiling(bm, bn, bk, op) for bk in bks for bm in sides for bn in sides
            for op in (False, True)]
    every = [(s.cost(shape, t).io.total, s.steps(shape, t)) for t in grid
             if s.footprint(shape, t) <= M]
    found = mapper.search(s, shape, M)
    assert found is not None and every
    assert (found.predicted.total, found.steps) == min(every)
    # and each (bk, onepass)'s candidate is that slice of the grid's least
    for t in s.candidate_tilings(shape, M):
        part = [(s.cost(shape, u).io.total, s.steps(shape, u)) for u in grid
                if (u.bk, u.onepass) == (t.bk, t.onepass) and s.footprint(shape, u) <= M]
        assert (s.cost(shape, t).io.total, s.steps(shape, t)) == min(part)


# ------------------------------------------------------------------------------ square tiling
@pytest.mark.parametrize("stable,spill", [(True, "scores"), (True, "exp"), (False, "exp")])
@pytest.mark.parametrize("shape,M", UNMASKED, ids=str)
def test_square_tiling_unmasked_families_find_the_least_over_every_key_slice(shape, M, stable,
                                                                          spill):
    """Unmasked, each family's bound is its members' exact count, and the key slices Bk2 are
    a dominated dimension: the search's least (count, steps) is that of every combination of
    the Phase-1 choices kept and the Phase-2 rungs with every Bk2 that fits (the stable exp
    spill: every divisor of Bc)."""
    s = _alg.get("square_tiling")
    if M < s.min_M(shape, stable=stable):
        pytest.skip("M below the least")
    fams = s._families(shape, M, stable=stable, spill=spill)
    groups, ladder, paper = s._pieces(shape, M, stable, spill)
    for i, low in enumerate(fams.lower):  # the bound is the count of every member
        for t in fams.members(i):
            assert s.cost(shape, t).io.total == low
    every = []
    for ((br, bc, bd, order), _), (bd2, br2, _) in itertools.product(groups, ladder):
        for k in range(1, shape.Nkv + 1):
            if spill == "exp" and stable and bc < shape.Nkv and bc % k:
                continue
            if _fp2(br2, k, bd2, stable, spill) > M:
                continue
            t = SquareTilingTiling(br, bc, bd, br2, k, bd2, order, stable, spill)
            every.append((s.cost(shape, t).io.total, s.steps(shape, t)))
    if paper is not None:
        every.append((s.cost(shape, paper).io.total, s.steps(shape, paper)))
    found = mapper.least(s, shape, M, stable=stable, spill=spill)
    assert found is not None and every
    assert (found.predicted.total, found.steps) == min(every)
    # the plain loop over the candidates picks the same tiling (ties in the families' order)
    full = mapper.search(s, shape, M, s.candidate_tilings(shape, M, stable=stable, spill=spill))
    assert full is not None and full.tiling == found.tiling


@pytest.mark.parametrize("shape,M", UNMASKED + MASKED, ids=str)
def test_square_tiling_phase1_cuts_are_the_declared_ranking(shape, M):
    """The Phase-1 choices kept are the best of every Phase-1 candidate by exact count (then
    fewer tiles), as many as declared (1; 12 with the exp spill's maxima)."""
    from attnio.algorithms.square_tiling import _phase1_io

    s = _alg.get("square_tiling")
    for stable, spill, keep in ((True, "scores", 1), (True, "exp", 12)):
        groups, _, _ = s._pieces(shape, M, stable, spill)
        for (c, e1) in groups:
            assert e1 == sum(_phase1_io(shape, c[0], c[1], c[3], stable, spill))
        assert len(groups) <= keep
        keys = [(e1, -(-shape.Nq // c[0]) * -(-shape.Nkv // c[1])) for c, e1 in groups]
        assert keys == sorted(keys)
        if not shape.causal:  # no pre-ranking by estimate: the best of every candidate
            p1 = set(s._phase1_candidates(shape, M, stable, spill))
            if spill == "scores":
                p1 |= set(s._phase1_candidates(shape, M, stable, "exp"))
            every = sorted(sum(_phase1_io(shape, c[0], c[1], c[3], stable, spill))
                           for c in p1)
            assert [e1 for _, e1 in groups] == every[:len(groups)]


# ------------------------------------------------------------------------------ completions
@pytest.mark.parametrize("shape,M", UNMASKED + MASKED, ids=str)
def test_small_cache_completion_is_the_least_output_block(shape, M):
    """Each score tile completed by the mapper: the output block (a, bc) of least count over
    every one the schedule lists (scored through the full count), the first on ties."""
    for name in ("small_cache_backward", "fused_small_cache_backward"):
        s = _alg.get_backward(name)
        if mapper.can_run(s, shape, M) is not None:
            continue
        tiles, bcs = s._tiles(shape, M)
        assert tiles
        for bm, bn, bk in tiles:
            t = s._complete(shape, M, bm, bn, bk, bcs)
            every = []
            for bc in bcs:
                a_max = (M - bc) // (bc + 1)
                for a in sorted({min(a_max, max(bm, bn)), min(a_max, bm), min(a_max, bn)}):
                    if a >= 1:
                        u = SmallCacheTiling(bm, bn, bk, a, bc, 1)
                        every.append(s._total(shape, u).total)
            if not every:
                assert t is None
                continue
            assert t is not None and s._total(shape, t).total == min(every)
            assert s.footprint(shape, dataclasses.replace(t, br=1)) <= M


@pytest.mark.parametrize("shape,M", UNMASKED + MASKED, ids=str)
def test_group_spill_completion_is_the_least_output_block(shape, M):
    """Each pass-A choice completed by the mapper: (bc, ka) of least count over every bc in
    {d, ⌈d/2⌉} and every ka that fits (the unreduced side, not only the two listed), and the
    8 kept are those of least count."""
    from attnio.algorithms.group_split_backward import pass_a_sides

    s = _alg.get_backward("group_spill_backward")
    if mapper.can_run(s, shape, M) is not None:
        pytest.skip("cannot run")
    cands = s.candidate_tilings(shape, M)
    assert 1 <= len(cands) <= 8
    d, Nkv = shape.d, shape.Nkv
    least_per_choice = []
    for G, br, bc2_max in pass_a_sides(shape, M):
        for bc2 in sorted({bc2_max, max(1, bc2_max // 2)}):
            every = [s._total(shape, GroupSpillTiling(G, br, bc2, ka, bc, 1)).total
                     for bc in {d, -(-d // 2)}
                     for ka in range(1, (M - bc) // (bc + 1) // bc2 + 1)
                     if min(ka * bc2, Nkv) == ka * bc2 or ka == -(-Nkv // bc2)]
            if every:
                least_per_choice.append(min(every))
    counts = [s._total(shape, t).total for t in cands]
    assert counts == sorted(counts)
    assert counts == sorted(least_per_choice)[:len(counts)]


def _ladder_by_loop(total: int, vmax: int) -> tuple[int, ...]:
    """common.ladder as first written: the geometric spread by a float loop every call."""
    vmax = min(total, vmax)
    if vmax < 1:
        return ()
    vals = {vmax}
    b = 1.0
    while b <= vmax:
        vals.add(int(b))
        b *= 1.18
    t0 = -(-total // vmax)
    vals.update(-(-total // t) for t in range(t0, t0 + 8))
    return tuple(sorted({x for v in vals if 1 <= v <= vmax
                         for x in (v, -(-total // -(-total // v)))}))


@pytest.mark.parametrize("total", [1, 2, 7, 64, 100, 3000, 4096, 65536, 10**9, 2**64 - 1, 2**70])
def test_ladder_from_its_table_equals_the_float_loop(total):
    from attnio.algorithms.common import ladder

    for vmax in (-1, 0, 1, 2, 5, 63, 64, 1000, 65535, 10**6, 2**40, 2**64 - 1, 2**64, 2**71):
        assert ladder(total, vmax) == _ladder_by_loop(total, vmax), (total, vmax)


def test_least_few_by_branch_and_bound_equals_sorting_all_and_keys_fewer():
    rng = random.Random(9)
    for _ in range(300):
        items = [(rng.randint(0, 50), rng.randint(0, 3)) for _ in range(rng.randint(1, 40))]
        keep = rng.randint(1, 6)
        seen: list = []

        def key(t):
            seen.append(t)
            return t  # (count, steps): ties broken by the order of items

        def lower(t):
            return t[0] - rng.random() * 5  # a bound: at most the count

        assert mapper.least_few(items, key, lower, keep) == sorted(items, key=lambda t: t)[:keep]
        assert len(seen) <= len(items)
        # the bounds given at once (a numpy array over the items): the same
        lows = np.array([lower(t) for t in items])
        assert (mapper.least_few(items, key, None, keep, lowers=lows)
                == sorted(items, key=lambda t: t)[:keep])
    # an exact bound: only the keep least are keyed
    items = list(range(100, 0, -1))
    keyed: list = []
    assert mapper.least_few(items, lambda t: keyed.append(t) or t, float, 3) == [1, 2, 3]
    assert sorted(keyed) == [1, 2, 3]
