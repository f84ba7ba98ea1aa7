"""Numerical edge cases: huge logits, ties, fully masked rows, low-precision inputs.

For float16/bfloat16/float32 inputs the error is judged as flash-attention's tests judge it:
against a float64 reference computed from the same (rounded) inputs, an algorithm's error must be
at most twice the error of naive attention computed at the inputs' precision (plus a tiny
absolute slack for outputs that are exact in both).
"""

from __future__ import annotations

import numpy as np
import pytest

import attnio
from conftest import exact_attention_names, need

ALGS = exact_attention_names()


@pytest.mark.parametrize("name", ALGS)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("magnitude", [1e2, 1e3, 1e4])
def test_logits_up_to_1e4_stay_finite_and_accurate(name, causal, magnitude):
    rng = np.random.default_rng(11)
    N, d = 37, 4
    Q, K, V = (rng.standard_normal((N, d)) for _ in range(3))
    s = magnitude / np.abs(Q @ K.T).max()
    res = attnio.run(name, Q, K, V, M=300, causal=causal, scale=s)
    ref = attnio.reference.attention(Q, K, V, causal=causal, scale=s)
    assert np.isfinite(res.output).all()
    assert np.abs(res.output - ref).max() <= 1e-10


@pytest.mark.parametrize("name", ALGS)
def test_all_equal_rows_give_the_mean_of_the_values(name):
    rng = np.random.default_rng(2)
    Q = np.zeros((20, 3))
    K = rng.standard_normal((20, 3))
    V = rng.standard_normal((20, 3))
    res = attnio.run(name, Q, K, V, M=200)
    assert np.abs(res.output - V.mean(axis=0)).max() <= 1e-12
    res = attnio.run(name, Q, K, V, M=200, causal=True)
    expect = np.cumsum(V, axis=0) / np.arange(1, 21)[:, None]
    assert np.abs(res.output - expect).max() <= 1e-12


@pytest.mark.parametrize("name", ALGS)
def test_fully_masked_rows_output_zero_like_sdpa(name):
    torch = need("torch")
    rng = np.random.default_rng(4)
    Nq, Nkv, d = 30, 12, 4  # bottom-right causal: rows 0..17 see no key
    Q = rng.standard_normal((Nq, d))
    K, V = rng.standard_normal((Nkv, d)), rng.standard_normal((Nkv, d))
    res = attnio.run(name, Q, K, V, M=400, causal=True)
    assert np.all(res.output[: Nq - Nkv] == 0.0)
    mask = ~attnio.reference.mask(Nq, Nkv, causal=True)
    sdpa = torch.nn.functional.scaled_dot_product_attention(
        *(torch.from_numpy(x) for x in (Q, K, V)), attn_mask=torch.from_numpy(mask)).numpy()
    assert np.abs(res.output - sdpa).max() <= 1e-10


def _naive_low(Q, K, V, dtype, causal):
    import torch

    q, k, v = (torch.from_numpy(x).to(dtype) for x in (Q, K, V))
    S = (q @ k.T) * (1.0 / np.sqrt(Q.shape[1]))
    if causal:
        mask = torch.from_numpy(attnio.reference.mask(*S.shape, causal=True))
        S = S.masked_fill(mask, float("-inf"))
    return (torch.softmax(S, dim=-1) @ v).double().numpy()


@pytest.mark.parametrize("name", ALGS)
@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
@pytest.mark.parametrize("causal", [False, True])
def test_low_precision_error_within_twice_naive(name, dtype, causal):
    torch = need("torch")
    tdt = getattr(torch, dtype)
    rng = np.random.default_rng(5)
    N, d = 97, 16
    # round the inputs to the test's precision first: the reference sees the same numbers
    Q, K, V = (torch.from_numpy(rng.standard_normal((N, d))).to(tdt).double().numpy()
               for _ in range(3))
    ref = attnio.reference.attention(Q, K, V, causal=causal)
    naive_err = np.abs(_naive_low(Q, K, V, tdt, causal) - ref).max()
    if dtype == "bfloat16":
        inputs = [torch.from_numpy(x).to(tdt) for x in (Q, K, V)]
    else:
        inputs = [x.astype(dtype) for x in (Q, K, V)]
    res = attnio.run(name, *inputs, M=1000, causal=causal)
    out = np.asarray(res.output, dtype=np.float64)
    err = np.abs(out - ref).max()
    print(f"{name} {dtype} causal={causal}: max err {err:.3e}, naive {naive_err:.3e}")
    assert err <= 2 * naive_err + 1e-7
    if dtype != "bfloat16":
        assert res.output.dtype == np.dtype(dtype)


# ---------------------------------------------------------------- values near the largest float
def _huge_values(Nkv, d, dtype, rng):
    """V of alternating sign near the dtype's largest finite value (a column at 0.95 x max), and
    a column of tiny values: the output is a convex combination of V's rows, so the reference
    is finite; an unnormalised accumulator (up to Nkv x max |V|) is not."""
    big = float(np.finfo(dtype).max)
    V = np.full((Nkv, d), big / 16)
    V[::2] *= -1
    V[:, 0] = 0.95 * big * np.where(np.arange(Nkv) % 3 == 0, -1, 1)
    V[:, 1] = float(np.finfo(dtype).tiny) * 1e3
    return V.astype(dtype)


@pytest.mark.parametrize("name", ALGS)
@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("causal", [False, True])
def test_values_near_the_largest_float_give_the_finite_reference(name, dtype, causal):
    """Issue 24: V entries near 1e307 gave an infinite output (exit 0) for the flash schedules,
    whose unnormalised accumulator overflowed; every schedule now stays within max |V|, with the
    same counts as with small values."""
    rng = np.random.default_rng(24)
    Nq, Nkv, d = 40, 70, 6
    Q, K = rng.standard_normal((Nq, d)).astype(dtype), rng.standard_normal((Nkv, d)).astype(dtype)
    V = _huge_values(Nkv, d, dtype, rng)
    tiling = {"Br": 8, "Bc": 8, "splits": 3} if name == "flash_decoding" else None
    with np.errstate(over="raise"):
        res = attnio.run(name, Q, K, V, M=2000, causal=causal, tiling=tiling)
    ref = attnio.reference.attention(*(x.astype(np.float64) for x in (Q, K, V)), causal=causal)
    assert np.isfinite(ref).all() and np.isfinite(res.output).all()
    rel = np.abs(res.output.astype(np.float64) - ref) / np.abs(V.astype(np.float64)).max(axis=0)
    assert rel.max() <= (1e-12 if dtype == "float64" else 1e-5), rel.max()
    # the tiny column is not flushed to zero by the scaling (relative to its own size)
    tiny = np.abs(ref[:, 1]) > 0
    assert np.abs(res.output[tiny, 1] / ref[tiny, 1] - 1).max() <= 1e-5
    small = attnio.run(name, shape=res.shape, M=2000, mode="count", tiling=res.tiling)
    assert (small.io.reads, small.io.writes) == (res.io.reads, res.io.writes)


def test_approx_poly_refuses_values_that_can_overflow_its_accumulators():
    """approx_poly's sums over keys of features x V cannot be kept within max |V| (its features
    have both signs): V whose worst-case sum overflows is refused naming V, before running."""
    rng = np.random.default_rng(24)
    Q, K = rng.uniform(-0.5, 0.5, (64, 4)), rng.uniform(-0.5, 0.5, (64, 4))
    V = _huge_values(64, 4, "float64", rng)
    with pytest.raises(attnio.ParameterError, match="V: entries up to") as e:
        attnio.run("approx_poly", Q, K, V, M=4000)
    assert e.value.param == "V"
    # values far from the limit run, and stay finite (the message's bound is not hit)
    res = attnio.run("approx_poly", Q, K, V * 2.0 ** -40, M=4000)
    assert np.isfinite(res.output).all()
