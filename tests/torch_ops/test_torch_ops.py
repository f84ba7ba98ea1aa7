"""torch_ops: poly_attention equals the simulator's approx_poly; gradients; FAVOR+ baseline."""

from __future__ import annotations

import math

import numpy as np
import pytest

import attnio
from attnio import reference
from attnio.core.errors import ParameterError
from conftest import need

torch = need("torch")
from attnio.torch_ops import based_attention, favor_attention, poly_plan  # noqa: E402
from attnio.torch_ops import poly_attention as _poly_attention  # noqa: E402


def poly_attention(*args, **kw):
    """The approximation itself on this file's small shapes, where the default (on_slow="exact")
    would return exact attention: the tests of the defaults call ``_poly_attention``."""
    kw.setdefault("on_slow", "warn")
    return _poly_attention(*args, **kw)


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
    o = poly_attention(q, k, v, eps=1e-4, entry_bound=entry_bound, is_causal=causal, chunk=17,
                       causal_align="bottom_right")  # the simulator's alignment
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


# ----------------------------------------------------------------- SDPA's signature (issue 23)
pytestmark = pytest.mark.filterwarnings("ignore::attnio.torch_ops.SlowApproximationWarning")
sdpa = torch.nn.functional.scaled_dot_product_attention


@pytest.mark.parametrize("causal", [False, True])
def test_gqa_matches_sdpa_enable_gqa(causal):
    q, _, _ = _qkv(37, 37, 4, B=0.6, lead=(2, 6), seed=4)
    _, k, v = _qkv(37, 37, 4, B=0.6, lead=(2, 3), seed=5, Ev=3)
    o = poly_attention(q, k, v, is_causal=causal, enable_gqa=True, eps=1e-8, entry_bound=0.6,
                       chunk=16)
    ref = sdpa(q, k, v, is_causal=causal, enable_gqa=True)
    assert o.shape == (2, 6, 37, 3)
    assert float((o - ref).abs().max()) <= 1e-8 / (1 - 1e-8) * float((v.amax(-2) - v.amin(-2)).max())
    with pytest.raises(ParameterError, match="enable_gqa=True"):
        poly_attention(q, k, v, entry_bound=0.6)
    with pytest.raises(ParameterError, match="multiple"):
        poly_attention(q[:, :4], k[:, :3], v[:, :3], enable_gqa=True, entry_bound=0.6)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_low_precision_computed_in_float32_returned_in_input_dtype(dtype):
    dt = getattr(torch, dtype)
    q, k, v = _qkv(50, 50, 4, B=0.6, lead=(2,), seed=6)
    ql, kl, vl = (x.to(dt) for x in (q, k, v))
    o = poly_attention(ql, kl, vl, is_causal=True, entry_bound=0.6)  # one rounding above 0.6
    assert o.dtype == dt
    o32 = poly_attention(*(x.float() for x in (ql, kl, vl)), is_causal=True, entry_bound=0.61)
    # the float32 result of the same (rounded) inputs, rounded once to the input dtype (the two
    # plans' polynomials differ, as their radii do: within the two guarantees)
    u = torch.finfo(dt).eps / 2
    guarantee = 2 * 1e-3 / (1 - 1e-3) * float((vl.float().amax(-2) - vl.float().amin(-2)).max())
    assert float(((o.float() - o32).abs() - u * o32.abs()).max()) <= guarantee
    with pytest.raises(ParameterError, match="entry_bound"):  # two roundings above: refused
        poly_attention(ql * (1 + 4 * u), kl, vl, entry_bound=float(ql.abs().max()))
    xs = [x.clone().requires_grad_() for x in (ql, kl, vl)]
    poly_attention(*xs, is_causal=True, entry_bound=0.61).float().sum().backward()
    assert all(x.grad.dtype == dt and bool(torch.isfinite(x.grad).all()) for x in xs)


def test_scale_dropout_and_masks_follow_sdpa():
    q, k, v = _qkv(20, 20, 4, B=0.6, seed=7)
    o = poly_attention(q, k, v, scale=0.3, eps=1e-8, entry_bound=0.6)
    assert float((o - sdpa(q, k, v, scale=0.3)).abs().max()) < 1e-7
    with pytest.raises(ParameterError, match="dropout_p must be 0"):
        poly_attention(q, k, v, dropout_p=0.1, entry_bound=0.6)
    causal = poly_attention(q, k, v, is_causal=True, entry_bound=0.6)
    tri = torch.ones(20, 20, dtype=torch.bool).tril()
    assert torch.equal(poly_attention(q, k, v, attn_mask=tri, entry_bound=0.6), causal)
    additive = torch.zeros(20, 20, dtype=torch.float64).masked_fill(~tri, float("-inf"))
    assert torch.equal(poly_attention(q, k, v, attn_mask=additive, entry_bound=0.6), causal)
    for bad in (torch.ones(20, 20, dtype=torch.bool).triu(), torch.rand(20, 20) > 0.5,
                torch.randn(20, 20)):
        with pytest.raises(ParameterError, match="^attn_mask: "):
            poly_attention(q, k, v, attn_mask=bad, entry_bound=0.6)
    with pytest.raises(ParameterError, match="both given"):
        poly_attention(q, k, v, attn_mask=tri, is_causal=True, entry_bound=0.6)


@pytest.mark.parametrize("where", ["q", "k", "v"])
@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
@pytest.mark.parametrize("entry_bound", [0.6, None])
def test_nan_or_inf_anywhere_reported_the_same_way(where, bad, entry_bound):
    q, k, v = _qkv(12, 12, 4, B=0.6, seed=8)
    x = {"q": q, "k": k, "v": v}[where]
    x[3, 1] = bad
    with pytest.raises(ParameterError, match=f"^{where} contains NaN or inf"):
        poly_attention(q, k, v, entry_bound=entry_bound)


def test_meta_tensors_plan_from_the_entry_bound_or_ask_for_it():
    q = torch.empty(2, 4, 64, 8, device="meta")
    o = poly_attention(q, q, q, entry_bound=0.6, is_causal=True)
    assert o.device.type == "meta" and o.shape == (2, 4, 64, 8)
    with pytest.raises(ParameterError, match="entry_bound is required on the meta device"):
        poly_attention(q, q, q)


def _norm_rows(n, E, norm, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(1, 1, n, E, generator=g)
    return x / x.norm(dim=-1, keepdim=True) * norm


def test_slow_plan_warns_or_refuses_before_computing_any_feature(monkeypatch):
    """A module's data with no entry_bound: R = 4.17 at E = 8 plans degree 12, r = 125,970 > L."""
    from attnio.torch_ops import SlowApproximationWarning, _kernels

    norm = (4.17 * 8 ** 0.5) ** 0.5
    q, k, v = _norm_rows(512, 8, norm, 1), _norm_rows(512, 8, norm, 2), _norm_rows(512, 8, 1.0, 3)
    plan = poly_plan(q, k, v, calibrate=False)
    # R: the row norms computed in float32, raised by (E + 2) units of rounding to bound them
    assert plan.R == pytest.approx(4.17, rel=1e-5) and plan.degree == 12 and plan.r == 125_970
    assert plan.slow and "exceed the n = 512 keys" in plan.reason

    def no_features(*a, **kw):
        raise AssertionError("a feature was computed")

    from attnio.torch_ops._plan import calibration

    calibration()  # the once-per-process timing (its own small problem) before the patch
    for name in ("__init__", "lower", "features"):
        monkeypatch.setattr(_kernels.PolyKernel, name, no_features)
    with pytest.raises(ParameterError, match="r = 125,970 features") as e:
        poly_attention(q, k, v, on_slow="error")
    assert "on_slow" in str(e.value) and "SDPA" in str(e.value)
    with pytest.warns(SlowApproximationWarning, match="r = 125,970"), \
            pytest.raises(AssertionError, match="a feature was computed"):
        poly_attention(q, k, v, on_slow="warn")
    exact = poly_attention(q, k, v, on_slow="exact", is_causal=True)
    assert torch.allclose(exact, sdpa(q, k, v, is_causal=True))
    with pytest.raises(ParameterError, match="on_slow must be one of"):
        poly_attention(q, k, v, on_slow="ignore")


def test_poly_plan_reports_degree_r_times_and_guarantee():
    q = torch.rand(2, 4, 4096, 8) - 0.5
    plan = poly_plan(q, q, eps=1e-3, entry_bound=0.6, calibrate=False)
    assert (plan.degree, plan.r, plan.slow, plan.reason) == (5, 1287, False, "")
    assert plan.guaranteed_error == pytest.approx(plan.poly.bound / (1 - plan.poly.bound))
    assert plan.predicted_s > 0 and plan.sdpa_predicted_s > 0
    small = poly_plan(q[..., :64, :], q[..., :64, :], eps=1e-3, entry_bound=0.6, calibrate=False)
    assert small.slow and "exceed the n = 64 keys" in small.reason
    p, fm, R = plan  # the first API's tuple
    assert (p.degree, fm.r, R) == (5, 1287, plan.R)


def test_based_attention_is_the_degree_2_taylor_kernel():
    q, k, v = _qkv(30, 40, 4, B=1.5, seed=9)
    s = 0.5
    w = 1 + s * (q @ k.T) + (s * (q @ k.T)) ** 2 / 2
    mask = torch.ones(30, 40, dtype=torch.bool).tril(diagonal=10)
    for causal, ww in ((False, w), (True, w * mask)):
        ref = (ww @ v) / ww.sum(-1, keepdim=True)
        o = based_attention(q, k, v, is_causal=causal, chunk=8, causal_align="bottom_right")
        assert float((o - ref).abs().max()) < 1e-12
    args = tuple(x[:6, :].clone().requires_grad_() for x in (q, k, v))
    assert torch.autograd.gradcheck(lambda a, b, c: based_attention(
        a, b, c, is_causal=True, chunk=4, causal_align="bottom_right"), args)


def test_float32_causal_gradient_close_to_float64():
    q, k, v = _qkv(3000, 3000, 8, B=0.59, seed=10)
    G = torch.randn(3000, 8, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    grads = {}
    for dt in (torch.float32, torch.float64):
        xs = [x.to(dt).requires_grad_() for x in (q, k, v)]
        (poly_attention(*xs, entry_bound=0.59, is_causal=True, chunk=512) * G.to(dt)).sum().backward()
        grads[dt] = [x.grad.double() for x in xs]
    for a, b in zip(grads[torch.float32], grads[torch.float64]):
        rel = float((a - b).abs().max() / b.abs().max())
        print(f"float32 causal gradient relative error {rel:.2e}")
        assert rel < 1e-5


class _TinyAttention(torch.nn.Module):
    """A module using poly_attention: bf16, GQA (32 query heads on 8 KV heads), causal."""

    def __init__(self, D=32, Hq=32, Hk=8, E=4):
        super().__init__()
        self.Hq, self.Hk, self.E = Hq, Hk, E
        self.wq = torch.nn.Linear(D, Hq * E)
        self.wkv = torch.nn.Linear(D, 2 * Hk * E)
        self.wo = torch.nn.Linear(Hq * E, D)

    def forward(self, x):
        B, L, _ = x.shape
        q = torch.tanh(self.wq(x)).view(B, L, self.Hq, self.E).transpose(1, 2) * 0.5
        kv = self.wkv(x).view(B, L, 2, self.Hk, self.E)
        k = torch.tanh(kv[:, :, 0]).transpose(1, 2) * 0.5
        v = kv[:, :, 1].transpose(1, 2)
        o = poly_attention(q, k, v, is_causal=True, enable_gqa=True, entry_bound=0.5)
        return self.wo(o.transpose(1, 2).reshape(B, L, -1))


@pytest.mark.parametrize("backend", [
    # dynamo with fullgraph=True (no graph break) and AOTAutograd on fake tensors (the custom
    # operator's fake kernel and its backward formula), without Inductor's code generation
    "aot_eager",
    # the full default pipeline: Inductor compiles the graph (about 25 s on 2 cores)
    pytest.param("inductor", marks=pytest.mark.slow),
])
def test_module_in_bf16_gqa_causal_trains_one_step_under_compile_fullgraph(backend):
    torch.manual_seed(0)
    eager = _TinyAttention().to(torch.bfloat16)
    compiled = _TinyAttention().to(torch.bfloat16)
    compiled.load_state_dict(eager.state_dict())
    x = torch.randn(2, 48, 32, dtype=torch.bfloat16)
    step = torch.compile(compiled, fullgraph=True, backend=backend)
    losses, grads = [], []
    for m, f in ((eager, eager), (compiled, step)):
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        loss = f(x).float().pow(2).mean()
        loss.backward()
        grads.append(m.wq.weight.grad.float().clone())
        opt.step()
        losses.append(float(loss.detach()))
    assert losses[1] == pytest.approx(losses[0], rel=2e-2)
    assert float((grads[1] - grads[0]).abs().max()) <= 0.05 * float(grads[0].abs().max())
    assert not torch.equal(compiled.wq.weight, eager.wq.weight.new_zeros(()))  # a step was taken
    assert torch.allclose(compiled.wq.weight.float(), eager.wq.weight.float(), atol=1e-2)


# ------------------------------------------------- safe to leave on (issue 35)
from attnio.torch_ops import SlowApproximationWarning  # noqa: E402


def _layer_normed(shape, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(*shape, generator=g)
    return torch.nn.functional.layer_norm(x, shape[-1:])


def test_hopeless_default_plan_returns_sdpa_with_one_warning_per_call_site():
    """Layer-normed q, k at d = 64: R ~ 8, r ~ 1e15 features.  The default falls back."""
    q, k, v = (_layer_normed((1, 2, 256, 64), s) for s in (1, 2, 3))
    ref = sdpa(q, k, v)
    import warnings as w
    with w.catch_warnings(record=True) as caught:
        w.simplefilter("default")  # Python's own filter: once per location
        outs = [_poly_attention(q, k, v) for _ in range(3)]  # one call site, three calls
    slow = [c for c in caught if issubclass(c.category, SlowApproximationWarning)]
    assert len(slow) == 1 and slow[0].filename == __file__  # stacklevel: the caller's line
    assert "falling back to exact attention" in str(slow[0].message)
    assert all(float((o - ref).abs().max()) <= 1e-6 for o in outs)
    with pytest.raises(ParameterError, match="on_slow='error'"):
        _poly_attention(q, k, v, on_slow="error")
    with pytest.raises(ParameterError, match="cannot run"):  # 'warn' cannot run it either
        _poly_attention(q, k, v, on_slow="warn")


def test_no_degree_reaching_eps_falls_back_by_default():
    g = torch.Generator().manual_seed(4)
    q, k, v = (torch.randn(1, 1, 64, 16, generator=g) * 2 for _ in range(3))  # R ~ 27
    with pytest.warns(SlowApproximationWarning, match="no degree"):
        o = _poly_attention(q, k, v, is_causal=True)
    assert float((o - sdpa(q, k, v, is_causal=True)).abs().max()) <= 1e-6
    for mode in ("warn", "error"):
        with pytest.raises(ParameterError, match="no degree"):
            _poly_attention(q, k, v, on_slow=mode)


_MEMORY_SCRIPT = r"""
import resource, sys, warnings
import torch
from attnio.core.errors import ParameterError
from attnio.torch_ops import poly_attention
warnings.simplefilter("ignore")
torch.set_num_threads(1)
def peak():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
g = torch.Generator().manual_seed(0)
x = [torch.nn.functional.layer_norm(torch.randn(1, 8, 4096, 64, generator=g), (64,))
     for _ in range(3)]
torch.nn.functional.scaled_dot_product_attention(*x)
base = peak()
poly_attention(*x)                                   # the hopeless default: SDPA's output
small = [torch.rand(16, 64, generator=g) * 2 - 1 for _ in range(3)]
poly_attention(*small, eps=1e-3, entry_bound=1.0)    # issue 35's (16, 64) case: falls back
try:
    poly_attention(*small, eps=1e-3, entry_bound=1.0, on_slow="warn")
except ParameterError:
    pass
print((peak() - base) / 2**20)
"""


def test_hopeless_plans_use_no_more_memory_than_sdpa(tmp_path):
    """Peak RSS in a fresh process: the fallbacks and the refusal of the (16, 64) case
    (r ~ 1e15) add at most 200 MB to what SDPA alone used (it used to be 2.4 GB and more)."""
    import os
    import subprocess
    import sys

    env = dict(os.environ, ATTNIO_CACHE_DIR=str(tmp_path))
    out = subprocess.run([sys.executable, "-c", _MEMORY_SCRIPT], capture_output=True, text=True,
                         env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    extra_mb = float(out.stdout.split()[-1])
    print(f"peak RSS beyond SDPA's: {extra_mb:.1f} MB")
    assert extra_mb <= 200


@pytest.mark.parametrize("L,S", [(100, 300), (300, 100), (37, 64)])
def test_is_causal_is_sdpa_top_left_when_lengths_differ(L, S):
    q, k, v = _qkv(L, S, 4, B=0.6, lead=(2,), seed=L)
    o = poly_attention(q, k, v, is_causal=True, eps=1e-8, entry_bound=0.6)
    ref = sdpa(q, k, v, is_causal=True)
    assert float((o - ref).abs().max()) <= 1e-8 / (1 - 1e-8) * float((v.amax(-2) - v.amin(-2)).max())
    br = poly_attention(q, k, v, is_causal=True, eps=1e-8, entry_bound=0.6,
                        causal_align="bottom_right")
    mask = torch.ones(L, S, dtype=torch.bool).tril(diagonal=S - L)
    seen = mask.any(-1)  # bottom-right rows that see no key are zero (SDPA: NaN)
    assert float((br[..., seen, :] - sdpa(q, k, v, attn_mask=mask)[..., seen, :]).abs().max()) < 1e-7


def test_hugging_face_masks_all_true_and_broadcast_shapes_accepted():
    q, k, v = _qkv(24, 24, 4, B=0.6, lead=(2, 3), seed=11)
    causal = poly_attention(q, k, v, is_causal=True, entry_bound=0.6)
    full = poly_attention(q, k, v, entry_bound=0.6)
    above = torch.ones(24, 24, dtype=torch.bool).triu(1)
    for fill in (-1e9, torch.finfo(torch.float64).min, torch.finfo(torch.float32).min, -10000.0):
        hf = torch.zeros(2, 1, 24, 24, dtype=torch.float64).masked_fill(above, fill)  # (B,1,L,S)
        assert torch.equal(poly_attention(q, k, v, attn_mask=hf, entry_bound=0.6), causal)
    assert torch.equal(poly_attention(q, k, v, attn_mask=~above[None, None], entry_bound=0.6),
                       causal)
    for ones in (torch.ones(1, 1, 24, 24, dtype=torch.bool), torch.ones(24, dtype=torch.bool),
                 torch.zeros(2, 1, 1, 24)):
        assert torch.equal(poly_attention(q, k, v, attn_mask=ones, entry_bound=0.6), full)
    pad = torch.ones(2, 1, 1, 24, dtype=torch.bool)
    pad[1, ..., 20:] = False  # the second sequence is padded
    with pytest.raises(ParameterError, match="padding.*scaled_dot_product_attention"):
        poly_attention(q, k, v, attn_mask=pad, entry_bound=0.6)
    with pytest.raises(ParameterError, match="does not broadcast"):
        poly_attention(q, k, v, attn_mask=torch.ones(5, 24, 24, dtype=torch.bool),
                       entry_bound=0.6)
    with pytest.raises(ParameterError, match="bias"):  # ALiBi-like values
        poly_attention(q, k, v, attn_mask=-torch.rand(24, 24), entry_bound=0.6)


def test_float32_offset_values_stay_within_the_stated_guarantee():
    """V = 1e4 + noise in float32: centring V makes the rounding scale with V's range; the
    error is within the plan's stated bound, its float32 term included."""
    q, k, v = _qkv(2048, 2048, 8, B=0.59, seed=12)
    v = 1e4 + v
    eps = 1e-3
    o = poly_attention(q.float(), k.float(), v.float(), eps=eps, entry_bound=0.59,
                       is_causal=True)
    ref = sdpa(q.float().double(), k.float().double(), v.float().double(), is_causal=True)
    plan = poly_plan(q.float(), k.float(), v.float(), eps=eps, entry_bound=0.59, is_causal=True)
    v32 = v.float().double()
    bound = plan.error_bound((v32.amax(0) - v32.amin(0)), v32.abs().amax(0), 2.0 ** -24)
    err = (o.double() - ref).abs().amax(0)
    print(f"error {float(err.max()):.2e}, bound {float(bound.min()):.2e} "
          f"(float32 term {plan.rounding_error:.2e} per unit of range)")
    assert bool((err <= bound).all())
    # in fact within the polynomial's term and the output's own rounding (before the centring:
    # 2.4e-2 against 4.0e-3 at this offset)
    v_range = v32.amax(0) - v32.amin(0)
    assert bool((err <= plan.guaranteed_error * v_range + 4 * 2.0 ** -24 * v32.abs().amax(0)).all())


@pytest.fixture
def calibrated_once(monkeypatch):
    """The plan's rates measured once, at this process's thread count, and used at every thread
    count the test sets: the rates are kept per thread count, so each new count would measure
    again (a micro-benchmark of 1-3 s of CPU, more with threads on a busy machine), and these
    tests compare results across thread counts, which the rates (a plan's speed estimate) do not
    enter.  test_calibration_is_cached_per_machine tests the calibration itself."""
    from attnio.torch_ops import _plan

    measured = _plan.calibration()  # (rates, measured)
    monkeypatch.setattr(_plan, "calibration", lambda *a, **k: measured)


def test_results_and_gradients_do_not_depend_on_the_thread_count(calibrated_once):
    """The engine cuts its passes into one piece per thread (heads, or rows with a prefix
    state); float64 results and gradients agree to rounding for 1, 2, 3 and 4 pieces."""
    q, k, v = _qkv(300, 300, 3, B=0.6, lead=(1, 2), seed=13)
    G = torch.randn(1, 2, 300, 3, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    threads = torch.get_num_threads()
    res = {}
    try:
        for p in (1, 2, 3, 4):
            torch.set_num_threads(p)
            for causal in (False, True):
                xs = [x.clone().requires_grad_() for x in (q, k, v)]
                o = poly_attention(*xs, is_causal=causal, entry_bound=0.6, chunk=64)
                (o * G).sum().backward()
                res[p, causal] = [o.detach()] + [x.grad for x in xs]
    finally:
        torch.set_num_threads(threads)
    for p in (2, 3, 4):
        for causal in (False, True):
            for a, b in zip(res[1, causal], res[p, causal]):
                assert float((a - b).abs().max()) <= 1e-12 * max(1.0, float(b.abs().max()))


#: 0 and 2: the edge cases of the rounds (pieces that absorb the keys before them, one block a
#: round); one round (1000) and 3 with ``-m slow``
@pytest.mark.parametrize("blocks", [0, 2, pytest.param(3, marks=pytest.mark.slow),
                                    pytest.param(1000, marks=pytest.mark.slow)])
def test_the_causal_two_pass_scan_in_rounds_agrees_with_one_thread(monkeypatch, blocks,
                                                                   calibrated_once):
    """One head, rows split between 2-3 threads (blocks of one 64-row tile): the forward's
    two-pass scan (each piece's tile state sums in parallel, a prefix over the pieces, then each
    piece's rows from its starting state) in rounds of ``blocks`` blocks' kept sums (2: rounds
    of one block per piece with 2 threads; 1000: one round), and, where a round cannot give
    each piece a block (0; 2 with 3 threads), the pieces that absorb the keys before them:
    float64 results and gradients agree with one thread's to rounding; FAVOR+ too (its in-tile
    weights need the key features again in the second pass)."""
    from attnio.torch_ops import _parallel

    q, k, v = _qkv(700, 700, 3, B=0.6, lead=(1, 1), seed=21)
    G = torch.randn(1, 1, 700, 3, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    r_poly = poly_plan(q, k, v, entry_bound=0.6, is_causal=True).r
    threads = torch.get_num_threads()
    res = {}
    try:
        for p in (1, 2, 3):
            torch.set_num_threads(p)
            for name, r in (("poly", r_poly), ("favor", 32)):
                monkeypatch.setattr(_parallel, "_STORE", max(1, blocks * r * 4))  # r (Ev+1) a block
                xs = [x.clone().requires_grad_() for x in (q, k, v)]
                if name == "poly":
                    o = poly_attention(*xs, is_causal=True, entry_bound=0.6, chunk=64)
                else:
                    o = favor_attention(*xs, is_causal=True, features=r, seed=5, chunk=64)
                (o * G).sum().backward()
                res[p, name] = [o.detach()] + [x.grad for x in xs]
    finally:
        torch.set_num_threads(threads)
    for p in (2, 3):
        for name in ("poly", "favor"):
            for a, b in zip(res[1, name], res[p, name]):
                assert float((a - b).abs().max()) <= 1e-12 * max(1.0, float(b.abs().max()))


def test_compile_without_entry_bound_and_bf16_rounding_and_double_backward():
    q, k, v = _qkv(64, 64, 4, B=0.5, lead=(2,), seed=14, dtype=torch.float32)

    def f(a, b, c):
        return poly_attention(a, b, c, is_causal=True)  # no entry_bound: R from the values

    compiled = torch.compile(f, fullgraph=True, backend="aot_eager")
    assert float((compiled(q, k, v) - f(q, k, v)).abs().max()) < 1e-6
    x = torch.randn(2, 64, 4, generator=torch.Generator().manual_seed(2))
    qb = (0.3 * torch.tanh(x * 3)).to(torch.bfloat16)  # rounds to 0.30078 at most
    assert float(qb.abs().max()) > 0.3
    o = poly_attention(qb, qb, qb, entry_bound=0.3)  # accepted: one unit of bf16 rounding
    assert o.dtype == torch.bfloat16
    xs = [t.clone().double().requires_grad_() for t in (q, k, v)]
    (g,) = torch.autograd.grad(poly_attention(*xs, entry_bound=0.5).sum(), xs[0],
                               create_graph=True)
    with pytest.raises(RuntimeError, match="differentiate twice"):
        g.sum().backward()


def test_poly_attention_module_bounds_q_and_k_and_matches_sdpa():
    from attnio.torch_ops import PolyAttention

    torch.manual_seed(0)
    m = PolyAttention(32, 4, kv_heads=2, head_dim=4, entry_bound=0.5, eps=1e-6, is_causal=True,
                      on_slow="warn").double()
    x = torch.randn(2, 40, 32, dtype=torch.float64) * 10  # large activations: still bounded
    q, k, v = m.qkv(x)
    assert float(q.detach().abs().max()) <= 0.5 and float(k.detach().abs().max()) <= 0.5
    ref = m.out_proj(sdpa(q, k, v, is_causal=True, enable_gqa=True).transpose(1, 2)
                     .reshape(2, 40, -1))
    out = m(x)
    assert out.shape == (2, 40, 32) and float((out - ref).detach().abs().max()) < 1e-4
    out.pow(2).mean().backward()
    assert all(p.grad is not None and bool(torch.isfinite(p.grad).all()) for p in m.parameters())
    plan = m.plan_for(65536)  # fixed by the layer: R = B^2 E / sqrt(E)
    assert plan.R == pytest.approx(0.5) and plan.r == math.comb(4 + plan.degree, 4)
    with pytest.raises(ParameterError, match="kv_heads"):
        PolyAttention(32, 4, kv_heads=3)


def test_calibration_is_cached_per_machine(tmp_path, monkeypatch):
    """Measured once, then read back from memory and from the file by a fresh process, so every
    process decides the same way."""
    from attnio.torch_ops import _plan

    monkeypatch.setenv("ATTNIO_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(_plan, "_RATES", {})
    rates, measured = _plan.calibration()
    assert measured and (tmp_path / "torch_rates.json").exists()
    assert _plan.calibration()[0] is rates
    monkeypatch.setattr(_plan, "_RATES", {})  # a fresh process: the file
    assert _plan.calibration()[0] == rates
    monkeypatch.setenv("ATTNIO_CACHE_DIR", "")  # no file: measured in memory only
    monkeypatch.setattr(_plan, "_RATES", {})
    assert _plan._cache_file() is None and _plan.calibration()[1]
