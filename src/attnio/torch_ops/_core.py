"""The eager path shared by the public functions and the compiled operator: plan, guard, run."""

from __future__ import annotations

from ..approx.features import FeatureMap
from ..approx.poly import polynomial
from ..approx.radius import check_entries, score_radius
from ..core.errors import ParameterError
from ..core.extras import require
from ._checks import value_stats
from ._engine import linear_attention
from ._kernels import poly_kernel
from ._plan import guard, make_plan

__all__ = ["chunk_arg", "eager", "plan", "run", "torch_module"]


def torch_module():
    try:
        import torch  # a plain import (torch.compile traces it; importlib it does not)
    except ImportError:
        return require("torch", "torch", "attnio.torch_ops")
    return torch


def run(q, k, v, inp, kern_of, offset, chunk):
    """Flatten heads (GQA: merge the query groups when non-causal, repeat K, V when causal), run
    the engine in the compute dtype, restore the layout and the input dtype."""
    q, k, v = q.to(inp.compute), k.to(inp.compute), v.to(inp.compute)
    kern = kern_of(q, k)
    G, L, S, E, Ev = inp.group, inp.L, inp.S, inp.E, inp.Ev
    if G > 1 and offset is None:  # every query head of a group sees the same keys: one sequence
        qf = q.reshape(-1, G * L, E)
        out = linear_attention(qf, k.reshape(-1, S, E), v.reshape(-1, S, Ev), kern, None, chunk)
    else:
        if G > 1:
            k, v = k.repeat_interleave(G, dim=-3), v.repeat_interleave(G, dim=-3)
        out = linear_attention(q.reshape(-1, L, E), k.reshape(-1, S, E), v.reshape(-1, S, Ev),
                               kern, offset, chunk)
    return out.reshape(inp.lead + (L, Ev)).to(inp.out)


def chunk_arg(chunk):
    if chunk is not None and (isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 1):
        raise ParameterError(f"chunk must be an integer >= 1, got {chunk!r}", param="chunk")
    return chunk


def plan(q, k, v, inp, s, *, eps, entry_bound, variant, degree, allow_unbounded, is_causal,
          calibrate, asynchronous=False):
    """The plan; checks the values (NaN/inf, entry bound) with one host synchronisation, or with
    device-side asserts and no synchronisation when ``asynchronous`` (the torch.compile path)."""
    torch = torch_module()
    if inp.meta or asynchronous:
        if entry_bound is None:
            where = "on the meta device" if inp.meta else "under torch.compile"
            raise ParameterError(f"entry_bound is required {where}: without it the score range "
                                 "(hence the degree) is measured from the values of q and k",
                                 param="entry_bound")
        R = score_radius(inp.E, s, entry_bound)
        if asynchronous and not inp.meta:
            b = float(entry_bound)
            ok = torch.isfinite(v).all()
            if not allow_unbounded:  # NaN fails the comparison too
                ok = ok & (q.abs().amax() <= b) & (k.abs().amax() <= b)
            torch._assert_async(ok, f"poly_attention: q, k or v holds NaN/inf, or an entry of q "
                                f"or k exceeds entry_bound={b:g}")
    else:
        aq, ak, nq, nk = value_stats(q, k, v)  # NaN/inf in q, k, v reported the same way
        if entry_bound is not None:
            check_entries(aq, ak, entry_bound, allow_unbounded)
            R = score_radius(inp.E, s, entry_bound)
        else:
            R = score_radius(inp.E, s, max_norm_q=nq, max_norm_k=nk)
    p = polynomial(eps, R, variant, degree)
    fm = FeatureMap(inp.E, p.degree, p.coefficients, s)
    shape = (inp.heads, inp.L, inp.S, inp.E, inp.Ev)
    return make_plan(p, fm, R, eps, shape, is_causal, q.device, inp.compute,
                     calibrate and not inp.meta)


def _exact(q, k, v, s, offset, group):
    """The fallback: scaled_dot_product_attention with the same scale, mask and groups."""
    torch = torch_module()
    L, S = q.shape[-2], k.shape[-2]
    mask = None
    if offset is not None and offset != 0:
        mask = torch.ones(L, S, dtype=torch.bool, device=q.device).tril(diagonal=offset)
    if group > 1:
        k, v = k.repeat_interleave(group, dim=-3), v.repeat_interleave(group, dim=-3)
    return torch.nn.functional.scaled_dot_product_attention(
        q, k, v, attn_mask=mask, is_causal=offset == 0, scale=s)


def eager(q, k, v, inp, s, offset, *, eps, entry_bound, variant, degree, allow_unbounded,
          on_slow, chunk, asynchronous=False):
    """poly_attention after the argument checks: plan, guard, compute."""
    pl = plan(q, k, v, inp, s, eps=eps, entry_bound=entry_bound, variant=variant,
                 degree=degree, allow_unbounded=allow_unbounded, is_causal=offset is not None,
                 calibrate=True, asynchronous=asynchronous)
    if guard(pl, on_slow):
        return _exact(q, k, v, s, offset, inp.group)
    fm = pl.feature_map
    return run(q, k, v, inp, lambda qc, kc: poly_kernel(fm, qc.dtype, qc.device), offset, chunk)
