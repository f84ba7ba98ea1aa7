"""``poly_attention``, ``poly_plan``, and the baselines ``based_attention``, ``favor_attention``."""

from __future__ import annotations

import math

from ..approx.features import FeatureMap
from ..approx.radius import score_radius
from ..core.errors import ParameterError
from ._checks import causal_offset, check_inputs, resolve_mask
from ._compiled import poly_op
from ._core import PolyOptions, eager, plan
from ._core import chunk_arg as _chunk
from ._core import run as _run
from ._core import torch_module as _torch
from ._kernels import FavorKernel, poly_kernel
from ._plan import MEMORY_LIMIT, ON_SLOW, PolyPlan

__all__ = ["based_attention", "favor_attention", "poly_attention", "poly_plan"]


def poly_plan(q, k, v=None, *, eps: float = 1e-3, entry_bound: float | None = None,
              scale: float | None = None, is_causal: bool = False, enable_gqa: bool = False,
              variant: str = "chebyshev", degree: int | None = None,
              allow_unbounded: bool = False, calibrate: bool = True,
              memory_limit: int = MEMORY_LIMIT) -> PolyPlan:
    """What :func:`poly_attention` would run on these tensors, and its predicted cost.

    Parameters
    ----------
    q, k : torch.Tensor
        Queries ``(..., Hq, L, E)`` and keys ``(..., H, S, E)``, as for poly_attention.  Only
        their shapes are used when ``entry_bound`` is given and they are on the meta device.
    v : torch.Tensor, optional
        Values ``(..., H, S, Ev)`` (``Ev = E`` when omitted); checked for NaN/inf when given.
    eps, entry_bound, scale, is_causal, enable_gqa, variant, degree, allow_unbounded
        As for :func:`poly_attention`.
    calibrate : bool, default True
        Measure this machine's rates once (about 1 s; cached in memory and in a file under the
        user's cache directory, see :func:`attnio.torch_ops._plan.calibration`) for the time
        predictions; False uses fixed default rates.
    memory_limit : int
        Bytes of working memory (beyond q, k, v and the output) above which the plan is slow.

    Returns
    -------
    PolyPlan
        ``degree``, ``r`` (features per token, ``C(E+degree, degree)``), ``R`` (the score
        radius), ``poly`` (with its proven relative error ``poly.bound``), ``guaranteed_error``
        (the output error per unit of V's column range), ``predicted_s`` and ``sdpa_predicted_s``
        (forward seconds on this shape), ``slow`` and ``reason``.  Unpacking it as
        ``p, fm, R = poly_plan(...)`` gives the polynomial, feature map and radius.

    >>> import torch
    >>> q = torch.rand(1, 8, 4096, 8) - 0.5
    >>> plan = poly_plan(q, q, eps=1e-3, entry_bound=0.6, calibrate=False)
    >>> plan.degree, plan.r, plan.slow
    (5, 1287, False)
    """
    v = k if v is None else v
    inp, s = check_inputs(q, k, v, is_causal=is_causal, causal_align="bottom_right",
                          enable_gqa=enable_gqa, dropout_p=0.0, scale=scale)
    opts = PolyOptions(eps, entry_bound, variant, degree, allow_unbounded,
                       memory_limit=_memory(memory_limit))
    return plan(q, k, v, inp, s, opts, is_causal=is_causal, calibrate=calibrate)


def _memory(limit):
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise ParameterError(f"memory_limit must be a number of bytes >= 1, got {limit!r}",
                             param="memory_limit")
    return limit


def poly_attention(q, k, v, attn_mask=None, dropout_p: float = 0.0, is_causal: bool = False,
                   scale: float | None = None, enable_gqa: bool = False, *, eps: float = 1e-3,
                   entry_bound: float | None = None, variant: str = "chebyshev",
                   degree: int | None = None, allow_unbounded: bool = False,
                   on_slow: str = "exact", chunk: int | None = None,
                   causal_align: str = "top_left", memory_limit: int = MEMORY_LIMIT):
    """Attention with ``exp`` replaced by a polynomial of proven relative error, in
    ``scaled_dot_product_attention``'s layout and signature.

    Every output entry is within ``(eps/(1-eps) + rho) * (max - min of its V column) + 4 u max|V
    column|`` of exact softmax attention, provided the entries of q and k are at most
    ``entry_bound`` in magnitude (checked): ``rho`` is the compute dtype's worst-case rounding
    term (``poly_plan(...).rounding_error``; negligible in float64) and ``u`` its unit roundoff.
    The polynomial's degree g is the least that meets ``eps`` on the score range [-R, R]; each
    token gets ``r = C(E+g, g)`` features, so the method pays for small E and R only: see
    :func:`poly_plan` (and the cost guard, ``on_slow``) before running on a new shape.

    Parameters
    ----------
    q, k, v : torch.Tensor
        Queries ``(..., Hq, L, E)``, keys ``(..., H, S, E)``, values ``(..., H, S, Ev)``;
        float32, float64, bfloat16 or float16 (all the same dtype).  bfloat16/float16 are computed
        in float32 and the output is returned in the input dtype.
    attn_mask : torch.Tensor, optional
        Read as SDPA reads it, when it is all-allowed (no mask) or causal (lower triangular,
        top-left or bottom-right aligned): boolean (True attends), or additive with 0 and masked
        entries (-inf, ``finfo.min``, -1e9: anything <= -1e4, Hugging Face's encodings), of any
        shape broadcasting to ``(..., L, S)``.  A padding mask, a mask that differs across batch
        or heads, or a bias raises ParameterError saying what to use instead (the feature
        factorisation cannot apply them).
    dropout_p : float, default 0.0
        Must be 0 (no attention dropout); anything else raises ParameterError.
    is_causal : bool, default False
        Causal mask, aligned as ``causal_align`` says: by default SDPA's (query i sees keys
        ``j <= i``, also when L != S).
    scale : float, optional
        Score scale, default ``1/sqrt(E)`` (as SDPA).
    enable_gqa : bool, default False
        Grouped-query attention: Hq a multiple of H, query head h uses key/value head
        ``h // (Hq/H)`` (as SDPA).
    eps : float, default 1e-3
        Proven relative error of the polynomial on [-R, R], in [1e-12, 0.5].
    entry_bound : float, optional
        B with ``|q|, |k| entries <= B``, giving ``R = |scale| B^2 E``.  Entries above it raise
        ParameterError (unless ``allow_unbounded``).  Without it R comes from the data,
        ``|scale| max|q_i| max|k_j|`` (one host synchronisation); it is required under
        ``torch.compile`` and on the meta device.
    variant : {"chebyshev", "taylor"}, default "chebyshev"
        The polynomial family (Chebyshev gives the lower degree).
    degree : int, optional
        Force a degree; its proven error must still be <= eps.
    allow_unbounded : bool, default False
        Run on entries beyond ``entry_bound`` with an UnboundedWarning (no guarantee).
    on_slow : {"exact", "warn", "error"}, default "exact"
        What to do when the plan is slow (``r > S``, predicted more than 1.25x slower than SDPA
        (``SLOW_MARGIN``), more features
        than the kernel builds, or more memory than ``memory_limit``), decided from shapes and
        sizes before anything is allocated: return exact ``scaled_dot_product_attention``
        instead (also when no degree reaches ``eps``), with a SlowApproximationWarning once per
        call site; warn and run (a plan that cannot run is refused); or raise ParameterError.
    chunk : int, optional
        Rows per block (memory ``O(chunk * r)`` per head); default from a 16 MB budget.
    causal_align : {"top_left", "bottom_right"}, default "top_left"
        Query i sees keys ``j <= i`` (top_left, SDPA's ``is_causal``) or ``j <= i + S - L``
        (bottom_right, flash-attn's, for a query block at the end of a KV cache); they agree
        when L == S.
    memory_limit : int, default 1 GiB
        Bytes of working memory beyond q, k, v and the output that a plan may use (estimated
        before anything is allocated); above it the plan is slow (``on_slow``).

    Returns
    -------
    torch.Tensor
        ``(..., Hq, L, Ev)`` in the input dtype.

    >>> import torch
    >>> q, k, v = (torch.rand(1, 2, 4096, 4, dtype=torch.float64) - 0.5 for _ in range(3))
    >>> o = poly_attention(q, k, v, eps=1e-6, entry_bound=0.5, is_causal=True)
    >>> ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    >>> bool((o - ref).abs().max() < 1e-6)
    True
    """
    torch = _torch()
    inp, s = check_inputs(q, k, v, is_causal=is_causal, causal_align=causal_align,
                          enable_gqa=enable_gqa, dropout_p=dropout_p, scale=scale)
    is_causal, align = resolve_mask(attn_mask, inp.L, inp.S, is_causal, inp.lead)
    if on_slow not in ON_SLOW:
        raise ParameterError(f"on_slow must be one of {ON_SLOW}, got {on_slow!r}", param="on_slow")
    chunk = _chunk(chunk)
    memory_limit = _memory(memory_limit)
    offset = causal_offset(inp.L, inp.S, is_causal, align or causal_align)
    if torch.compiler.is_compiling():  # one opaque custom op: no graph break
        # without entry_bound the operator measures R from the values when it runs (one host
        # synchronisation inside it, as in eager mode); with it, no synchronisation
        if entry_bound is not None:
            score_radius(inp.E, s, entry_bound)  # refuses a bad one here (-1 means none below)
        return poly_op()(q, k, v, float(eps), -1.0 if entry_bound is None else float(entry_bound),
                         s, str(variant), -1 if degree is None else int(degree),
                         bool(allow_unbounded), str(on_slow), offset is not None,
                         0 if offset is None else int(offset), chunk or 0, memory_limit)
    return eager(q, k, v, inp, s, offset, PolyOptions(
        eps, entry_bound, variant, degree, allow_unbounded, on_slow, chunk,
        memory_limit=memory_limit))


def based_attention(q, k, v, attn_mask=None, dropout_p: float = 0.0, is_causal: bool = False,
                    scale: float | None = None, enable_gqa: bool = False, *,
                    chunk: int | None = None, causal_align: str = "top_left"):
    """Based's linear attention (Arora et al., arXiv 2402.18668): the degree-2 Taylor feature map,
    kernel ``1 + x + x^2/2`` with ``x = scale <q, k>`` (positive for every x), as a baseline.

    The same engine and monomial features as :func:`poly_attention` with the Taylor polynomial of
    degree 2 fixed (``r = C(E+2, 2)``; Based's tensor-square map has E^2 redundant features and
    the same kernel), so no error guarantee: the error depends on the score range.  Parameters as
    for :func:`poly_attention` (no entry bound, no plan: there is nothing to choose).
    """
    _torch()
    inp, s = check_inputs(q, k, v, is_causal=is_causal, causal_align=causal_align,
                          enable_gqa=enable_gqa, dropout_p=dropout_p, scale=scale)
    is_causal, align = resolve_mask(attn_mask, inp.L, inp.S, is_causal, inp.lead)
    offset = causal_offset(inp.L, inp.S, is_causal, align or causal_align)
    fm = FeatureMap(inp.E, 2, (1.0, 1.0, 0.5), s)
    return _run(q, k, v, inp, lambda qc, kc: poly_kernel(fm, qc.dtype, qc.device), offset,
                _chunk(chunk))


def _orthogonal_gaussian(torch, m, E, generator):
    """m x E: blocks of E orthogonal rows (QR of a Gaussian), row norms resampled ~ chi_E."""
    blocks = []
    for _ in range(math.ceil(m / E)):
        G = torch.randn(E, E, generator=generator, dtype=torch.float64)
        Qm, _ = torch.linalg.qr(G)
        blocks.append(Qm.T)
    Wm = torch.cat(blocks, dim=0)[:m]
    norms = torch.randn(m, E, generator=generator, dtype=torch.float64).norm(dim=1)
    return Wm * norms[:, None]


def favor_attention(q, k, v, attn_mask=None, dropout_p: float = 0.0, is_causal: bool = False,
                    scale: float | None = None, enable_gqa: bool = False, *,
                    features: int | None = None, seed: int = 0, chunk: int | None = None,
                    causal_align: str = "top_left"):
    """Performer FAVOR+ attention (Choromanski et al., arXiv 2009.14794), the baseline: positive
    orthogonal random features, an unbiased estimate of softmax attention's kernel with no
    worst-case guarantee.  ``features`` m defaults to ``round(E ln E)`` (the paper's choice);
    ``seed`` fixes the random features.  Other parameters as for :func:`poly_attention`."""
    torch = _torch()
    inp, s = check_inputs(q, k, v, is_causal=is_causal, causal_align=causal_align,
                          enable_gqa=enable_gqa, dropout_p=dropout_p, scale=scale)
    if not s > 0:
        raise ParameterError(f"scale must be a finite number > 0 for FAVOR+, got {scale!r}",
                             param="scale")
    is_causal, align = resolve_mask(attn_mask, inp.L, inp.S, is_causal, inp.lead)
    offset = causal_offset(inp.L, inp.S, is_causal, align or causal_align)
    E = inp.E
    m = max(1, round(E * math.log(E))) if features is None else features
    if isinstance(m, bool) or not isinstance(m, int) or m < 1:
        raise ParameterError(f"features must be an integer >= 1, got {features!r}",
                             param="features")
    Wr = _orthogonal_gaussian(torch, m, E, torch.Generator().manual_seed(int(seed)))

    def kern_of(qc, kc):
        W = Wr.to(dtype=qc.dtype, device=qc.device)
        with torch.no_grad():  # one global key shift (a constant: cancels in the normalisation)
            shift = (W @ (kc.detach() * math.sqrt(s)).transpose(-1, -2)).amax()
        return FavorKernel(W, s, shift)

    return _run(q, k, v, inp, kern_of, offset, _chunk(chunk))
