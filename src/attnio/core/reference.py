"""The float64 reference attention: the oracle every algorithm's output is checked against.

Shapes follow ``scaled_dot_product_attention``: ``Q (..., Nq, d)``, ``K, V (..., Nkv, d)``.  With
4-D inputs ``Q (B, Hq, Nq, d)`` and ``K, V (B, Hkv, Nkv, d)``, ``Hq % Hkv == 0`` (grouped-query
attention): query head h uses key/value head ``h // (Hq/Hkv)``.

Masks: ``causal=True`` (or ``"bottom_right"``) lets query r see keys c <= r + Nkv - Nq, as
flash-attn >= 2.1 and ``torch.nn.attention.bias.causal_lower_right``; ``causal="top_left"`` lets it
see c <= r, as ``scaled_dot_product_attention(is_causal=True)``.  ``window=W`` (with a causal mask)
keeps only the W most recent keys: c > r + offset - W.  A query row that sees no key gets output 0
and zero gradients, as flash-attn and PyTorch's ``scaled_dot_product_attention`` (2.5 and later,
checked on 2.13) return.  ``block_mask`` (a :class:`~attnio.core.blockmask.BlockMask`) makes the
attention block-sparse: a masked-out block's scores are -inf (it cannot be combined with
``causal``).  Non-finite inputs propagate: a NaN in a row of Q makes that output row
NaN, a NaN in a visible key or value makes every row that sees it NaN.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .blockmask import BlockMask
from .errors import ParameterError
from .workload import parse_causal

__all__ = ["attention", "attention_backward", "mask", "logsumexp"]


def mask(Nq: int, Nkv: int, causal: object = False, window: int | None = None,
         block_mask: BlockMask | None = None) -> np.ndarray:
    """Boolean (Nq, Nkv) array, True where query r may NOT see key c."""
    masked, align = parse_causal(causal)
    if block_mask is not None:
        if not isinstance(block_mask, BlockMask):
            raise ParameterError(f"block_mask must be a BlockMask, got "
                                 f"{type(block_mask).__name__}", param="block_mask")
        if masked or window is not None:
            raise ParameterError("block_mask and causal cannot be combined: the layout is the "
                                 "mask", param="block_mask")
        return ~block_mask.element_mask(Nq, Nkv)
    out = np.zeros((Nq, Nkv), dtype=bool)
    if not masked:
        if window is not None:
            raise ParameterError("window needs a causal mask: pass causal=True", param="window")
        return out
    off = Nkv - Nq if align == "bottom_right" else 0
    rows = np.arange(Nq)[:, None] + off
    cols = np.arange(Nkv)[None, :]
    out = cols > rows
    if window is not None:
        out |= cols <= rows - window
    return out


def _expand_kv(Q: np.ndarray, K: np.ndarray, V: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    if Q.ndim == 4 and K.shape[1] != Q.shape[1]:
        g = Q.shape[1] // K.shape[1]
        K = np.repeat(K, g, axis=1)
        V = np.repeat(V, g, axis=1)
    return K, V


def _probs(Q: np.ndarray, K: np.ndarray, causal: object, scale: float | None,
           window: int | None, block_mask: BlockMask | None = None
           ) -> tuple[np.ndarray, float, np.ndarray, np.ndarray]:
    d = Q.shape[-1]
    s = 1.0 / math.sqrt(d) if scale is None else float(scale)
    S = s * (Q @ np.swapaxes(K, -1, -2))
    msk = mask(S.shape[-2], S.shape[-1], causal, window, block_mask)
    S = np.where(msk, -np.inf, S)
    m = S.max(axis=-1, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    P = np.exp(S - m)
    l = P.sum(axis=-1, keepdims=True)
    P = P / np.where(l > 0, l, 1.0)
    return P, s, m, l


def attention(Q: Any, K: Any, V: Any, causal: object = False, scale: float | None = None,
              window: int | None = None, block_mask: BlockMask | None = None) -> np.ndarray:
    """softmax(scale · Q Kᵀ [+ mask]) V in float64, numerically stable.

    >>> Q = K = V = np.eye(2)
    >>> attention(Q, K, V, scale=0.0).tolist()
    [[0.5, 0.5], [0.5, 0.5]]
    """
    Q = np.asarray(Q, dtype=np.float64)
    K = np.asarray(K, dtype=np.float64)
    V = np.asarray(V, dtype=np.float64)
    K, V = _expand_kv(Q, K, V)
    P, _, _, _ = _probs(Q, K, causal, scale, window, block_mask)
    out: np.ndarray = P @ V
    return out


def logsumexp(Q: Any, K: Any, causal: object = False, scale: float | None = None,
              window: int | None = None, block_mask: BlockMask | None = None) -> np.ndarray:
    """Per query row, log sum_c exp(scale·q·k_c) over visible keys (-inf for a row that sees none)."""
    Q = np.asarray(Q, dtype=np.float64)
    K = np.asarray(K, dtype=np.float64)
    K, _ = _expand_kv(Q, K, K)
    _, _, m, l = _probs(Q, K, causal, scale, window, block_mask)
    with np.errstate(divide="ignore"):
        return np.where(l > 0, m + np.log(np.where(l > 0, l, 1.0)), -np.inf)[..., 0]


def attention_backward(Q: Any, K: Any, V: Any, dO: Any, causal: object = False,
                       scale: float | None = None, window: int | None = None,
                       block_mask: BlockMask | None = None
                       ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Analytic float64 gradients (dQ, dK, dV) of ``sum(attention(Q, K, V) * dO)``.

    With P = softmax(S): dV = Pᵀ dO, dP = dO Vᵀ, dS = P ∘ (dP − rowsum(dO ∘ O)),
    dQ = scale · dS K, dK = scale · dSᵀ Q.  For grouped-query inputs the gradients of a shared
    key/value head are summed over its query heads.
    """
    Q = np.asarray(Q, dtype=np.float64)
    K0 = np.asarray(K, dtype=np.float64)
    V0 = np.asarray(V, dtype=np.float64)
    dO = np.asarray(dO, dtype=np.float64)
    K, V = _expand_kv(Q, K0, V0)
    P, s, _, _ = _probs(Q, K, causal, scale, window, block_mask)
    O = P @ V
    dV = np.swapaxes(P, -1, -2) @ dO
    dP = dO @ np.swapaxes(V, -1, -2)
    D = np.sum(dO * O, axis=-1, keepdims=True)
    dS = P * (dP - D)
    dQ = s * (dS @ K)
    dK = s * (np.swapaxes(dS, -1, -2) @ Q)
    if Q.ndim == 4 and K0.shape[1] != Q.shape[1]:
        g = Q.shape[1] // K0.shape[1]
        B, Hq = Q.shape[:2]
        dK = dK.reshape(B, Hq // g, g, *dK.shape[2:]).sum(axis=2)
        dV = dV.reshape(B, Hq // g, g, *dV.shape[2:]).sum(axis=2)
    return dQ, dK, dV
