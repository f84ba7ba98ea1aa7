"""The mapper's phase-separable search (issue 33: stream_tiling's, window_square's and
window_stream's per-phase searches are the mapper's): a schedule whose count and steps are sums
of independent phases declares them (:class:`~attnio.algorithms.protocol.Phases`), and the
mapper finds each phase's best, applies the declared cut and seed, and takes the product.  With
nothing cut it finds the least of the whole product (brute force), ties included; the declared
cut and seed are applied as declared; and the schedules' declared phase costs add up to their
closed forms."""

from __future__ import annotations

import dataclasses
import itertools
import random
from typing import Any

import numpy as np
import pytest

from attnio import algorithms as _alg
from attnio.algorithms import mapper
from attnio.algorithms.protocol import Mapspace, Phase, Phases
from attnio.core.memory import IOCount
from attnio.core.workload import Shape

SHAPE = Shape.make(8, 2)


class _Table:
    """One toy phase: choice i costs (count[i], steps[i]) and takes fp[i] words."""

    def __init__(self, rng: random.Random, n: int) -> None:
        self.count = [rng.randint(0, 12) for _ in range(n)]  # small: many ties
        self.steps = [rng.randint(0, 3) for _ in range(n)]
        self.fp = [rng.randint(1, 10) for _ in range(n)]
        self.calls = 0

    def cost(self, i: int) -> tuple[int, int]:
        self.calls += 1
        return self.count[i], self.steps[i]


class _Toy:
    """A schedule whose tiling is a pair (a, b) of choices of two phases (:class:`_Table`):
    count and steps are the sums, the footprint the larger phase's."""

    name = "toy_phases"

    def __init__(self, first: _Table, second: _Table, **phase: Any) -> None:
        self.t = (first, second)
        self.phase = phase  # more Phase fields, the same for both phases

    def mapspace(self, shape: Shape, M: int, **options: Any) -> Mapspace[Any]:
        return Mapspace(self.name, shape, M, (), None,
                        lambda: mapper.phase_tilings(self, shape, M))

    def _phases(self, shape: Shape, M: int, **options: Any) -> Phases[tuple[int, int]]:
        return Phases(tuple(Phase(cost=t.cost, footprint=t.fp.__getitem__,
                                  candidates=lambda t=t: range(len(t.count)), **self.phase)
                            for t in self.t), lambda a, b: (a, b))

    def footprint(self, shape: Shape, t: tuple[int, int]) -> int:
        return max(self.t[0].fp[t[0]], self.t[1].fp[t[1]])

    def _total(self, shape: Shape, t: tuple[int, int]) -> IOCount:
        return IOCount(self.t[0].count[t[0]] + self.t[1].count[t[1]], 0)

    def steps(self, shape: Shape, t: tuple[int, int]) -> int:
        return self.t[0].steps[t[0]] + self.t[1].steps[t[1]]


def _brute(toy: _Toy, M: int) -> tuple[int, int, tuple[int, int]] | None:
    """The least (count, steps, tiling) over every pair that fits: the whole product."""
    a, b = toy.t
    every = [(toy._total(SHAPE, t).total, toy.steps(SHAPE, t), t)
             for t in itertools.product(range(len(a.count)), range(len(b.count)))
             if toy.footprint(SHAPE, t) <= M]
    return min(every) if every else None


@pytest.mark.parametrize("seed", range(200))
def test_the_search_finds_the_least_of_the_whole_product_ties_included(seed):
    rng = random.Random(seed)
    toy = _Toy(_Table(rng, rng.randint(1, 9)), _Table(rng, rng.randint(1, 9)),
               offer=rng.randint(1, 4))
    M = rng.randint(1, 10)
    want = _brute(toy, M)
    found = mapper.search(toy, SHAPE, M)
    if want is None:
        assert found is None
        return
    assert found is not None
    assert (found.predicted.total, found.steps, found.tiling) == want
    product = mapper.phase_tilings(toy, SHAPE, M)  # the mapspace's candidates
    assert product[0] == found.tiling and found.tried == len(product)
    assert all(toy.footprint(SHAPE, t) <= M for t in product)
    # the same choice as the plain loop over the product
    plain = mapper.search(toy, SHAPE, M, product)
    assert plain is not None and (plain.tiling, plain.steps) == (found.tiling, found.steps)


@pytest.mark.parametrize("at_once", [False, True])
@pytest.mark.parametrize("seed", range(100))
def test_branch_and_bound_on_a_lower_bound_keeps_the_same_best(seed, at_once):
    """A proven bound, one candidate at a time (``lower``) or the pool's bounds in one call
    (``lowers``, e.g. numpy), prunes to the same best whatever the slack."""
    rng = random.Random(seed)
    table = _Table(rng, rng.randint(1, 40))
    slack = [rng.choice([0, 0, 1, 3]) for _ in table.count]  # a proven bound: count - slack
    k = rng.randint(1, 5)
    M = rng.randint(1, 10)
    want = sorted((table.count[i], table.steps[i], i) for i in range(len(table.count))
                  if table.fp[i] <= M)[:k]
    if at_once:
        bound = dict(lowers=lambda cs: np.array([table.count[i] - slack[i] for i in cs], float))
    else:
        bound = dict(lower=lambda i: table.count[i] - slack[i])
    phase = Phase(cost=table.cost, footprint=table.fp.__getitem__,
                  candidates=lambda: range(len(table.count)), offer=k, **bound)
    assert mapper.phase_best(phase, M) == [i for _, _, i in want]


@pytest.mark.parametrize("how", ["row_costs", "row_lowers"])
@pytest.mark.parametrize("seed", range(100))
def test_rows_given_over_numpy_keep_the_same_best(seed, how):
    """Choices given as the rows of an int64 array (repeated, and some among the candidates
    too), scored at once (``row_costs``) or by branch and bound on their bounds
    (``row_lowers``), make the same best as every choice scored one by one: ties by count,
    steps, then the row."""
    rng = random.Random(seed)
    n = rng.randint(1, 40)
    count = [rng.randint(0, 6) for _ in range(n)]
    steps = [rng.randint(0, 2) for _ in range(n)]
    slack = [rng.choice([0, 0, 1, 3]) for _ in range(n)]
    k = rng.randint(1, 5)

    def cost(c: tuple[int, int]) -> tuple[int, int]:
        return count[c[0]], steps[c[0]]

    every = [(i, rng.randint(0, 2)) for i in range(n)]
    in_rows = [c for c in every if rng.random() < 0.7]
    rows = np.array(in_rows + [rng.choice(in_rows) for _ in range(len(in_rows) // 3)]
                    if in_rows else np.zeros((0, 2)), dtype=np.int64).reshape(-1, 2)
    rest = [c for c in every if c not in in_rows or rng.random() < 0.3]
    want = sorted((count[c[0]], steps[c[0]], c) for c in every)[:k]
    if how == "row_costs":
        extra = dict(row_costs=lambda r: (np.array([count[i] for i in r[:, 0]], dtype=np.int64),
                                          np.array([steps[i] for i in r[:, 0]],
                                                   dtype=np.int64)))
    else:
        extra = dict(row_lowers=lambda r: np.array([count[i] - slack[i] for i in r[:, 0]],
                                                   dtype=float))
    phase = Phase(cost=cost, footprint=None, candidates=lambda: rest,
                  lower=lambda c: count[c[0]] - slack[c[0]], rows=lambda: rows, offer=k,
                  **extra)
    assert mapper.phase_best(phase, 10) == [c for _, _, c in want]


def test_a_phase_declares_its_bound_once():
    with pytest.raises(ValueError, match="lower or lowers"):
        Phase(cost=len, footprint=None, lower=float, lowers=list)


def test_branch_and_bound_scores_only_what_can_still_be_among_the_best():
    table = _Table(random.Random(0), 0)
    table.count, table.steps, table.fp = list(range(100)), [0] * 100, [1] * 100
    phase = Phase(cost=table.cost, footprint=table.fp.__getitem__,
                  candidates=lambda: reversed(range(100)), offer=3,
                  lower=table.count.__getitem__)  # exact bounds
    assert mapper.phase_best(phase, 10) == [0, 1, 2]
    assert table.calls <= 4  # the bound of the fourth passes the third count: stop


def test_the_declared_cut_keeps_the_items_of_least_estimate_and_expands_them():
    table = _Table(random.Random(1), 0)
    table.count = [50, 40, 30, 20, 10, 0]  # the best (5) has the worst estimate
    table.steps, table.fp = [0] * 6, [1] * 6
    scored: list[int] = []

    def cost(i: int) -> tuple[int, int]:
        scored.append(i)
        return table.cost(i)

    phase = Phase(cost=cost, footprint=table.fp.__getitem__, candidates=lambda: [0],
                  ranked=lambda: [(10 - r, r) for r in range(1, 6)],  # (estimate, item)
                  keep=2, expand=lambda r: [r] if r != 4 else [], offer=2)
    # kept: items 5 and 4 (estimates 5 and 6); 4 expands to nothing; 0 is a candidate
    assert mapper.phase_best(phase, 10) == [5, 0]
    assert sorted(scored) == [0, 5]  # items 1, 2, 3 were cut without a count


def test_the_seed_adds_choices_made_from_the_best():
    table = _Table(random.Random(2), 0)
    table.count, table.steps, table.fp = [5, 4, 3, 2, 1, 0], [0] * 6, [1] * 6
    seen: list[list[int]] = []

    def seed(best: list[int]) -> list[int]:
        seen.append(list(best))
        return [b + 2 for b in best if b + 2 < 6]

    phase = Phase(cost=table.cost, footprint=table.fp.__getitem__,
                  candidates=lambda: [0, 1, 2], seed=seed, offer=2)
    assert mapper.phase_best(phase, 10) == [4, 3]  # seeded by 2 and 1
    assert seen == [[2, 1]]


def test_order_breaks_ties_after_count_and_steps():
    table = _Table(random.Random(3), 0)
    table.count, table.steps, table.fp = [1, 1, 1, 0], [2, 1, 1, 5], [1] * 4
    phase = Phase(cost=table.cost, footprint=table.fp.__getitem__,
                  candidates=lambda: range(4), offer=4, order=lambda i: -i)
    assert mapper.phase_best(phase, 10) == [3, 2, 1, 0]


# ----------------------------------------------------------------------------- the schedules
PHASED = [s for s in _alg.all_algorithms(exact=True) if getattr(s, "_phases", None) is not None]
WORKLOADS = [(Shape.make(12, 4), 40), (Shape.make(12, 4, causal=True), 40),
             (Shape.make(10, 3, Nkv=14, causal="top_left"), 30),
             (Shape.make(16, 4, causal=True, window=5), 60), (Shape.make(9, 2, heads=2), 20),
             (Shape.make(300, 40), 200), (Shape.make(10**9, 128, causal=True), 65536)]


def test_stream_tiling_window_square_and_window_stream_declare_phases():
    assert {"stream_tiling", "window_square", "window_stream"} <= {s.name for s in PHASED}


def _choices(phase: Phase, M: int) -> list[Any]:
    """Every choice a phase declares that fits (nothing cut; its rows as tuples; the seed of
    its best)."""
    out = dict.fromkeys(phase.candidates())
    if phase.rows is not None:
        out.update(dict.fromkeys(map(tuple, phase.rows().tolist())))
    for _, r in phase.ranked() if phase.ranked is not None else ():
        out.update(dict.fromkeys(phase.expand(r) if phase.expand is not None else (r,)))
    if phase.seed is not None:
        out.update(dict.fromkeys(phase.seed(mapper.phase_best(phase, M))))
    return [c for c in out if phase.footprint is None or phase.footprint(c) <= M]


def _check_costs_add_up(s: Any, shape: Shape, M: int) -> None:
    """Every pair of declared choices (the first 40 of each phase): the phases' counts and steps
    add up to the schedule's cost of the combined tiling."""
    phases = s._phases(shape, M)
    firsts, seconds = (_choices(p, M)[:40] for p in phases.phases)
    for c1, c2 in itertools.product(firsts, seconds):
        t = phases.combine(c1, c2)
        n1, s1 = phases.phases[0].cost(c1)
        n2, s2 = phases.phases[1].cost(c2)
        cost = s.cost(shape, t)
        assert cost.io.total == shape.n_heads * (n1 + n2), (s.name, shape, t)
        assert cost.steps == s1 + s2, (s.name, shape, t)


@pytest.mark.parametrize("s", PHASED, ids=lambda s: s.name)
def test_the_declared_phase_costs_add_up_to_the_closed_form(s):
    for shape, M in WORKLOADS:
        if mapper.can_run(s, shape, M) is not None:
            continue
        _check_costs_add_up(s, shape, M)


@pytest.mark.parametrize("s", PHASED, ids=lambda s: s.name)
def test_every_declared_lower_bound_is_below_the_count(s):
    """The mapper's branch and bound per phase is exact only if ``lower`` bounds the count."""
    checked = 0
    for shape, M in WORKLOADS:
        if mapper.can_run(s, shape, M) is not None:
            continue
        for p in s._phases(shape, M).phases:
            if p.lowers is not None:  # the pool's bounds at once (unmasked stream_tiling)
                cs = list(p.candidates())
                for c, lo in zip(cs, p.lowers(cs) if cs else ()):
                    assert lo <= p.cost(c)[0] * (1 + 1e-12), (s.name, shape, c)
                    checked += 1
            if p.rows is not None:  # rows: their bounds, or their exact counts and steps
                rows = p.rows()
                if p.row_lowers is not None and p.lower is None and p.lowers is None:
                    cs = list(p.candidates())  # (bounded as rows too)
                    if cs:
                        rows = np.concatenate([np.array(cs, dtype=np.int64), rows])
                got = (p.row_lowers(rows), None) if p.row_lowers else p.row_costs(rows)
                for i, c in enumerate(map(tuple, rows.tolist())):
                    count, steps = p.cost(c)
                    if got[1] is None:
                        assert got[0][i] <= count * (1 + 1e-12), (s.name, shape, c)
                    else:
                        assert (got[0][i], got[1][i]) == (count, steps), (s.name, shape, c)
                    checked += 1
            if p.lower is None:
                continue
            for c in _choices(p, M):
                assert p.lower(c) <= p.cost(c)[0] * (1 + 1e-12), (s.name, shape, c)
                checked += 1
    assert checked or s.name != "stream_tiling"


def _check_uncut(s: Any, shape: Shape, M: int) -> None:
    """The mapper's choice with the cut lifted is the least (count, steps) of the whole product
    of declared choices, each tiling scored by the schedule's cost and steps."""
    phases = s._phases(shape, M)
    uncut = Phases(tuple(dataclasses.replace(p, keep=10**9) for p in phases.phases),
                   phases.combine)
    pools = [_choices(p, M) for p in uncut.phases]
    every = [(s.cost(shape, t).io.total, s.steps(shape, t))
             for t in (uncut.combine(*c) for c in itertools.product(*pools))
             if s.footprint(shape, t) <= M]
    best = [mapper.phase_best(p, M) for p in uncut.phases]
    t = uncut.combine(*(b[0] for b in best))
    assert (s.cost(shape, t).io.total, s.steps(shape, t)) == min(every), (s.name, shape, M)


@pytest.mark.parametrize("s", PHASED, ids=lambda s: s.name)
def test_uncut_the_search_is_the_least_of_the_whole_product(s):
    """With the cut lifted (every ranked item kept), the mapper's choice is the least (count,
    steps) over the product of every declared choice of each phase, scored by the schedule's
    own closed form: the per-phase search loses nothing but what the cut declares."""
    checked = 0
    for shape, M in WORKLOADS[:5]:
        if mapper.can_run(s, shape, M) is not None:
            continue
        _check_uncut(s, shape, M)
        checked += 1
    assert checked >= 3


def _windowed(seed: int) -> tuple[Shape, int]:
    """A small sliding-window workload: either alignment, Nq != Nkv, grouped-query heads, M from
    the least to roomy."""
    rng = random.Random(seed)
    Nq, Nkv, d = rng.randint(1, 40), rng.randint(1, 40), rng.randint(1, 12)
    kvh, g = rng.choice([1, 2]), rng.choice([1, 2])
    shape = Shape.make(Nq, d, Nkv=Nkv, causal=rng.choice([True, "top_left"]),
                       window=rng.randint(1, 45), heads=kvh * g, kv_heads=kvh)
    return shape, rng.choice([4, 5, 9, 3 * d + 7, d * d + 4, 4 * d * d, 300, 2000])


@pytest.mark.parametrize("seed", range(40))
def test_window_stream_phases_on_windowed_workloads(seed):
    """window_stream's phases (a sliding window is what it is planned for): the declared costs
    add up to its cost() and steps, and the search is the least of the whole product (it
    declares no cut: every candidate is scored, by branch and bound on its exact count)."""
    s = _alg.get("window_stream")
    shape, M = _windowed(seed)
    assert mapper.can_run(s, shape, M) is None
    assert all(p.ranked is None for p in s._phases(shape, M).phases)  # nothing cut
    _check_costs_add_up(s, shape, M)
    _check_uncut(s, shape, M)
    found = mapper.search(s, shape, M)
    assert found is not None and found.tiling == s.candidate_tilings(shape, M)[0]


@pytest.mark.parametrize("s", PHASED, ids=lambda s: s.name)
def test_the_search_takes_the_first_of_the_product(s):
    for shape, M in WORKLOADS:
        if mapper.can_run(s, shape, M) is not None:
            continue
        product = s.candidate_tilings(shape, M)
        found = mapper.search(s, shape, M)
        plain = mapper.search(s, shape, M, product)
        assert found is not None and plain is not None
        assert found.tiling == product[0] == plain.tiling
        assert (found.predicted, found.steps, found.tried) == \
            (plain.predicted, plain.steps, plain.tried)
