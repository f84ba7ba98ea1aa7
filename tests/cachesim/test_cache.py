"""Cache replay (attnio.replay): hand-made traces with known answers, OPT against brute force and
against LRU/FIFO, Sleator–Tarjan, and agreement with pycachesim."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import attnio
from attnio.cachesim.caches import Cache, replay
from attnio.cachesim.tracing import ArrayInfo, Trace
from attnio.core.errors import ParameterError
from conftest import need


def reads_only(addrs):
    return (np.asarray(addrs), np.zeros(len(addrs), dtype=np.uint8))


def test_cyclic_scan_longer_than_cache_makes_lru_and_fifo_miss_on_every_access():
    k, C, rounds = 9, 8, 5
    tr = reads_only(list(range(k)) * rounds)
    assert replay(tr, C, "lru").reads == k * rounds
    assert replay(tr, C, "fifo").reads == k * rounds
    opt = replay(tr, C, "opt").reads
    assert opt < k * rounds
    assert opt == brute_force_min_misses(list(range(k)) * rounds, C)


def test_scan_that_fits_misses_only_cold():
    tr = reads_only(list(range(8)) * 6)
    for p in ("lru", "fifo", "opt"):
        r = replay(tr, 8, p)
        assert (r.reads, r.writes, r.hits) == (8, 0, 40)


def test_opt_on_a_small_cyclic_scan_is_seven():
    # 0..4 three times, 4 words: 5 cold misses, then OPT misses once per round (LRU: 15)
    assert replay(reads_only(list(range(5)) * 3), 4, "opt").reads == 7
    assert replay(reads_only(list(range(5)) * 3), 4, "lru").reads == 15


def test_lru_worst_case_against_fifo_and_opt():
    # a, b, c, a, d, a, e, a ...: 'a' is reused constantly; with 2 words LRU keeps it, FIFO does not
    seq = [0]
    for x in range(1, 20):
        seq += [x, 0]
    tr = reads_only(seq)
    assert replay(tr, 2, "lru").reads == 20  # every new word once, 'a' never evicted
    assert replay(tr, 2, "fifo").reads > 20
    assert replay(tr, 2, "opt").reads == 20


def test_write_back_counts_dirty_evictions_and_final_flush():
    # write 0..3, then read 4..7 with a 4-word cache: the 4 dirty words are evicted and written
    addr = list(range(4)) + list(range(4, 8))
    kind = [1] * 4 + [0] * 4
    r = replay((addr, kind), 4, "lru")
    assert (r.reads, r.writes, r.dirty_evictions, r.flushed) == (4, 4, 4, 0)
    r = replay((addr, kind), 8, "lru")  # all fit: the dirty words are flushed at the end
    assert (r.reads, r.writes, r.dirty_evictions, r.flushed) == (4, 4, 0, 4)
    r = replay((addr, kind), Cache(8, write_allocate=True), "lru")  # a write miss reads the word first
    assert (r.reads, r.writes) == (8, 4)


def test_scratch_arrays_are_not_flushed_at_the_end():
    arrays = [ArrayInfo("O", 4, 0, True, "output"), ArrayInfo("~tmp", 4, 64, False, "scratch")]
    addr = [0, 1, 64, 65, 64, 65]
    kind = [1, 1, 1, 1, 0, 0]
    tr = Trace.from_arrays(addr, kind, arrays)
    for p in ("lru", "fifo", "opt"):
        r = replay(tr, 8, p)
        assert (r.reads, r.writes) == (0, 2), p


def test_opt_skips_write_back_of_values_overwritten_before_read():
    # word 0 written, evicted by 1 and 2, then overwritten: its first value is dead
    addr, kind = [0, 1, 2, 0], [1, 0, 0, 1]
    assert replay((addr, kind), 1, "opt").writes == 1  # only the final value of 0
    assert replay((addr, kind), 1, "lru").writes == 2


def brute_force_min_misses(seq, C):
    """Least misses of any demand-paging policy (exhaustive over eviction choices)."""
    states = {frozenset(): 0}
    for a in seq:
        nxt = {}
        for s, m in states.items():
            if a in s:
                cand = [(s, m)]
            elif len(s) < C:
                cand = [(s | {a}, m + 1)]
            else:
                cand = [((s - {v}) | {a}, m + 1) for v in s]
            for s2, m2 in cand:
                if nxt.get(s2, 1 << 60) > m2:
                    nxt[s2] = m2
        states = nxt
    return min(states.values())


@pytest.mark.parametrize("seed", range(12))
def test_opt_equals_brute_force_minimum_on_random_read_traces(seed):
    rng = np.random.default_rng(seed)
    seq = rng.integers(0, 6, 18).tolist()
    C = int(rng.integers(1, 5))
    assert replay(reads_only(seq), C, "opt").reads == brute_force_min_misses(seq, C)


def random_traces(n_traces=40, seed=7):
    rng = np.random.default_rng(seed)
    for _ in range(n_traces):
        n = int(rng.integers(20, 400))
        words = int(rng.integers(3, 40))
        # mixture of loops and random accesses, some writes
        a = rng.integers(0, words, n)
        loop = np.tile(np.arange(words), n // words + 1)[:n]
        a = np.where(rng.random(n) < 0.5, a, loop)
        k = (rng.random(n) < rng.random()).astype(np.uint8)
        yield a, k, int(rng.integers(1, words + 2))


def test_opt_never_worse_than_lru_or_fifo_and_sleator_tarjan_holds_on_random_traces():
    for a, k, C in random_traces():
        for wa in (False, True):
            opt = replay((a, k), Cache(C, write_allocate=wa), "opt")
            lru = replay((a, k), Cache(C, write_allocate=wa), "lru")
            fifo = replay((a, k), Cache(C, write_allocate=wa), "fifo")
            assert opt.reads <= min(lru.reads, fifo.reads)
            assert opt.total <= min(lru.total, fifo.total)
            lru2 = replay((a, k), Cache(2 * C, write_allocate=wa), "lru")
            # Sleator–Tarjan bounds faults (every access a page request) against any policy
            assert lru2.misses <= 2 * opt.misses + C
            if wa:  # with fetch-on-write, also the total I/O (checked, not a theorem)
                assert lru2.total <= 2 * opt.total + C


def test_sleator_tarjan_on_total_io_can_fail_for_write_heavy_traces_without_write_allocate():
    # Documented limit: the bound is on faults.  With write-no-fetch, OPT skips dead write-backs
    # and write misses cost no read, so on a write-heavy random trace LRU(2M) can exceed
    # 2·OPT(M) + M in total I/O while the fault form still holds.
    fails = 0
    for a, k, C in random_traces(200, seed=5):
        opt = replay((a, k), C, "opt")
        lru2 = replay((a, k), 2 * C, "lru")
        assert lru2.misses <= 2 * opt.misses + C
        fails += lru2.total > 2 * opt.total + C
    assert fails > 0


def test_hand_made_traces_satisfy_sleator_tarjan():
    for k in range(2, 12):
        for C in range(1, k + 1):
            tr = reads_only(list(range(k)) * 4)
            assert replay(tr, 2 * C, "lru").total <= 2 * replay(tr, C, "opt").total + C


def test_set_associative_lru_with_one_set_equals_fully_associative():
    for a, k, C in itertools.islice(random_traces(seed=3), 10):
        full = replay((a, k), Cache(C, write_allocate=True), "lru")
        one = replay((a, k), Cache(C, ways=C, write_allocate=True), "lru")
        assert (full.reads, full.writes) == (one.reads, one.writes)


def test_bad_parameters_name_the_parameter():
    tr = reads_only([0, 1, 2])
    with pytest.raises(ParameterError, match="policy"):
        replay(tr, 4, "mru")
    with pytest.raises(ParameterError, match="capacity_words"):
        replay(tr, 0)
    with pytest.raises(ParameterError, match="write_allocate=True"):
        replay(tr, Cache(8, line_words=4))
    with pytest.raises(ParameterError, match="multiple of line_words"):
        replay(tr, Cache(6, line_words=4, write_allocate=True))
    with pytest.raises(ParameterError, match="ways"):
        replay(tr, Cache(8, ways=3))
    with pytest.raises(ParameterError, match="fully associative"):
        replay(tr, Cache(8, ways=2), "opt")
    with pytest.raises(ParameterError, match="kind"):
        replay(([0, 1], ["r", "x"]), 4)
    with pytest.raises(ParameterError, match="trace must be"):
        replay([0, 1, 2], 4)


def test_cache_is_validated_once_and_an_int_is_its_capacity():
    tr = reads_only(list(range(5)) * 3)
    assert replay(tr, 4, "lru") == replay(tr, Cache(4), "lru")
    for kw, param in (({"capacity_words": True}, "capacity_words"),
                      ({"capacity_words": 8, "write_allocate": 1}, "write_allocate"),
                      ({"capacity_words": 8, "write_hit_refresh": None}, "write_hit_refresh"),
                      ({"capacity_words": 8, "ways": 0}, "ways")):
        with pytest.raises(ParameterError) as e:
            Cache(**kw)
        assert e.value.param == param


# ------------------------------------------------------------------ pycachesim
def _pycachesim():
    return need("cachesim")


CONFIGS = [  # (capacity words, line words, ways): fully associative and set associative
    (4, 1, None), (16, 1, None), (64, 1, None), (16, 1, 2), (32, 1, 4), (32, 4, None),
    (64, 8, 2), (64, 4, 4),
]


@pytest.mark.parametrize("policy", ["lru", "fifo"])
def test_replay_agrees_with_pycachesim_on_random_traces(policy):
    _pycachesim()
    from attnio.cachesim.validation import pycachesim_replay

    for a, k, _ in itertools.islice(random_traces(seed=11), 15):
        for cap, L, ways in CONFIGS:
            ours = replay((a, k), Cache(cap, L, ways, write_allocate=True,
                                        write_hit_refresh=False), policy)
            ref = pycachesim_replay((a, k), cap, policy, line_words=L, ways=ways)
            assert (ours.reads, ours.writes) == (ref.reads, ref.writes), (cap, L, ways)
            assert ours.misses == ref.read_misses  # pycachesim's MISS_count


@pytest.mark.parametrize("policy", ["lru", "fifo"])
@pytest.mark.parametrize("name", ["standard", "flash2"])
def test_replay_agrees_with_pycachesim_on_algorithm_traces(policy, name):
    _pycachesim()
    from attnio.cachesim.validation import pycachesim_replay

    t = attnio.trace(name, 32, 8, 300)
    plain = Trace.from_arrays(*t.to_arrays())  # every array flushed, as pycachesim does
    for cap, L, ways in [(256, 1, None), (256, 1, 8), (256, 8, None), (512, 8, 4)]:
        ours = replay(plain, Cache(cap, L, ways, write_allocate=True, write_hit_refresh=False),
                      policy)
        ref = pycachesim_replay(plain, cap, policy, line_words=L, ways=ways)
        assert (ours.reads, ours.writes) == (ref.reads, ref.writes), (cap, L, ways)


def test_pycachesim_store_hits_do_not_refresh_lru_which_our_default_does():
    _pycachesim()
    from attnio.cachesim.validation import pycachesim_replay

    addr, kind = [0, 1, 0, 2, 0], [0, 0, 1, 0, 0]
    assert pycachesim_replay((addr, kind), 2, "lru").reads == 4
    assert replay((addr, kind), Cache(2, write_allocate=True), "lru").reads == 3
    assert replay((addr, kind), Cache(2, write_allocate=True, write_hit_refresh=False),
                  "lru").reads == 4
