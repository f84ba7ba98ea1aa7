"""torch_ops: poly_attention equals the simulator's approx_poly; gradients; FAVOR+ baseline."""

from __future__ import annotations

import numpy as np
import pytest

import attnio
from attnio import reference
from attnio.core.errors import ParameterError
from conftest import need

torch = need("torch")
from attnio.torch_ops import favor_attention, poly_attention, poly_plan  # noqa: E402


def _qkv(L, S, E, B=0.8, lead=(), seed=0, dtype=None, Ev=None):
    g = torch.Generator().manual_seed(seed)
    dtype = dtype or torch.float64
    q = (torch.rand(*lead, L, E, generator=g, dtype=torch.float64) * 2 - 1) * B
    k = (torch.rand(*lead, S, E, generator=g, dtype=torch.float64) * 2 - 1) * B
    v = torch.randn(*lead, S, Ev or E, generator=g, dtype=torch.float64)
    return q.to(dtype), k.to(dtype), v.to(dtype)


@pytest.mark.parametrize("L,S,causal", [(100, 100, False), (100, 100, True), (70, 130, True),
                                        (130, 70, True), (64, 90, False)])
@pytest.mark.parametrize("entry_bound", [0.8, None])
def test_poly_attention_equals_simulator_to_1e12(L, S, causal, entry_bound):
    q, k, v = _qkv(L, S, 4, seed=L + S)
    o = poly_attention(q, k, v, eps=1e-4, entry_bound=entry_bound, is_causal=causal, chunk=17)
    tiling = {"eps": 1e-4} if entry_bound is None else {"eps": 1e-4, "entry_bound": entry_bound}
    res = attnio.run("approx_poly", q.numpy(), k.numpy(), v.numpy(), M=2_000, causal=causal,
                     tiling=tiling)
    diff = float(np.abs(o.numpy() - res.output).max())
    err = float(np.abs(o.numpy() - reference.attention(q.numpy(), k.numpy(), v.numpy(),
                                                        causal=causal)).max())
    print(f"L={L} S={S} causal={causal}: |torch - simulator| {diff:.1e}, error {err:.2e} <= "
          f"{res.tiling.error_bound_for(v.numpy()):.2e}")
    assert diff <= 1e-12
    assert err <= res.tiling.error_bound_for(v.numpy())


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("L", [8, 5])
def test_poly_attention_gradcheck(causal, L):
    q, k, v = _qkv(L, 8, 2, B=0.5, lead=(2,), seed=L)
    args = tuple(x.requires_grad_() for x in (q, k, v))
    assert torch.autograd.gradcheck(
        lambda a, b, c: poly_attention(a, b, c, eps=1e-3, entry_bound=0.5, is_causal=causal,
                                       chunk=5), args)


@pytest.mark.parametrize("causal", [False, True])
def test_favor_attention_gradcheck(causal):
    q, k, v = _qkv(6, 7, 2, seed=3)
    args = tuple(x.requires_grad_() for x in (q, k, v))
    assert torch.autograd.gradcheck(
        lambda a, b, c: favor_attention(a, b, c, features=4, is_causal=causal, chunk=3), args)


def test_gradients_match_autograd_through_exact_attention_within_the_approximation():
    q, k, v = _qkv(50, 50, 4, B=0.5, seed=9)
    grads = []
    for f in (lambda a, b, c: poly_attention(a, b, c, eps=1e-8, entry_bound=0.5, is_causal=True),
              lambda a, b, c: torch.nn.functional.scaled_dot_product_attention(a, b, c,
                                                                                is_causal=True)):
        xs = [x.clone().requires_grad_() for x in (q, k, v)]
        f(*xs).pow(2).sum().backward()
        grads.append([x.grad for x in xs])
    for gp, ge in zip(*grads):
        assert float((gp - ge).abs().max()) < 1e-5


def test_batched_layout_value_dim_chunks_and_float32():
    q, k, v = _qkv(40, 60, 4, lead=(2, 3), Ev=5, seed=1)
    a = poly_attention(q, k, v, entry_bound=0.8, chunk=7)
    b = poly_attention(q, k, v, entry_bound=0.8, chunk=1000)
    assert a.shape == (2, 3, 40, 5) and float((a - b).abs().max()) < 1e-13
    ref = torch.nn.functional.scaled_dot_product_attention(q, k, v)
    assert float((a - ref).abs().max()) <= 1e-3 / (1 - 1e-3) * float(
        (v.amax(-2) - v.amin(-2)).max())
    a32 = poly_attention(q.float(), k.float(), v.float(), entry_bound=0.8)
    assert a32.dtype == torch.float32 and float((a32.double() - a).abs().max()) < 1e-4


def test_top_left_alignment_matches_sdpa_is_causal():
    q, k, v = _qkv(30, 50, 4, seed=2)
    o = poly_attention(q, k, v, eps=1e-6, entry_bound=0.8, is_causal=True, causal_align="top_left")
    ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert float((o - ref).abs().max()) < 1e-5


def test_bad_inputs_refused():
    q, k, v = _qkv(10, 10, 4, B=1.0)
    with pytest.raises(ParameterError, match="entry_bound=0.5"):
        poly_attention(q, k, v, entry_bound=0.5)
    with pytest.warns(UserWarning, match="LOST"):
        poly_attention(q, k, v, entry_bound=0.5, allow_unbounded=True)
    with pytest.raises(ParameterError, match="eps"):
        poly_attention(q, k, v, eps=0.0)
    with pytest.raises(ParameterError, match="float32, float64, bfloat16 or float16"):
        poly_attention(q.int(), k, v)
    with pytest.raises(ParameterError, match="shapes"):
        poly_attention(q, k[:5], v)
    with pytest.raises(ParameterError, match="features"):
        favor_attention(q, k, v, features=0)


def test_poly_plan_reports_r_before_running():
    q, k, _ = _qkv(10, 10, 8, B=0.6)
    p, fm, R = poly_plan(q, k, eps=1e-3, entry_bound=0.6)
    assert R == pytest.approx(0.36 * 8 / 8**0.5) and p.degree == 5 and fm.r == 1287
