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
