"""Input checks shared by the kernels: SDPA's signature, dtypes, GQA, masks, finite values."""

from __future__ import annotations

import math

from ..core.errors import ParameterError

__all__ = ["Inputs", "check_inputs", "resolve_mask", "unit_roundoff", "value_stats"]

_ALIGN = ("bottom_right", "top_left")
_LOW = ("bfloat16", "float16")


class Inputs:
    """Validated shapes: ``lead`` (leading dims of q), ``L, S, E, Ev``, ``group`` (query heads per
    KV head, 1 without GQA), ``compute`` (the compute dtype) and ``out`` (the input dtype)."""

    def __init__(self, q, k, v, group, compute):
        self.lead = tuple(q.shape[:-2])
        self.L, self.S, self.E, self.Ev = q.shape[-2], k.shape[-2], q.shape[-1], v.shape[-1]
        self.group, self.compute, self.out = group, compute, q.dtype
        self.heads = math.prod(self.lead) if self.lead else 1
        self.meta = any(x.device.type == "meta" for x in (q, k, v))


def check_inputs(q, k, v, *, is_causal, causal_align, enable_gqa, dropout_p, scale):
    """Validate q, k, v against SDPA's conventions; returns :class:`Inputs` and the scale."""
    import torch

    for name, x in (("q", q), ("k", k), ("v", v)):
        if not isinstance(x, torch.Tensor):
            raise ParameterError(f"{name} must be a torch.Tensor, got {type(x).__name__}", param=name)
        if x.dtype not in (torch.float32, torch.float64, torch.bfloat16, torch.float16):
            raise ParameterError(f"{name} must be float32, float64, bfloat16 or float16, got "
                                 f"{x.dtype}", param=name)
        if x.dim() < 2:
            raise ParameterError(f"{name} must have shape (..., n, E), got {tuple(x.shape)}",
                                 param=name)
    if not (q.dtype == k.dtype == v.dtype):
        raise ParameterError(f"q, k, v must share a dtype, got {q.dtype}, {k.dtype}, {v.dtype}",
                             param="k")
    if not (q.device == k.device == v.device):
        raise ParameterError(f"q, k, v must be on one device, got {q.device}, {k.device}, "
                             f"{v.device}", param="k")
    for name, x in (("q", q), ("k", k), ("v", v)):
        if any(int(n) == 0 for n in x.shape):
            raise ParameterError(f"{name} must have every dimension >= 1 (a sequence of at least "
                                 f"one token, E >= 1), got shape {tuple(x.shape)}", param=name)
    if not isinstance(enable_gqa, bool):
        raise ParameterError(f"enable_gqa must be True or False, got {enable_gqa!r}",
                             param="enable_gqa")
    group = 1
    if (q.dim() != k.dim() or q.shape[:-3] != k.shape[:-3] or k.shape[:-1] != v.shape[:-1]
            or (q.dim() == 2) != (k.dim() == 2)):
        _shape_error(q, k, v)
    if q.dim() >= 3 and q.shape[-3] != k.shape[-3]:
        hq, hk = q.shape[-3], k.shape[-3]
        if not enable_gqa:
            raise ParameterError(f"q has {hq} heads and k, v {hk}: pass enable_gqa=True for "
                                 "grouped-query attention (query heads a multiple of KV heads)",
                                 param="enable_gqa")
        if hq % hk:
            raise ParameterError(f"enable_gqa=True needs the query heads ({hq}) to be a multiple "
                                 f"of the key/value heads ({hk})", param="enable_gqa")
        group = hq // hk
    if q.shape[-1] != k.shape[-1]:
        raise ParameterError(f"q and k must have the same E, got {q.shape[-1]} and {k.shape[-1]}",
                             param="k")
    if not isinstance(is_causal, bool):
        raise ParameterError(f"is_causal must be True or False, got {is_causal!r}",
                             param="is_causal")
    if causal_align not in _ALIGN:
        raise ParameterError(f"causal_align must be one of {_ALIGN}, got {causal_align!r}",
                             param="causal_align")
    try:
        dp = float(dropout_p)
    except (TypeError, ValueError):
        dp = math.nan
    if dp != 0.0:
        raise ParameterError(f"dropout_p must be 0 (poly_attention has no attention dropout: apply "
                             f"dropout to its output instead), got {dropout_p!r}", param="dropout_p")
    E = q.shape[-1]
    if scale is None:
        s = 1.0 / math.sqrt(E)
    else:
        try:
            s = float(scale)
        except (TypeError, ValueError):
            s = math.nan
        if not math.isfinite(s):
            raise ParameterError(f"scale must be a finite real number, got {scale!r}", param="scale")
    compute = torch.float64 if q.dtype == torch.float64 else torch.float32
    return Inputs(q, k, v, group, compute), s


def _shape_error(q, k, v):
    raise ParameterError(
        f"shapes must be q (..., Hq, L, E), k (..., H, S, E), v (..., H, S, Ev) with equal "
        f"leading dimensions (Hq = H, or a multiple of H with enable_gqa=True), got q "
        f"{tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}", param="k")


def causal_offset(L, S, is_causal, causal_align):
    if not is_causal:
        return None
    return S - L if causal_align == "bottom_right" else 0


# an additive mask entry at or below this is a masked position: exp(score + m) is 0 in every
# float dtype (exp(-745) underflows float64) for every score range the method accepts (R < 700)
_MASKED = -1e4
_PADDING = ("attn_mask: poly_attention cannot apply a padding or arbitrary mask (its features "
            "sum over all keys at once); drop the padded keys (one call per sequence length, or "
            "pack sequences), or use scaled_dot_product_attention for this mask")


def resolve_mask(attn_mask, L, S, is_causal, lead=()):
    """The causal offset an ``attn_mask`` means (None: no mask), as SDPA reads it.

    Accepted: boolean masks (True = attend) and additive float masks whose entries are 0 or a
    masked value (-inf, ``finfo.min``, -1e9, anything <= -1e4: Hugging Face's encodings), of any
    shape that broadcasts to ``(*lead, L, S)``, the same for every batch and head, that are
    all-allowed (no mask), or lower triangular with the top-left (``j <= i``, SDPA's
    ``is_causal``) or bottom-right (``j <= i + S - L``) alignment.  Anything else (a padding mask,
    a bias such as ALiBi) raises ParameterError naming ``attn_mask`` and what to use instead.
    Returns ``(is_causal, alignment)`` with alignment None for no mask or no attn_mask.
    """
    import torch

    if attn_mask is None:
        return is_causal, None
    if is_causal:
        raise ParameterError("attn_mask and is_causal=True were both given; pass one of them "
                             "(as scaled_dot_product_attention requires)", param="attn_mask")
    if not isinstance(attn_mask, torch.Tensor):
        raise ParameterError(f"attn_mask must be a torch.Tensor or None, got "
                             f"{type(attn_mask).__name__}", param="attn_mask")
    if attn_mask.device.type == "meta" or torch.compiler.is_compiling():
        raise ParameterError("attn_mask cannot be read on the meta device or under "
                             "torch.compile: pass is_causal=True (with causal_align) instead",
                             param="attn_mask")
    try:
        full = torch.broadcast_shapes(tuple(attn_mask.shape), tuple(lead) + (L, S))
    except RuntimeError:
        full = None
    if full != tuple(lead) + (L, S):
        raise ParameterError(f"attn_mask of shape {tuple(attn_mask.shape)} does not broadcast to "
                             f"(..., L, S) = {tuple(lead) + (L, S)}", param="attn_mask")
    m = attn_mask if attn_mask.dim() >= 2 else attn_mask.reshape(1, -1)
    m = m.reshape(-1, m.shape[-2], m.shape[-1])
    if m.dtype == torch.bool:
        allowed = m
    else:
        if not (m.is_floating_point() and bool(((m == 0) | (m <= _MASKED)).all())):
            raise ParameterError("attn_mask: an additive mask must hold 0 (attend) or a masked "
                                 "value (-inf, finfo.min, or <= -1e4) only; a bias (ALiBi, "
                                 "relative positions) cannot be applied by poly_attention: use "
                                 "scaled_dot_product_attention", param="attn_mask")
        allowed = m == 0
    if not bool((allowed == allowed[:1]).all()):
        raise ParameterError(_PADDING, param="attn_mask")
    a = allowed[0].expand(L, S)
    if bool(a.all()):
        return False, None
    for align, off in (("top_left", 0), ("bottom_right", S - L)):
        tri = torch.ones(L, S, dtype=torch.bool, device=a.device).tril(diagonal=off)
        if bool((a == tri).all()):
            return True, align
    raise ParameterError(_PADDING, param="attn_mask")


def unit_roundoff(dtype) -> float:
    """The unit roundoff of a torch float dtype (half the gap above 1)."""
    import torch

    return float(torch.finfo(dtype).eps) / 2


def value_stats(q, k, v):
    """(max|q|, max|k|, upper bounds on the largest row norms of q and of k); checks that q, k
    and v are finite.  One host synchronisation, and no copy of q, k or v: the extremes come
    from ``aminmax`` (NaN and inf propagate into them) and the row norms, computed in the input
    dtype, are inflated by ``(E + 2) u`` to remain upper bounds."""
    import torch

    with torch.no_grad():
        parts = []
        for x in (q, k, v):
            lo, hi = torch.aminmax(x.detach())
            parts += [lo.double(), hi.double()]
        for x in (q, k):
            parts.append(torch.linalg.vector_norm(x.detach(), dim=-1).amax().double())
        out = torch.stack(parts).tolist()
    for i, name in enumerate(("q", "k", "v")):
        if not (math.isfinite(out[2 * i]) and math.isfinite(out[2 * i + 1])):
            raise ParameterError(f"{name} contains NaN or inf: poly_attention needs finite q, k "
                                 "and v", param=name)
    grow = 1 + (q.shape[-1] + 2) * unit_roundoff(q.dtype)
    return (max(-out[0], out[1]), max(-out[2], out[3]), out[6] * grow, out[7] * grow)
