"""Lower bounds: preconditions, exact values, monotonicity, and every exact algorithm above them."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import attnio
from attnio import bounds as B
from attnio.algorithms import mapper
from attnio.core.workload import Shape


# ---------------------------------------------------------------- preconditions
@pytest.mark.parametrize("call, needle", [
    (lambda: B.fast_matmul_field(N=64, d=8, M=256, q=64), "q must be > N"),
    (lambda: B.fast_matmul_field(N=16, d=8, M=256, q=18), "prime power"),
    (lambda: B.fast_matmul_field(N=16, d=8, M=256, q=17.0), "q must be an integer"),
    (lambda: B.binary_inputs(N=1, d=8, M=256), "N must be >= 2"),
    (lambda: B.standard_matmul(N=0, d=8, M=256), "N must be an integer >= 1"),
    (lambda: B.standard_matmul(N=16, d=0, M=256), "d must be an integer >= 1"),
    (lambda: B.standard_matmul_large_cache(N=16, d=8, M=0), "M must be an integer >= 1"),
    (lambda: B.standard_matmul_small_cache(N=16, d=8, M=64, causal="yes"), "causal must be True, False"),
    (lambda: B.trivial(N=16, Nkv=16, d=8, heads=0), "heads must be an integer >= 1"),
    (lambda: B.trivial(N=16, Nkv=-1, d=8), "Nkv must be an integer >= 1"),
    (lambda: B.matmul(m=4, k=0, n=4, M=16), "k must be an integer >= 1"),
    (lambda: B.applicable(N=16, d=8, M=64, causal=True, q=17), "Theorem 4.8 is stated for square unmasked"),
    (lambda: B.applicable(N=16, d=8, M=64, Nkv=8, binary=True), "Theorem 4.14 is stated for square"),
    (lambda: B.best([B.standard_matmul(N=16, d=8, M=64)]), "no explicit bound"),
])
def test_precondition_violation_raises_value_error_naming_it(call, needle):
    with pytest.raises(ValueError) as e:
        call()
    assert isinstance(e.value, attnio.ParameterError)
    assert needle in str(e.value)


def test_65_is_rejected_as_not_a_prime_power_not_as_too_small():
    with pytest.raises(ValueError, match="prime power"):
        B.fast_matmul_field(N=64, d=8, M=256, q=65)
    assert B.fast_matmul_field(N=64, d=8, M=256, q=67).value == min(64**2 * 64 / 256, 64**2)
    assert B.fast_matmul_field(N=64, d=8, M=256, q=128).theorem.endswith("Theorem 4.8")


# ---------------------------------------------------------------- exact values
def test_trivial_counts_inputs_and_output_exactly():
    assert B.trivial(N=4096, Nkv=4096, d=64).value == 4 * 4096 * 64
    assert B.trivial(N=100, Nkv=37, d=8).value == (100 + 2 * 37) * 8 + 100 * 8
    # one key: the output is V's row whatever Q and K are, so neither is read
    assert B.trivial(N=50, Nkv=1, d=8).value == 1 * 8 + 50 * 8
    # causal, Nq = Nkv = 4: row 0 sees one key (its Q row is not needed)
    assert B.trivial(N=4, Nkv=4, d=2, causal=True).value == (3 + 4 + 4) * 2 + 4 * 2
    assert B.trivial(N=4, Nkv=4, d=2, heads=3).value == 3 * B.trivial(N=4, Nkv=4, d=2).value


def brute_pairs(Nq, Nkv, causal):
    tot = 0
    for r in range(Nq):
        v = Nkv if not causal else max(0, min(Nkv, r + 1 + Nkv - Nq))
        tot += v if v >= 2 else 0
    return tot


@pytest.mark.parametrize("Nq, Nkv", [(1, 1), (1, 5), (5, 1), (7, 7), (7, 3), (3, 9), (16, 16)])
@pytest.mark.parametrize("causal", [False, True])
def test_required_pairs_matches_brute_force(Nq, Nkv, causal):
    assert B.required_pairs(N=Nq, Nkv=Nkv, causal=causal) == brute_pairs(Nq, Nkv, causal)


def test_asymptotic_forms_and_regimes():
    b = B.standard_matmul(N=1024, d=64, M=1024)
    assert b.regime == "small cache (M < d^2)" and not b.explicit and b.constant == 1.0
    # the Θ form adds the trivial term (reading Q, K, V and writing O: 4Nd)
    assert b.value == pytest.approx(4 * 1024 * 64 + 1024**2 * 64 / 32)
    b = B.standard_matmul(N=1024, d=64, M=8192)
    assert b.regime == "large cache (M >= d^2)"
    assert b.value == pytest.approx(4 * 1024 * 64 + 1024**2 * 64**2 / 8192)
    assert B.binary_inputs(N=1024, d=64, M=8192).value == pytest.approx(
        min(1024**2 * 64**2 / (8192 * 100), 1024**2))


def test_large_cache_bound_meets_its_closed_form():
    # K = M gives M·(⌈N²d²/M²⌉ - 1) >= N²d²/M - M when M >= 2d²; the grid maximum is at least that
    for N, d, M in [(4096, 64, 8192), (4096, 64, 65536), (2**20, 128, 2**16)]:
        assert B.standard_matmul_large_cache(N=N, d=d, M=M).value >= N * N * d * d / M - M - 1


def test_small_cache_bound_is_about_root2_n2d_over_root_m():
    # for M << d² the Loomis-Whitney bound tends to √2·N²d/√M - 4M (docs/bounds.md §4)
    N, d, M = 4096, 1024, 256
    v = B.standard_matmul_small_cache(N=N, d=d, M=M).value
    assert 1.35 * N * N * d / M**0.5 <= v <= 1.42 * N * N * d / M**0.5


def test_cosma_statement_fails_for_small_k_and_the_explicit_matmul_bound_does_not():
    # m = n = 100, k = 1, M = 100: hold 98 entries of A, stream B twice -> 300 reads + 10,000 writes
    schedule = 100 + 2 * 100 + 100 * 100
    assert B.matmul_cosma(m=100, k=1, n=100, M=100).value == 12000 > schedule
    assert not B.matmul_cosma(m=100, k=1, n=100, M=100).explicit
    assert B.matmul(m=100, k=1, n=100, M=100).explicit and B.matmul(m=100, k=1, n=100, M=100).value <= schedule


# ---------------------------------------------------------------- monotonicity
ATTN = {
    "trivial": lambda N, d, M: B.trivial(N=N, Nkv=N, d=d),
    "standard_matmul": B.standard_matmul,
    "standard_matmul_large_cache": B.standard_matmul_large_cache,
    "standard_matmul_small_cache": B.standard_matmul_small_cache,
    "standard_matmul_large_cache causal": lambda N, d, M: B.standard_matmul_large_cache(
        N=N, d=d, M=M, causal=True),
    "standard_matmul_small_cache causal": lambda N, d, M: B.standard_matmul_small_cache(
        N=N, d=d, M=M, causal=True),
    "fast_matmul_field": lambda N, d, M: B.fast_matmul_field(N=N, d=d, M=M, q=4099),
    "binary_inputs": B.binary_inputs,
    "matmul": lambda N, d, M: B.matmul(m=N, k=d, n=N, M=M),
}
GRID_N = [3, 4, 8, 17, 64, 100, 512, 4096]
GRID_D = [1, 2, 8, 16, 64, 128]
GRID_M = [4, 16, 50, 256, 1000, 4096, 65536, 2**20]


@pytest.mark.parametrize("name", sorted(ATTN))
def test_bounds_are_monotone_on_a_grid(name):
    f = ATTN[name]
    v = {}
    for N, d, M in itertools.product(GRID_N, GRID_D, GRID_M):
        try:
            v[N, d, M] = f(N=N, d=d, M=M).value
        except attnio.ParameterError:  # outside a precondition (binary_inputs: d >= log2(N+1))
            assert name == "binary_inputs" and d < B.binary_min_d(N)
    assert len(v) > len(GRID_N) * len(GRID_D) * len(GRID_M) // 2
    for N, d, M in v:
        for i, N2 in enumerate(GRID_N[:-1]):
            if N2 == N and (GRID_N[i + 1], d, M) in v:
                assert v[GRID_N[i + 1], d, M] >= v[N, d, M], ("N", N, d, M)
        for i, d2 in enumerate(GRID_D[:-1]):
            if d2 == d:
                assert v[N, GRID_D[i + 1], M] >= v[N, d, M], ("d", N, d, M)
        for i, M2 in enumerate(GRID_M[:-1]):
            if M2 == M:
                assert v[N, d, GRID_M[i + 1]] <= v[N, d, M], ("M", N, d, M)


#: Every public bound function of sizes, with a call by keyword (issue 36: uniform signatures).
KEYWORD_CALLS = {
    "trivial": dict(N=64, d=8, Nkv=32), "backward_trivial": dict(N=64, d=8, Nkv=32),
    "backward_inputs": dict(N=64, d=8, Nkv=32), "required_pairs": dict(N=64, Nkv=32),
    "approx_trivial": dict(N=64, d=8, Nkv=32, error=1e-9, R=1.0),
    "approx_w_stationary": dict(N=64, d=8, M=256, r=40, Nkv=32),
    **{n: dict(N=64, d=8, M=256) for n in (
        "pv_segment", "qkpv_pooled", "qkpv_levelled", "reread_cut", "backward_accum",
        "backward_pooled", "li_backward", "standard_matmul", "standard_matmul_large_cache",
        "standard_matmul_small_cache", "applicable", "backward_applicable", "binary_inputs")},
    "fast_matmul_field": dict(N=64, d=8, M=256, q=67),
    **{n: dict(m=16, k=8, n=16, M=64) for n in ("matmul", "matmul_potential", "matmul_smith",
                                                   "matmul_cosma")},
    **{n: dict(P=1000, d=8, M=256) for n in ("pv_segment_pairs", "qkpv_pooled_pairs",
                                              "qkpv_levelled_pairs", "backward_accum_pairs",
                                              "backward_pooled_pairs")},
}


@pytest.mark.parametrize("name", sorted(KEYWORD_CALLS))
def test_bound_sizes_are_keyword_only(name):
    f = getattr(B, name, None) or getattr(B.backward, name)
    kw = KEYWORD_CALLS[name]
    f(**kw)  # by keyword: accepted
    with pytest.raises(TypeError, match=rf"^{name}\(\) takes its sizes by keyword: {name}\("):
        f(*kw.values())


def test_trivial_old_positional_order_is_refused_by_name():
    # trivial(16384, 256, 16384) used to mean (Nq, Nkv, d): never silently (N, d, M) now
    with pytest.raises(TypeError, match=r"old positional order \(Nq, Nkv, d\) is gone"):
        B.trivial(16384, 256, 16384)
    assert B.trivial(N=16384, d=256).value == B.trivial(N=16384, d=256, Nkv=16384).value \
        == 4 * 16384 * 256


# ---------------------------------------------------------------- measured counts >= bounds
EXACT = [a for a in attnio.algorithms.all_algorithms() if a.exact]


def explicit_bounds(N, Nkv, d, M, causal):
    bs = [b for b in B.applicable(N=N, d=d, M=M, Nkv=Nkv, causal=causal) if b.explicit]
    assert {b.name for b in bs} >= {"trivial", "standard_matmul_large_cache",
                                    "standard_matmul_small_cache"}
    return bs


_SIZES = dict(N=st.integers(1, 40), dkv=st.integers(-8, 8), d=st.integers(1, 12),
              M=st.integers(4, 3000), pick=st.integers(0, 10**6))


# 2 x 100 random workloads in the default run (each mask its own test, so xdist balances them);
# the slow variant below draws 2 x 1000
@pytest.mark.parametrize("causal", [False, True])
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(**_SIZES)
def test_every_exact_algorithm_measured_count_is_above_every_explicit_bound(causal, N, dkv, d, M,
                                                                           pick):
    _measured_count_is_above_every_explicit_bound(N, dkv, d, M, causal, pick)


@pytest.mark.slow
@pytest.mark.parametrize("causal", [False, True])
@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(**_SIZES)
def test_every_exact_algorithm_measured_count_is_above_every_explicit_bound_1000(causal, N, dkv,
                                                                                d, M, pick):
    _measured_count_is_above_every_explicit_bound(N, dkv, d, M, causal, pick)


def _measured_count_is_above_every_explicit_bound(N, dkv, d, M, causal, pick):
    """Every exact algorithm, at its default tiling and one candidate picked by ``pick``: the
    measured count is at least every explicit bound that applies."""
    Nkv = max(1, N + dkv)
    shape = Shape(N, Nkv, d, causal=causal)
    bs = explicit_bounds(N, Nkv, d, M, causal)
    ran = 0
    for alg in EXACT:
        if mapper.can_run(alg, shape, M) is not None:
            continue
        cands = [t for t in alg.candidate_tilings(shape, M) if alg.footprint(shape, t) <= M]
        for tiling in {None, cands[pick % len(cands)] if cands else None}:
            res = attnio.run(alg.name, shape=shape, M=M, mode="count", tiling=tiling)
            ran += 1
            for b in bs:
                assert res.io.total >= b.value, (alg.name, res.tiling, res.io.total, b)
    if M >= 4 * d + 5:
        assert ran >= 2  # flash2 and standard always run here


@settings(max_examples=200, deadline=None)
@given(m=st.integers(1, 40), k=st.integers(1, 40), n=st.integers(1, 40), M=st.integers(3, 2000))
def test_blocked_matmul_counts_are_above_the_explicit_matmul_bound(m, k, n, M):
    from attnio.blocks.matmul import ALGORITHM, run_matmul

    if M < ALGORITHM.min_M((m, k, n)):
        return
    res = run_matmul(shape=(m, k, n), M=M)
    assert res.io.total >= B.matmul(m=m, k=k, n=n, M=M).value


def test_bound_records_theorem_assumptions_and_explicitness():
    b = B.standard_matmul_large_cache(N=1024, d=64, M=16384)
    assert b.explicit and b.constant is None and "Lemma 3.3" in b.theorem
    assert any("standard matmul" in a for a in b.assumptions)
    d = b.to_dict()
    assert d["name"] == "standard_matmul_large_cache" and isinstance(d["assumptions"], list)
    assert "explicit" in str(b)
