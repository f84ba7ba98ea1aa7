"""The eager path shared by the public functions and the compiled operator: plan, guard, run."""

from __future__ import annotations

from dataclasses import dataclass

from ..approx.features import FeatureMap
from ..approx.poly import UnreachableError, polynomial
from ..approx.radius import check_entries, score_radius
from ..core.errors import ParameterError
from ..core.extras import require
from ._checks import unit_roundoff, value_stats
from ._engine import linear_attention
from ._kernels import poly_kernel
from ._plan import (
    MEMORY_LIMIT,
    SlowApproximationWarning,
    guard,
    make_plan,
    register_engine,
    warn_at_caller,
)

__all__ = ["PolyOptions", "chunk_arg", "eager", "plan", "run", "torch_module"]


@dataclass(frozen=True)
class PolyOptions:
    """What poly_attention approximates and how (its keyword arguments, checked by the public
    functions): the error target ``eps``, the ``entry_bound`` on q and k (None: measured), the
    polynomial's ``variant`` and ``degree`` (None: the least that meets eps),
    ``allow_unbounded``, what to do with a slow plan (``on_slow``), the causal ``chunk``,
    ``asynchronous`` checks (the torch.compile path) and the working-memory ``memory_limit``."""

    eps: float
    entry_bound: float | None = None
    variant: str = "chebyshev"
    degree: int | None = None
    allow_unbounded: bool = False
    on_slow: str = "warn"
    chunk: int | None = None
    asynchronous: bool = False
    memory_limit: int = MEMORY_LIMIT


def torch_module():
    try:
        import torch  # a plain import (torch.compile traces it; importlib it does not)
    except ImportError:
        return require("torch", "torch", "attnio.torch_ops")
    return torch


def run(q, k, v, inp, kern_of, offset, chunk):
    """Flatten heads (GQA: merge the query groups when non-causal, repeat K, V when causal), run
    the engine in the compute dtype, restore the layout and the input dtype.

    V is centred on its column midpoints first and they are added back to the output: every
    row's weights sum to one, so this changes nothing exactly, but the rounding of the sums then
    scales with V's column range instead of its magnitude (a float32 offset of 1e4 no longer
    eats the guarantee).  The midpoints are constants for the gradient (the output does not
    depend on them)."""
    q, k, v = q.to(inp.compute), k.to(inp.compute), v.to(inp.compute)
    with torch_module().no_grad():
        lo, hi = torch_module().aminmax(v.detach(), dim=-2, keepdim=True)
        mid = (lo + hi) * 0.5
    v = v - mid
    if inp.group > 1:
        mid = mid.repeat_interleave(inp.group, dim=-3)
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
    out = out.reshape(inp.lead + (L, Ev))
    if offset is not None and offset < 0:  # rows that see no key stay zero
        seen = (torch_module().arange(L, device=out.device) >= -offset).to(out.dtype)
        mid = mid * seen[:, None]
    return (out + mid).to(inp.out)


def chunk_arg(chunk):
    if chunk is not None and (isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 1):
        raise ParameterError(f"chunk must be an integer >= 1, got {chunk!r}", param="chunk")
    return chunk


def plan(q, k, v, inp, s, opts: PolyOptions, *, is_causal, calibrate):
    """The plan; checks the values (NaN/inf, entry bound) with one host synchronisation, or with
    device-side asserts and no synchronisation when ``asynchronous`` (the torch.compile path).

    The entry bound is checked with one unit of rounding of the input dtype (``|x| <= B (1 +
    u)``: ``0.3 * tanh(x)`` rounded to bfloat16 can be 0.30078), and R is computed from that
    bound, so the guarantee covers the values actually passed."""
    torch = torch_module()
    entry_bound, allow_unbounded = opts.entry_bound, opts.allow_unbounded
    grow = 1 + unit_roundoff(inp.out)
    if entry_bound is not None:
        score_radius(inp.E, s, entry_bound)  # refuses a bad entry_bound, naming it
    if inp.meta or opts.asynchronous:
        if entry_bound is None:
            where = "on the meta device" if inp.meta else "under torch.compile"
            raise ParameterError(f"entry_bound is required {where}: without it the score range "
                                 "(hence the degree) is measured from the values of q and k",
                                 param="entry_bound")
        R = score_radius(inp.E, s, float(entry_bound) * grow)
        if opts.asynchronous and not inp.meta:
            b = float(entry_bound) * grow
            ok = torch.isfinite(v).all()
            if not allow_unbounded:  # NaN fails the comparison too
                ok = ok & (q.abs().amax() <= b) & (k.abs().amax() <= b)
            torch._assert_async(ok, f"poly_attention: q, k or v holds NaN/inf, or an entry of q "
                                f"or k exceeds entry_bound={b:g}")
    else:
        aq, ak, nq, nk = value_stats(q, k, v)  # NaN/inf in q, k, v reported the same way
        if entry_bound is not None:
            check_entries(aq / grow, ak / grow, entry_bound, allow_unbounded)
            R = score_radius(inp.E, s, float(entry_bound) * grow)
        else:
            R = score_radius(inp.E, s, max_norm_q=nq, max_norm_k=nk)
    p = polynomial(opts.eps, R, opts.variant, opts.degree)
    fm = FeatureMap(inp.E, p.degree, p.coefficients, s)
    shape = (inp.heads, inp.L, inp.S, inp.E, inp.Ev)
    return make_plan((p, fm, R, opts.eps), shape, is_causal, device=q.device, dtype=inp.compute,
                     calibrate=calibrate and not inp.meta, memory_limit=opts.memory_limit)


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


def eager(q, k, v, inp, s, offset, opts: PolyOptions):
    """poly_attention after the argument checks: plan, guard, compute.  With ``on_slow="exact"``
    a plan that no degree can meet falls back to exact attention too (with the warning)."""
    on_slow = opts.on_slow
    try:
        pl = plan(q, k, v, inp, s, opts, is_causal=offset is not None, calibrate=True)
    except UnreachableError as e:
        if on_slow != "exact":
            raise
        warn_at_caller(f"poly_attention: {e} (falling back to exact attention: "
                       "on_slow='exact')", SlowApproximationWarning)
        return _exact(q, k, v, s, offset, inp.group)
    if guard(pl, on_slow):
        return _exact(q, k, v, s, offset, inp.group)
    fm = pl.feature_map
    return run(q, k, v, inp, lambda qc, kc: poly_kernel(fm, qc.dtype, qc.device), offset,
               opts.chunk)


register_engine(run)  # the engine calibration() times (._plan cannot import this module)
