"""The explicit model against cache replays on every exact algorithm: OPT(M) <= explicit,
OPT <= LRU and FIFO, LRU(2M) <= 2·OPT(M) + M; the verify table and CLI."""

from __future__ import annotations

import json

import pytest

import attnio
from attnio.algorithms import mapper
from attnio.cachesim.validation import VerifyOptions, verify
from attnio.core.workload import Shape
from conftest import exact_attention_names

GRID = [(32, 8, 100), (32, 8, 300), (32, 8, 1200), (48, 4, 64), (40, 16, 2000)]
#: The default run replays every algorithm at (32, 8): unmasked at the smallest and a large M,
#: causal at the large one (5 s of CPU).  The other grid points (M = 300, d = 4 and d = 16, where
#: q_stationary_min's row-by-row traces reach 1.4 million accesses and stream_tiling's 3.5 s, and
#: causal at M = 100) run with ``-m slow``.
FAST_POINTS = {(False, 32, 8, 100), (False, 32, 8, 1200), (True, 32, 8, 1200)}


def _replay_cases():
    """(name, causal, N, d, M) for every grid point the algorithm can run at (the mapper's
    can_run)."""
    out = []
    for name in exact_attention_names():
        alg = attnio.algorithms.get(name)
        for causal in (False, True):
            for N, d, M in GRID:
                if mapper.can_run(alg, Shape(N, N, d, causal=causal), M) is None:
                    marks = [] if (causal, N, d, M) in FAST_POINTS else [pytest.mark.slow]
                    out.append(pytest.param(name, causal, N, d, M, marks=marks))
    return out


REPLAY_CASES = _replay_cases()


def test_every_algorithm_is_replayed_unmasked_and_causal_in_the_default_run():
    fast = [c.values for c in REPLAY_CASES if not c.marks]
    for name in exact_attention_names():
        assert sum(c[:2] == (name, False) for c in fast) >= 2, name  # a small and a large M
        assert sum(c[:2] == (name, True) for c in fast) >= 1, name


@pytest.mark.parametrize("name,causal,N,d,M", REPLAY_CASES)
def test_cache_replays_respect_opt_explicit_and_sleator_tarjan(name, causal, N, d, M):
    v = verify(name, M=M, shape=Shape.make(N, d, causal=causal))
    opt, lru, fifo = v.count("opt", M), v.count("lru", M), v.count("fifo", M)
    print(name, N, d, M, causal, v.explicit.total, lru, fifo, opt, v.count("lru", 2 * M))
    assert opt <= v.explicit.total  # the explicit schedule is one valid strategy
    assert opt <= lru and opt <= fifo
    assert v.count("opt", 2 * M) <= opt
    assert v.count("lru", 2 * M) <= 2 * opt + M  # Sleator–Tarjan
    r = v.replays[("opt", M)]
    assert r.reads >= 0 and r.accesses == v.events


def test_verify_table_and_json_cli(capsys):
    from attnio.cli import main

    v = verify("flash2", 32, 8, 300)
    txt = v.table()
    for word in ("explicit", "lru", "fifo", "opt", "/explicit"):
        assert word in txt
    assert [r["model"] for r in v.rows()] == ["explicit", "lru", "fifo", "opt"] * 1 + [
        "lru", "fifo", "opt"]
    assert main(["verify", "flash2", "--N", "32", "--d", "8", "--M", "300", "--json"]) == 0
    obj = json.loads(capsys.readouterr().out)
    assert obj["rows"][0]["total"] == v.explicit.total
    assert main(["verify", "flash2", "--N", "32", "--d", "8", "--M", "300",
                 "--policies", "lru,mru"]) == 2


def test_explicit_column_equals_the_simulator_count():
    for name in exact_attention_names():
        alg = attnio.algorithms.get(name)
        if mapper.can_run(alg, Shape(32, 32, 8), 300) is not None:
            continue
        v = verify(name, 32, 8, 300, options=VerifyOptions(("lru",), (1,)))
        io = attnio.run(name, shape=(32, 8), M=300, mode="count").io
        assert (v.explicit.reads, v.explicit.writes) == (io.reads, io.writes)
