"""attnio.pebble.loops: the exhaustive loop-order search on tiny instances (issue 25, point 1).

Every searched schedule runs on the referee: its output equals the float64 reference, its count is
the same in compute and count mode, and never below the pebbling optimum, the DAG's trivial bound
or any explicit bound; the search is deterministic.
"""

from __future__ import annotations

import pytest

from attnio import bounds, pebble
from attnio.core.errors import ParameterError
from attnio.pebble import loops


def _explicit_best(Nq: int, Nkv: int, d: int, M: int) -> float:
    return max(b.value for b in bounds.applicable(N=Nq, d=d, M=M, Nkv=Nkv) if b.explicit)


@pytest.mark.parametrize("Nq,Nkv,d,M", [(2, 2, 2, 12), (3, 2, 2, 10), (2, 3, 1, 8), (2, 2, 3, 14)])
def test_every_searched_schedule_matches_the_reference_and_its_count(Nq, Nkv, d, M):
    found = loops.search(Nq, Nkv, d, M)
    assert found, "some schedule fits"
    trivial = pebble.dag.attention(Nq, d, Nkv=Nkv).trivial_bound()
    bound = _explicit_best(Nq, Nkv, d, M)
    for sc in found:
        run = loops.run_schedule(sc.schedule, Nq, Nkv, d, M, seed=7)
        assert run is not None
        assert run.max_error < 1e-12, sc.schedule
        assert (run.reads, run.writes) == (sc.reads, sc.writes)  # compute mode counts as count mode
        assert run.peak <= M
        assert sc.io >= trivial and sc.io >= bound


def test_counts_are_never_below_the_pebbling_optimum():
    # attention N = 2, d = 1, M = 8: the greedy pebbling meets the trivial bound (a proven optimum)
    r = pebble.solve(pebble.dag.attention(2, 1), 8, time_limit=5)
    assert r.globally_optimal
    found = loops.search(2, 2, 1, 8)
    assert found and all(sc.io >= r.io for sc in found)
    # and a case where the optimum is above the trivial bound is bounded by its proven lower bound
    r2 = pebble.solve(pebble.dag.attention(2, 2), 12, time_limit=0.5)
    assert all(sc.io >= r2.lower_bound for sc in loops.search(2, 2, 2, 12))


def test_the_search_is_deterministic_and_sorted():
    a = loops.search(3, 2, 2, 12)
    b = loops.search(3, 2, 2, 12)
    assert a == b
    assert [s.io for s in a] == sorted(s.io for s in a)
    assert len(a) == len(set(s.schedule for s in a))


def test_the_space_names_its_parts():
    sch = list(loops.enumerate_schedules(3, 2, 2))
    # 4 compositions of 3 rows x 2 of 2 rows, for 2 nests x 2 inner orders x: d chunk 2 (the row
    # schedule, the split one with lazy or eager rescale) and d chunk 1 (2 chunk orders x 2
    # rescale points)
    assert len(sch) == 4 * 2 * 4 * (3 + 4)
    assert {s.outer for s in sch} == {"q", "kv"} and {s.d_chunk for s in sch} == {1, 2}
    assert loops.compositions(3) == [(3,), (1, 2), (2, 1), (1, 1, 1)]
    assert loops.compositions(8, every_upto=6)[:3] == [(1,) * 8, (2,) * 4, (3, 3, 2)]
    s = loops.LoopSchedule("q", True, (1, 2), (2,), 1, True)
    assert "snake" in s.describe() and "q-outer/snake" in s.short()


def test_snake_keeps_the_last_block():
    # Q-stationary, one key per block: the snake keeps the key/value block at the turn
    fwd = loops.LoopSchedule("q", False, (1, 1), (1, 1), 1)
    snake = loops.LoopSchedule("q", True, (1, 1), (1, 1), 1)
    a = loops.run_schedule(fwd, 2, 2, 1, 8)
    b = loops.run_schedule(snake, 2, 2, 1, 8)
    assert a is not None and b is not None
    assert b.reads < a.reads


def test_a_schedule_that_does_not_fit_is_refused():
    big = loops.LoopSchedule("q", False, (4,), (4,), 2)
    assert loops.run_schedule(big, 4, 4, 2, 8) is None
    # d = 1: a row schedule needs Q, K, V, O, (m, l) and a score word (7); a split one with eager
    # rescale 5 at its final output update (S, V, O, m, l), evicting Q between the steps
    assert loops.search(2, 2, 1, 4) == []
    least = loops.search(2, 2, 1, 5)
    assert least and all(sc.schedule.split and sc.schedule.eager for sc in least)


@pytest.mark.parametrize("kw,param", [({"Nq": 9}, "Nq"), ({"d": 4}, "d"), ({"M": 0}, "M")])
def test_bad_sizes_name_the_parameter(kw, param):
    args = {"Nq": 2, "Nkv": 2, "d": 1, "M": 8, **kw}
    with pytest.raises(ParameterError) as e:
        loops.search(**args)
    assert e.value.param == param


def test_a_malformed_schedule_is_refused():
    with pytest.raises(ParameterError) as e:
        loops.run_schedule(loops.LoopSchedule("q", False, (1,), (2,), 1), 2, 2, 1, 8)
    assert e.value.param == "q_blocks"


@pytest.mark.parametrize("name", ["flash2", "kv_stationary", "q_stationary_min"])
def test_a_registered_schedule_is_a_point_of_the_space_at_no_more_words(name):
    # the same loop nest and tiles as the registered schedule, with Belady's management: never
    # more words than the registered schedule's (which frees everything after each visit);
    # q_stationary_min is the split schedule with one key per block, a d chunk of 1, eager rescale
    import attnio
    from attnio.core.workload import Shape

    alg = attnio.algorithms.get(name)
    N, Nkv, d = 6, 5, 2
    sh = Shape(N, Nkv, d)
    tried = 0
    for M in (16, 23, 30, 41):
        for t in alg.candidate_tilings(sh, M):
            if getattr(t, "group", 1) != 1:
                continue
            qb = (t.Br,) * (N // t.Br) + ((N % t.Br,) if N % t.Br else ())
            if name == "q_stationary_min":
                s = loops.LoopSchedule("q", False, qb, (1,) * Nkv, 1, False, True)
            else:
                kb = (t.Bc,) * (Nkv // t.Bc) + ((Nkv % t.Bc,) if Nkv % t.Bc else ())
                s = loops.LoopSchedule("q" if name == "flash2" else "kv", False, qb, kb, d)
            r = loops.run_schedule(s, N, Nkv, d, M)
            ref = attnio.run(name, shape=sh, M=M, tiling=t, mode="count").io.total
            assert r is not None and r.io <= ref, (M, t)
            tried += 1
    assert tried >= 4
