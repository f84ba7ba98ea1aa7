"""The two-level memory: exact counts, capacity, bulk loops, and the no-cheating invariant."""

from __future__ import annotations

import numpy as np
import pytest

from attnio import CapacityError, ScheduleError, TwoLevelMemory
from attnio.core.errors import ParameterError
from attnio.core.memory import FastTile, SlowArray


def test_load_store_counts_words_per_array():
    mem = TwoLevelMemory(20)
    A = mem.slow("A", (4, 5), data=np.arange(20.0).reshape(4, 5))
    B = mem.slow("B", (4, 5))
    t = mem.load(A, slice(1, 3), slice(0, 5))
    assert t.shape == (2, 5) and mem.occupancy == 10
    mem.store(t, B, slice(0, 2))
    mem.store(t, B, slice(2, 4))
    mem.free(t)
    s = mem.stats()
    assert (s.reads, s.writes, s.total, s.peak) == (10, 20, 30, 10)
    assert s.per_array["A"].reads == 10 and s.per_array["A"].writes == 0
    assert s.per_array["B"].writes == 20 and s.per_array["B"].reads == 0
    np.testing.assert_array_equal(mem.contents(B), np.vstack([np.arange(5.0, 15).reshape(2, 5)] * 2))


def test_alloc_counts_occupancy_but_no_io():
    mem = TwoLevelMemory(8)
    a = mem.alloc((2, 3), 1.5)
    b = mem.alloc((2,))
    assert mem.occupancy == 8
    mem.free(a, b)
    s = mem.stats()
    assert (s.reads, s.writes, s.peak) == (0, 0, 8) and mem.occupancy == 0


def test_capacity_error_names_step_occupancy_and_M():
    mem = TwoLevelMemory(10)
    A = mem.slow("A", (4, 4))
    mem.load(A, slice(0, 2))  # 8 words
    with pytest.raises(CapacityError) as e:
        mem.load(A, slice(2, 3))
    err = e.value
    assert (err.occupancy, err.needed, err.M) == (8, 4, 10)
    assert "load A[2:3, :]" in str(err) and "M=10" in str(err)
    # the refused step moved nothing
    assert mem.stats().reads == 8


def test_store_of_wrong_shape_and_use_after_free_are_refused():
    mem = TwoLevelMemory(16)
    A = mem.slow("A", (4, 4))
    t = mem.load(A, slice(0, 1))
    with pytest.raises(ScheduleError):
        mem.store(t, A, slice(0, 2))
    mem.free(t)
    with pytest.raises(ScheduleError, match="already freed"):
        mem.store(t, A, slice(0, 1))
    with pytest.raises(ScheduleError):
        mem.compute(lambda x: None, t)


def test_tiles_of_another_memory_are_refused():
    m1, m2 = TwoLevelMemory(16), TwoLevelMemory(16)
    A = m1.slow("A", (2, 2))
    with pytest.raises(ScheduleError):
        m2.load(A)


def test_handles_expose_no_data():
    """The invariant in the types: a slow handle carries no numbers; a tile's only via compute."""
    mem = TwoLevelMemory(16)
    A = mem.slow("A", (2, 2), data=np.ones((2, 2)))
    assert not any(hasattr(A, n) for n in ("data", "values", "array", "__array__"))
    with pytest.raises(AttributeError):
        A.data = 1  # __slots__: no place to smuggle data
    t = mem.load(A)
    assert not any(hasattr(t, n) for n in ("data", "values", "__array__"))
    seen = []
    mem.compute(lambda x: seen.append(x.sum()), t)
    assert seen == [4.0]
    assert isinstance(A, SlowArray) and isinstance(t, FastTile)


def test_count_mode_has_no_numbers_and_same_counts():
    for mode in ("compute", "count"):
        mem = TwoLevelMemory(12, mode=mode)
        A = mem.slow("A", (3, 4), data=np.zeros((3, 4)) if mode == "compute" else None)
        calls = []
        for b in mem.blocks(3, 1):
            t = mem.load(A, b)
            mem.compute(lambda x: calls.append(1), t)
            mem.store(t, A, b)
            mem.free(t)
        s = mem.stats()
        assert (s.reads, s.writes, s.peak) == (12, 12, 4)
        assert len(calls) == (3 if mode == "compute" else 0)
        assert (mem.contents(A) is None) == (mode == "count")


@pytest.mark.parametrize("total,size,lo,hi", [(10, 3, 0, None), (10, 5, 0, None), (7, 7, 0, None),
                                              (10, 3, 4, 8), (10, 4, 0, 9), (1, 4, 0, None),
                                              (10, 3, 9, None), (10, 3, 3, 3)])
def test_bulk_blocks_equal_step_by_step(total, size, lo, hi):
    counts = []
    for bulk in (True, False):
        mem = TwoLevelMemory(100, mode="count", bulk=bulk)
        A = mem.slow("A", (total, 2))
        for blk in mem.blocks(total, size, lo=lo, hi=hi):
            t = mem.load(A, blk)
            for inner in mem.blocks(total, size):  # nested multiplier
                u = mem.load(A, inner, slice(0, 1))
                mem.free(u)
            mem.store(t, A, blk)
            mem.free(t)
        s = mem.stats()
        counts.append((s.reads, s.writes, s.peak, s.steps))
    assert counts[0] == counts[1]


@pytest.mark.parametrize("n", [0, 1, 5])
def test_repeat_counts_n_alike_operations_without_steps(n):
    """``repeat(n)``: the body n times step by step, once in bulk with its words counted n
    times; no step either way; a body that leaks a tile is refused in bulk."""
    counts = []
    for mode, bulk in (("count", True), ("count", False), ("compute", True)):
        mem = TwoLevelMemory(100, mode=mode, bulk=bulk)
        A = mem.slow("A", (4, 3), data=np.zeros((4, 3)) if mode == "compute" else None)
        held = mem.load(A, slice(0, 2))
        runs = 0
        for _ in mem.repeat(n):
            runs += 1
            w = mem.load(A, 3, slice(0, 2))
            mem.store(w, A, 2, slice(1, 3))
            mem.free(w)
        mem.free(held)
        s = mem.stats()
        counts.append((s.reads, s.writes, s.peak, s.steps, s.per_array["A"].reads))
        assert runs == (min(n, 1) if mem.bulk else n)
    assert counts[0] == counts[1] == counts[2] == (6 + 2 * n, 2 * n, 6 + 2 * min(n, 1), 0,
                                                   6 + 2 * n)
    mem = TwoLevelMemory(100, mode="count")
    A = mem.slow("A", (4, 3))
    with pytest.raises(ScheduleError, match="occupancy"):
        for _ in mem.repeat(3):
            mem.load(A, 0)  # never freed


def test_blocks_cover_the_partition():
    mem = TwoLevelMemory(4)
    got = [(b.index, b.start, b.stop) for b in mem.blocks(10, 4, lo=3, hi=9)]
    assert got == [(0, 0, 4), (1, 4, 8), (2, 8, 10)]
    assert [b.size for b in mem.blocks(10, 4)] == [4, 4, 2]


def test_bulk_loop_that_leaks_tiles_is_refused():
    mem = TwoLevelMemory(100, mode="count")
    A = mem.slow("A", (10, 1))
    with pytest.raises(ScheduleError, match="occupancy"):
        for b in mem.blocks(10, 2):
            mem.load(A, b)  # never freed


def test_bad_parameters():
    with pytest.raises(ParameterError, match="M must be an integer >= 1"):
        TwoLevelMemory(0)
    with pytest.raises(ParameterError, match="M must be an integer"):
        TwoLevelMemory(2.5)
    with pytest.raises(ParameterError, match="mode"):
        TwoLevelMemory(4, mode="fast")


def test_matmul_helper_and_writes_declaration():
    mem = TwoLevelMemory(64)
    A = mem.slow("A", (2, 3), data=np.arange(6.0).reshape(2, 3))
    a = mem.load(A)
    out = mem.alloc((2, 2))
    mem.matmul(out, a, a, transpose_b=True, alpha=2.0)
    res = []
    mem.compute(lambda o: res.append(o.copy()), out, writes=0)
    np.testing.assert_allclose(res[0], 2.0 * np.arange(6.0).reshape(2, 3) @ np.arange(6.0).reshape(2, 3).T)
    with pytest.raises(ScheduleError):
        mem.compute(lambda o: None, out, writes=2)
    with pytest.raises(ScheduleError):
        mem.matmul(out, a, a)
