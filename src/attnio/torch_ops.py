"""PyTorch kernels for approximate attention with ``scaled_dot_product_attention``'s layout.

* :func:`poly_attention` - the polynomial method (Alman & Song, arXiv 2302.13214) with a proven
  error: the same polynomial, features and normalisation as the simulator's ``approx_poly``
  (:mod:`attnio.approx`), so in float64 both give the same output to rounding.
* :func:`favor_attention` - Performer's FAVOR+ positive orthogonal random features (Choromanski
  et al., arXiv 2009.14794), the baseline: ``phi(x) = m^-1/2 exp(w^T x~ - |x~|^2/2)`` with
  ``x~ = sqrt(scale) x`` (``E[phi(q)^T phi(k)] = exp(scale q.k)``), ``w`` in blocks of E orthogonal
  Gaussian rows (QR) whose norms are resampled from the chi distribution, and the usual
  stabilisers (a per-query-row and one global key shift, which cancel in the normalisation).

Both are linear attention ``O = diag(phi(Q) z)^-1 phi(Q) W`` with ``W = psi(K)^T V`` (r x Ev) and
``z = psi(K)^T 1``, computed in chunks of ``chunk`` rows: memory beyond the inputs and the output
is ``O(chunk * r + r * Ev)`` per head (plus ``chunk^2`` for the in-chunk causal tile), never
``O(n r)``.  Autograd goes through a custom :class:`torch.autograd.Function` that saves only the
inputs and the r x Ev state and *recomputes* the features chunk by chunk in the backward pass
(the causal backward walks the chunks in reverse, peeling each chunk's contribution off the final
prefix state; in float32 that subtraction rounds at the level of the state's magnitude).

Tensors are ``(..., L, E)`` queries, ``(..., S, E)`` keys, ``(..., S, Ev)`` values with equal
leading (batch, head) dimensions; float32 or float64.  ``is_causal`` masks with the project's
convention, bottom-right aligned (query i sees keys j <= i + S - L; flash-attn >= 2.1); pass
``causal_align="top_left"`` for ``scaled_dot_product_attention``'s ``is_causal`` (j <= i).  They
agree when L == S.  ``torch`` is imported lazily: it is an optional extra (``attnio[torch]``).
"""

from __future__ import annotations

import math

import numpy as np

from .approx.features import FeatureMap, monomials
from .approx.poly import polynomial
from .approx.radius import check_entries, score_radius
from .core.errors import ParameterError
from .core.extras import require

__all__ = ["favor_attention", "poly_attention", "poly_plan"]

_ALIGN = ("bottom_right", "top_left")


def _torch():
    return require("torch", "torch", "attnio.torch_ops")


def _check(q, k, v, is_causal, causal_align):
    torch = _torch()
    for name, x in (("q", q), ("k", k), ("v", v)):
        if not isinstance(x, torch.Tensor):
            raise ParameterError(f"{name} must be a torch.Tensor, got {type(x).__name__}",
                                 param=name)
        if x.dtype not in (torch.float32, torch.float64):
            raise ParameterError(f"{name} must be float32 or float64, got {x.dtype}", param=name)
        if x.dim() < 2:
            raise ParameterError(f"{name} must have shape (..., n, E), got {tuple(x.shape)}",
                                 param=name)
    if not (q.dtype == k.dtype == v.dtype):
        raise ParameterError(f"q, k, v must share a dtype, got {q.dtype}, {k.dtype}, {v.dtype}",
                             param="k")
    if q.shape[:-2] != k.shape[:-2] or k.shape[:-1] != v.shape[:-1]:
        raise ParameterError(
            f"shapes must be q (..., L, E), k (..., S, E), v (..., S, Ev) with equal leading "
            f"dimensions, got q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}",
            param="k")
    if q.shape[-1] != k.shape[-1]:
        raise ParameterError(f"q and k must have the same E, got {q.shape[-1]} and {k.shape[-1]}",
                             param="k")
    for name, x in (("q", q), ("k", k), ("v", v)):
        if any(int(n) == 0 for n in x.shape):
            raise ParameterError(f"{name} must have every dimension >= 1 (a sequence of at least "
                                 f"one token, E >= 1), got shape {tuple(x.shape)}", param=name)
    if not isinstance(is_causal, bool):
        raise ParameterError(f"is_causal must be True or False, got {is_causal!r}",
                             param="is_causal")
    if causal_align not in _ALIGN:
        raise ParameterError(f"causal_align must be one of {_ALIGN}, got {causal_align!r}",
                             param="causal_align")
    L, S = q.shape[-2], k.shape[-2]
    return (S - L if causal_align == "bottom_right" else 0) if is_causal else None


def _chunk(chunk, r: int) -> int:
    if chunk is None:
        return int(min(4096, max(16, (1 << 22) // max(r, 1))))
    if isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 1:
        raise ParameterError(f"chunk must be an integer >= 1, got {chunk!r}", param="chunk")
    return chunk


# --------------------------------------------------------------------- the linear-attention engine
class _Spec:
    """Feature functions (torch-differentiable), the causal offset (None: no mask) and the chunk."""

    def __init__(self, phi, psi, offset, chunk):
        self.phi, self.psi, self.offset, self.chunk = phi, psi, offset, chunk


def _ranges(n, c):
    return [(a, min(n, a + c)) for a in range(0, n, c)]


def _key_range(a, b, S, off):
    return max(0, min(S, a + off)), max(0, min(S, b + off))


def _mask(torch, a, b, klo, khi, off, device):
    rows = torch.arange(a, b, device=device)[:, None]
    cols = torch.arange(klo, khi, device=device)[None, :]
    return cols <= rows + off


def _absorb(spec, k, v):
    U = spec.psi(k)
    return U.transpose(-1, -2) @ v, U.sum(-2)


def _rows_out(torch, spec, qc, W, z, kc=None, vc=None, mask=None):
    """Output rows of one query chunk from the state (W, z) (+ the masked in-chunk keys)."""
    U1 = spec.phi(qc)
    num = U1 @ W
    den = U1 @ z.unsqueeze(-1)
    if kc is not None and kc.shape[-2] > 0:
        U2 = spec.psi(kc)
        Sc = (U1 @ U2.transpose(-1, -2)) * mask
        num = num + Sc @ vc
        den = den + Sc.sum(-1, keepdim=True)
    safe = torch.where(den != 0, den, torch.ones_like(den))
    return num / safe


def _forward(torch, spec, q, k, v):
    L, S, c = q.shape[-2], k.shape[-2], spec.chunk
    out = q.new_zeros(q.shape[:-1] + (v.shape[-1],))
    off = spec.offset
    if off is None:
        W = z = None
        for a, b in _ranges(S, c):
            dW, dz = _absorb(spec, k[..., a:b, :], v[..., a:b, :])
            W, z = (dW, dz) if W is None else (W + dW, z + dz)
        for a, b in _ranges(L, c):
            out[..., a:b, :] = _rows_out(torch, spec, q[..., a:b, :], W, z)
        return out, W, z
    r = spec.psi(k[..., :1, :]).shape[-1]
    W = q.new_zeros(q.shape[:-2] + (r, v.shape[-1]))
    z = q.new_zeros(q.shape[:-2] + (r,))
    for a, b in _ranges(max(0, min(S, off)), c):  # keys every query sees
        dW, dz = _absorb(spec, k[..., a:b, :], v[..., a:b, :])
        W, z = W + dW, z + dz
    for a, b in _ranges(L, c):
        klo, khi = _key_range(a, b, S, off)
        if khi == 0:
            continue  # rows that see no key output 0
        kc, vc = k[..., klo:khi, :], v[..., klo:khi, :]
        m = _mask(torch, a, b, klo, khi, off, q.device).to(q.dtype)
        out[..., a:b, :] = _rows_out(torch, spec, q[..., a:b, :], W, z, kc, vc, m)
        if khi > klo:
            dW, dz = _absorb(spec, kc, vc)
            W, z = W + dW, z + dz
    return out, W, z


def _make_function():
    _torch()  # MissingExtraError naming the extra when torch is not installed
    import torch  # a static import, so that the base class below is a known type

    class _LinearAttention(torch.autograd.Function):
        @staticmethod
        def forward(ctx, q, k, v, spec):
            with torch.no_grad():
                out, W, z = _forward(torch, spec, q, k, v)
            ctx.spec = spec
            ctx.save_for_backward(q, k, v, W, z)
            return out

        @staticmethod
        def backward(ctx, G):
            q, k, v, W, z = ctx.saved_tensors
            spec = ctx.spec
            dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
            L, S, c, off = q.shape[-2], k.shape[-2], spec.chunk, spec.offset
            G = G.contiguous()

            def leaf(x):
                return x.detach().requires_grad_(True)

            with torch.enable_grad():
                if off is None:
                    Wl, zl = leaf(W), leaf(z)
                    for a, b in _ranges(L, c):
                        qc = leaf(q[..., a:b, :])
                        o = _rows_out(torch, spec, qc, Wl, zl)
                        torch.autograd.backward(o, G[..., a:b, :])
                        dq[..., a:b, :] = qc.grad
                    gW, gz = Wl.grad, zl.grad
                    for a, b in _ranges(S, c):
                        kc, vc = leaf(k[..., a:b, :]), leaf(v[..., a:b, :])
                        Wc, zc = _absorb(spec, kc, vc)
                        torch.autograd.backward((Wc, zc), (gW, gz))
                        dk[..., a:b, :], dv[..., a:b, :] = kc.grad, vc.grad
                    return dq, dk, dv, None
                gW, gz = torch.zeros_like(W), torch.zeros_like(z)
                Wa, za = W.detach(), z.detach()  # the state after the chunk being processed
                for a, b in reversed(_ranges(L, c)):
                    klo, khi = _key_range(a, b, S, off)
                    if khi == 0:
                        continue
                    with torch.no_grad():
                        if khi > klo:
                            cW, cz = _absorb(spec, k[..., klo:khi, :], v[..., klo:khi, :])
                            Wb, zb = Wa - cW, za - cz
                        else:
                            Wb, zb = Wa, za
                    qc, Wl, zl = leaf(q[..., a:b, :]), leaf(Wb), leaf(zb)
                    kc, vc = leaf(k[..., klo:khi, :]), leaf(v[..., klo:khi, :])
                    m = _mask(torch, a, b, klo, khi, off, q.device).to(q.dtype)
                    o = _rows_out(torch, spec, qc, Wl, zl, kc, vc, m)
                    outs, grads = [o], [G[..., a:b, :]]
                    if khi > klo:
                        Wc, zc = _absorb(spec, kc, vc)
                        outs += [Wl + Wc, zl + zc]
                        grads += [gW, gz]
                    torch.autograd.backward(outs, grads)
                    dq[..., a:b, :] = qc.grad
                    if khi > klo:
                        dk[..., klo:khi, :] += kc.grad
                        dv[..., klo:khi, :] += vc.grad
                        gW, gz = Wl.grad, zl.grad
                    else:
                        gW = gW + Wl.grad
                        gz = gz + zl.grad
                    Wa, za = Wb, zb
                for a, b in _ranges(max(0, min(S, off)), c):  # the keys every query sees
                    kc, vc = leaf(k[..., a:b, :]), leaf(v[..., a:b, :])
                    Wc, zc = _absorb(spec, kc, vc)
                    torch.autograd.backward((Wc, zc), (gW, gz))
                    dk[..., a:b, :] += kc.grad
                    dv[..., a:b, :] += vc.grad
            return dq, dk, dv, None

    return _LinearAttention


_FN = None


def _linear_attention(q, k, v, spec):
    global _FN
    if _FN is None:
        _FN = _make_function()
    return _FN.apply(q, k, v, spec)


# --------------------------------------------------------------------- polynomial method
def _poly_features(torch, fm: FeatureMap, dtype, device):
    """phi and psi as torch functions building the monomials degree by degree."""
    _, deg, _, parent, var = monomials(fm.d, fm.degree)
    wq, wk = fm.weights()
    levels = []  # per degree j >= 1: (parent index within level j-1, variable)
    start = 1
    for j in range(1, fm.degree + 1):
        stop = start + int(np.sum(deg == j))
        prev_start = start - int(np.sum(deg == j - 1))
        levels.append((torch.as_tensor(np.array(parent[start:stop] - prev_start), device=device),
                       torch.as_tensor(np.array(var[start:stop]), device=device)))
        start = stop
    wq_t = torch.as_tensor(wq, dtype=dtype, device=device)
    wk_t = torch.as_tensor(wk, dtype=dtype, device=device)

    def monos(x):
        cur = torch.ones(x.shape[:-1] + (1,), dtype=x.dtype, device=x.device)
        out = [cur]
        for par, vr in levels:
            cur = cur.index_select(-1, par) * x.index_select(-1, vr)
            out.append(cur)
        return torch.cat(out, dim=-1)

    return (lambda x: monos(x) * wq_t), (lambda x: monos(x) * wk_t)


def poly_plan(q, k, *, eps=1e-3, entry_bound=None, scale=None, variant="chebyshev",
              degree=None, allow_unbounded=False):
    """The polynomial ``poly_attention`` would use for these q, k: (PolyApprox, FeatureMap, R)."""
    torch = _torch()
    E = q.shape[-1]
    s = 1.0 / math.sqrt(E) if scale is None else float(scale)
    if not math.isfinite(s):
        raise ParameterError(f"scale must be a finite real number, got {scale!r}", param="scale")
    with torch.no_grad():
        if entry_bound is not None:
            check_entries(float(q.abs().max()), float(k.abs().max()), entry_bound, allow_unbounded)
            R = score_radius(E, s, entry_bound)
        else:
            R = score_radius(E, s, max_norm_q=float(q.norm(dim=-1).max()),
                             max_norm_k=float(k.norm(dim=-1).max()))
    p = polynomial(eps, R, variant, degree)
    return p, FeatureMap(E, p.degree, p.coefficients, s), R


def poly_attention(q, k, v, *, eps: float = 1e-3, entry_bound: float | None = None,
                   is_causal: bool = False, scale: float | None = None,
                   variant: str = "chebyshev", degree: int | None = None,
                   allow_unbounded: bool = False, chunk: int | None = None,
                   causal_align: str = "bottom_right"):
    """Attention with ``exp`` replaced by a polynomial of proven relative error ``<= eps``.

    Every output entry is within ``eps/(1-eps) * (max - min of its V column)`` of exact softmax
    attention, provided the entries of q and k are bounded by ``entry_bound`` (checked: larger
    entries raise ParameterError unless ``allow_unbounded=True``, which warns that the guarantee
    is lost).  Without ``entry_bound`` the score range comes from the data
    (``R = |scale| max|q_i| max|k_j|``).  The feature dimension is ``r = C(E+g, g)`` for the
    least degree g that meets eps on [-R, R]: cheap for small E and R, prohibitive otherwise
    (see :func:`poly_plan` for r before running).

    >>> import torch
    >>> q, k, v = (torch.rand(2, 64, 4, dtype=torch.float64) - 0.5 for _ in range(3))
    >>> o = poly_attention(q, k, v, eps=1e-6)
    >>> ref = torch.nn.functional.scaled_dot_product_attention(q, k, v)
    >>> bool((o - ref).abs().max() < 1e-6)
    True
    """
    torch = _torch()
    off = _check(q, k, v, is_causal, causal_align)
    _, fm, _ = poly_plan(q, k, eps=eps, entry_bound=entry_bound, scale=scale, variant=variant,
                         degree=degree, allow_unbounded=allow_unbounded)
    phi, psi = _poly_features(torch, fm, q.dtype, q.device)
    return _linear_attention(q, k, v, _Spec(phi, psi, off, _chunk(chunk, fm.r)))


# --------------------------------------------------------------------- FAVOR+ baseline
def _orthogonal_gaussian(torch, m, E, generator, dtype):
    """m x E: blocks of E orthogonal rows (QR of a Gaussian), row norms resampled ~ chi_E."""
    blocks = []
    for _ in range(math.ceil(m / E)):
        G = torch.randn(E, E, generator=generator, dtype=torch.float64)
        Qm, _ = torch.linalg.qr(G)
        blocks.append(Qm.T)
    Wm = torch.cat(blocks, dim=0)[:m]
    norms = torch.randn(m, E, generator=generator, dtype=torch.float64).norm(dim=1)
    return (Wm * norms[:, None]).to(dtype)


def favor_attention(q, k, v, *, features: int | None = None, seed: int = 0,
                    is_causal: bool = False, scale: float | None = None,
                    chunk: int | None = None, causal_align: str = "bottom_right"):
    """Performer FAVOR+ attention (positive orthogonal random features), an unbiased estimate
    of softmax attention's kernel with no worst-case guarantee.  ``features`` m defaults to
    ``round(E ln E)`` (the paper's choice); ``seed`` fixes the random features."""
    torch = _torch()
    off = _check(q, k, v, is_causal, causal_align)
    E = q.shape[-1]
    s = 1.0 / math.sqrt(E) if scale is None else float(scale)
    if not (math.isfinite(s) and s > 0):
        raise ParameterError(f"scale must be a finite number > 0 for FAVOR+, got {scale!r}", param="scale")
    m = max(1, round(E * math.log(E))) if features is None else features
    if isinstance(m, bool) or not isinstance(m, int) or m < 1:
        raise ParameterError(f"features must be an integer >= 1, got {features!r}", param="features")
    gen = torch.Generator().manual_seed(int(seed))
    Wr = _orthogonal_gaussian(torch, m, E, gen, q.dtype).to(q.device)
    rs = math.sqrt(s)
    with torch.no_grad():  # one global key shift (a constant: cancels in the normalisation)
        kmax = max(float((k[..., a:b, :] * rs @ Wr.T).max()) for a, b in _ranges(k.shape[-2], 4096))
    inv = 1.0 / math.sqrt(m)

    def proj(x):
        xs = x * rs
        return xs @ Wr.T, 0.5 * (xs * xs).sum(-1, keepdim=True)

    def phi(x):
        u, h = proj(x)
        shift = u.detach().amax(-1, keepdim=True)  # per-row: cancels in that row's ratio
        return torch.exp(u - h - shift) * inv

    def psi(x):
        u, h = proj(x)
        return torch.exp(u - h - kmax) * inv

    return _linear_attention(q, k, v, _Spec(phi, psi, off, _chunk(chunk, m)))
