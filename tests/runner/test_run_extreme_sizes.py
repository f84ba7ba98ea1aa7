"""Issue 24's run/plan/bound cases that must *work*, quickly and exactly, rather than hang, run
out of memory or trip an assertion: absurd but valid sizes in count mode, a fast memory far
larger than the data, 2**40 query heads sharing one key/value head, a 61-bit prime q.

Peak memory of every case (and of the refusals in the catalogue) is measured by
``benchmarks/bench_catalogue_memory.py`` under ``/usr/bin/time -v``, not here.
"""

from __future__ import annotations

import errno
import json
import os

import numpy as np
import pytest

import attnio
from attnio.algorithms import get, mapper
from attnio.blocks.matmul import run_matmul
from attnio.bounds.asymptotic import _is_prime_power
from attnio.cli import main
from attnio.core.workload import Shape


def _trial_division_prime_power(q: int) -> bool:
    p = 2
    while p * p <= q:
        if q % p == 0:
            while q % p == 0:
                q //= p
            return q == 1
        p += 1
    return q >= 2


def test_prime_power_test_agrees_with_trial_division_and_takes_61_bit_primes():
    assert [q for q in range(1, 5000) if _is_prime_power(q) != _trial_division_prime_power(q)] == []
    assert _is_prime_power(2**61 - 1) and _is_prime_power(3**40) and _is_prime_power(2**80)
    assert not _is_prime_power((2**31 - 1) * (2**61 - 1)) and not _is_prime_power(6 * 2**60)


def test_bound_with_a_61_bit_prime_q(capsys):
    assert main(["bound", "--N", "4096", "--d", "64", "--M", "16384", "--q",
                 str(2**61 - 1), "--json"]) == 0
    names = [b["name"] for b in json.loads(capsys.readouterr().out)["bounds"]]
    assert "fast_matmul_field" in names


@pytest.mark.parametrize("algorithm", attnio.algorithms.names(exact=True))
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("heads", [2**30, 2**40])
def test_count_mode_with_a_huge_query_group_equals_the_closed_form(heads, causal, algorithm):
    # every registered exact schedule: the schedules walk a group's query heads as alike blocks
    # (bulk count mode runs one), and their tilings' group divisors are searched in O(sqrt)
    # steps: no O(group) work or memory
    shape = Shape(64, 64, 8, heads=heads, kv_heads=1, causal=causal)
    assert mapper.can_run(get(algorithm), shape, 1000) is None
    res = attnio.run(algorithm, shape=shape, M=1000, mode="count")
    assert res.io.total == get(algorithm).cost(shape, res.tiling).io.total
    assert res.certificate.ratio >= 1


def test_plan_with_2_to_the_40_heads_sharing_one_kv_head():
    p = attnio.plan(64, 8, 1000, heads=2**40, kv_heads=1)
    assert p.certificate.ratio >= 1
    flash2 = next(c for c in p.candidates if c.algorithm == "flash2")
    assert p.chosen.predicted.total <= flash2.predicted.total


def test_count_mode_beyond_2_to_the_63_steps_returns_exact_counts():
    shape = Shape(2**20, 2**20, 128, batch=2**20, heads=2**20)
    res = attnio.run("flash2", shape=shape, M=65536)
    assert res.mode == "count"
    assert res.io.total == get("flash2").cost(shape, res.tiling).io.total
    mm = run_matmul(shape=(2**40,) * 3, M=2**20)
    assert mm.io.total == mm.predicted.total


def test_cli_matmul_count_of_ten_billion_cubed(capsys):
    assert main(["run", "matmul", "--m", "10000000000", "--k", "10000000000", "--n",
                 "10000000000", "--M", "1048576", "--count-only", "--json"]) == 0
    obj = json.loads(capsys.readouterr().out)
    assert obj["total"] >= obj["bound"] > 0


def test_a_fast_memory_far_larger_than_the_data_costs_what_the_data_costs(capsys):
    small = attnio.runner.estimate("flash2", (64, 8), 4096)
    huge = attnio.runner.estimate("flash2", (64, 8), 2**40)
    assert huge.bytes == small.bytes < 10**6
    assert main(["run", "flash2", "--N", "64", "--d", "8", "--M", str(2**40), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["max_abs_err"] <= 1e-12


def test_numpy_booleans_are_booleans_for_causal():
    a = attnio.run("flash2", shape=(16, 4), M=200, causal=np.bool_(True))
    b = attnio.run("flash2", shape=(16, 4), M=200, causal=True)
    assert a.shape.causal and a.io.total == b.io.total
    assert attnio.Limits(budget_s=np.float32(5), force=np.bool_(False)).budget_s == 5.0


def test_run_checks_against_the_reference_and_certifies():
    res = attnio.run("flash2", shape=(64, 8), M=512, inputs=attnio.runner.RandomInputs(3),
                     check=True, backward=True)
    assert res.max_abs_err <= 1e-12 and res.max_abs_grad_err <= 1e-12
    assert res.certificate.ratio == res.io.total / res.certificate.best_bound.value
    assert res.backward_certificate.best_bound.explicit
    assert res.backward_certificate.ratio == (res.backward_io.total
                                              / res.backward_certificate.best_bound.value)


def test_an_npz_file_runs_like_its_arrays(tmp_path):
    rng = np.random.default_rng(1)
    Q, K, V = (rng.standard_normal((32, 8)) for _ in range(3))
    np.savez(tmp_path / "x.npz", Q=Q, K=K, V=V)
    a = attnio.run("flash2", inputs=tmp_path / "x.npz", M=400, check=True)
    b = attnio.run("flash2", Q, K, V, M=400)
    assert a.io.total == b.io.total and np.array_equal(a.output, b.output)
    assert a.max_abs_err <= 1e-12


def test_a_failed_trace_write_leaves_no_partial_file(tmp_path, monkeypatch, capsys):
    from attnio.cachesim.tracing import Trace

    def save(self, path):
        with open(path, "wb") as f:
            f.write(b"partial")
        raise OSError(errno.EFBIG, "File too large")

    monkeypatch.setattr(Trace, "save", save)
    out = tmp_path / "t.npz"
    assert main(["trace", "flash2", "--N", "32", "--d", "8", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"--out {out}" in err and "File too large" in err
    assert os.listdir(tmp_path) == []


def test_a_masked_count_that_walks_its_blocks_is_estimated_and_refused_beyond_the_budget():
    # a schedule whose bulk count walks its blocks one by one (Algorithm.count_walk; kv_stationary
    # and q_stationary_min did, until they counted runs of alike blocks once): at N = 10**9 that
    # is minutes, refused before it starts, naming budget_s; unmasked is bulk
    from attnio.core.resources import ResourceError

    flash2 = get("flash2")

    class Walking(type(flash2)):  # type: ignore[misc]
        name = "walking_flash2"

        def count_walk(self, shape, tiling):
            return -(-shape.Nq // tiling.Br) if shape.causal else 0

    alg = Walking()
    big = Shape(10**9, 10**9, 128, causal=True)
    assert alg.count_walk(big, alg.coerce_tiling(big, 65536, None)) > 10**6
    with pytest.raises(ResourceError, match="budget_s"):
        attnio.run(alg, shape=big, M=65536, mode="count")
    flat = Shape(10**9, 10**9, 128)
    assert alg.count_walk(flat, alg.coerce_tiling(flat, 65536, None)) == 0
    assert attnio.run(alg, shape=Shape(4096, 4096, 64, causal=True), M=65536,
                      mode="count").io.total > 0


@pytest.mark.parametrize("algorithm", attnio.algorithms.names(exact=True))
def test_masked_counts_walk_no_more_blocks_at_a_billion(algorithm):
    # every registered exact schedule counts runs of alike blocks once: the walk the runner
    # estimates does not grow with N
    big = Shape(10**9, 10**9, 128, causal=True)
    alg = get(algorithm)
    if (why := mapper.can_run(alg, big, 65536)) is not None:
        pytest.skip(f"{algorithm} cannot run it: {why}")
    assert alg.count_walk(big, alg.coerce_tiling(big, 65536, None)) <= 10**4
