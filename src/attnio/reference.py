"""The float64 reference attention: the oracle every algorithm's output is checked against."""

from __future__ import annotations

import math

import numpy as np


def attention(Q, K, V, causal: bool = False, scale: float | None = None) -> np.ndarray:
    """softmax(scale · Q Kᵀ [+ causal mask]) V in float64, numerically stable.

    The causal mask is bottom-right aligned (query r sees keys c <= r + Nkv - Nq), as in
    flash-attn >= 2.1; with Nq = Nkv it is the usual lower triangle.  A query row that sees no
    key (possible only when Nq > Nkv) gets output 0, as flash-attn returns.

    >>> Q = K = V = np.eye(2)
    >>> attention(Q, K, V, scale=0.0).tolist()
    [[0.5, 0.5], [0.5, 0.5]]
    """
    Q = np.asarray(Q, dtype=np.float64)
    K = np.asarray(K, dtype=np.float64)
    V = np.asarray(V, dtype=np.float64)
    d = Q.shape[-1]
    s = 1.0 / math.sqrt(d) if scale is None else float(scale)
    S = s * (Q @ np.swapaxes(K, -1, -2))
    if causal:
        nq, nk = S.shape[-2], S.shape[-1]
        mask = np.arange(nk)[None, :] > np.arange(nq)[:, None] + (nk - nq)
        S = np.where(mask, -np.inf, S)
    m = S.max(axis=-1, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    P = np.exp(S - m)
    l = P.sum(axis=-1, keepdims=True)
    P = P / np.where(l > 0, l, 1.0)
    return P @ V
