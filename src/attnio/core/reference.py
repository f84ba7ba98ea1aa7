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
from .resources import Cost
from .workload import parse_causal

__all__ = ["CHUNK_ELEMENTS", "attention", "attention_backward", "cost", "logsumexp", "mask"]


def mask(Nq: int, Nkv: int, causal: object = False, window: int | None = None,
         block_mask: BlockMask | None = None) -> np.ndarray:
    """Boolean (Nq, Nkv) array, True where query r may NOT see key c."""
    out = _rows_mask(Nq, Nkv, 0, Nq, causal, window, block_mask)
    return np.zeros((Nq, Nkv), dtype=bool) if out is None else out


def _group(Q: np.ndarray, K: np.ndarray) -> tuple[np.ndarray, int]:
    """Q with the query heads of each key/value head stacked along the rows, and the group size.

    Query head h uses key/value head h // g; in ``(B, Hkv, g·Nq, d)`` each key/value head meets
    all its queries at once, so K and V are never repeated (and the gradients of a shared
    key/value head come out summed over its query heads)."""
    if Q.ndim == 4 and K.shape[1] != Q.shape[1]:
        B, Hq, Nq, d = Q.shape
        g = Hq // K.shape[1]
        return Q.reshape(B, K.shape[1], g * Nq, d), g
    return Q, 1


def _ungroup(X: np.ndarray, Q: np.ndarray) -> np.ndarray:
    """The inverse of :func:`_group` for an array with the stacked rows of ``Q``."""
    return X.reshape(Q.shape[:-1] + X.shape[-1:]) if X.shape[:-1] != Q.shape[:-1] else X


#: Score elements per chunk of query rows (all heads together): the reference's working memory
#: is a few arrays of this many float64s, however long the sequence.
CHUNK_ELEMENTS = 1 << 22


def _rows_mask(Nq: int, Nkv: int, r0: int, r1: int, causal: object,
               window: int | None, block_mask: BlockMask | None = None) -> np.ndarray | None:
    """The mask of stacked query rows [r0, r1) (row R is query R mod Nq; True: not seen), or
    None when nothing is masked."""
    masked, align = parse_causal(causal)
    if block_mask is not None:
        if not isinstance(block_mask, BlockMask):
            raise ParameterError(f"block_mask must be a BlockMask, got "
                                 f"{type(block_mask).__name__}", param="block_mask")
        if masked or window is not None:
            raise ParameterError("block_mask and causal cannot be combined: the layout is the "
                                 "mask", param="block_mask")
        block_mask.check(Nq, Nkv)
        rows_b = (np.arange(r0, r1) % Nq) // block_mask.bq
        cols_b = np.arange(Nkv) // block_mask.bk
        seen: np.ndarray = block_mask.layout[rows_b][:, cols_b]
        return ~seen
    if not masked:
        if window is not None:
            raise ParameterError("window needs a causal mask: pass causal=True", param="window")
        return None
    off = Nkv - Nq if align == "bottom_right" else 0
    rows = (np.arange(r0, r1) % Nq)[:, None] + off
    cols = np.arange(Nkv)[None, :]
    out = cols > rows
    if window is not None:
        out |= cols <= rows - window
    return out


def _chunks(Q: np.ndarray, Nkv: int) -> list[tuple[int, int]]:
    """Row ranges of Q whose score blocks (all heads) hold at most CHUNK_ELEMENTS entries."""
    Nq = Q.shape[-2]
    heads = int(np.prod(Q.shape[:-2], dtype=np.int64)) if Q.ndim > 2 else 1
    step = max(1, CHUNK_ELEMENTS // max(1, heads * Nkv))
    return [(r, min(Nq, r + step)) for r in range(0, Nq, step)]


def _probs(Q: np.ndarray, K: np.ndarray, causal: object, scale: float | None,
           window: int | None, rows: tuple[int, int, int] | None = None,
           block_mask: BlockMask | None = None
           ) -> tuple[np.ndarray, float, np.ndarray, np.ndarray]:
    """Softmax probabilities of the rows of ``Q``; ``rows = (r0, r1, Nq)`` places a chunk of
    (stacked) query rows in the full problem, for the mask."""
    d = Q.shape[-1]
    s = 1.0 / math.sqrt(d) if scale is None else float(scale)
    S = s * (Q @ np.swapaxes(K, -1, -2))
    r0, r1, Nq = rows if rows is not None else (0, S.shape[-2], S.shape[-2])
    msk = _rows_mask(Nq, S.shape[-1], r0, r1, causal, window, block_mask)
    if msk is not None:
        S = np.where(msk, -np.inf, S)
    m = S.max(axis=-1, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    P = np.exp(S - m)
    l = P.sum(axis=-1, keepdims=True)
    P = P / np.where(l > 0, l, 1.0)
    return P, s, m, l


def cost(Nq: int, Nkv: int, d: int, n_heads: int = 1, *, backward: bool = False) -> Cost:
    """Memory and time the reference takes (with ``backward``: its gradients too)."""
    heads_rows = n_heads * min(Nq, max(1, CHUNK_ELEMENTS // max(1, n_heads * Nkv)))
    work = 6 * heads_rows * Nkv  # S, the mask, P, exp and their temporaries
    arrays = n_heads * (Nq + 2 * Nkv) * d + n_heads * Nq * d  # float64 copies + output
    flops = 4 * n_heads * Nq * Nkv * d
    if backward:
        work *= 2
        arrays *= 2
        flops *= 3
    return Cost(8 * (work + arrays), flops / 2.0e9, "the float64 reference")


def attention(Q: Any, K: Any, V: Any, causal: object = False, scale: float | None = None,
              window: int | None = None, block_mask: BlockMask | None = None) -> np.ndarray:
    """softmax(scale · Q Kᵀ [+ mask]) V in float64, numerically stable.

    Computed in chunks of query rows, so its working memory stays bounded however long the
    sequence.

    >>> Q = K = V = np.eye(2)
    >>> attention(Q, K, V, scale=0.0).tolist()
    [[0.5, 0.5], [0.5, 0.5]]
    """
    Q0 = np.asarray(Q, dtype=np.float64)
    K = np.asarray(K, dtype=np.float64)
    V = np.asarray(V, dtype=np.float64)
    Q, _ = _group(Q0, K)
    Nq = Q0.shape[-2]
    out = np.empty(Q.shape[:-1] + (V.shape[-1],), dtype=np.float64)
    for r0, r1 in _chunks(Q, K.shape[-2]):
        P, _, _, _ = _probs(Q[..., r0:r1, :], K, causal, scale, window, (r0, r1, Nq),
                            block_mask)
        out[..., r0:r1, :] = P @ V
    return _ungroup(out, Q0)


def logsumexp(Q: Any, K: Any, causal: object = False, scale: float | None = None,
              window: int | None = None, block_mask: BlockMask | None = None) -> np.ndarray:
    """Per query row, log sum_c exp(scale·q·k_c) over visible keys (-inf for a row that sees none)."""
    Q0 = np.asarray(Q, dtype=np.float64)
    K = np.asarray(K, dtype=np.float64)
    Q, _ = _group(Q0, K)
    Nq = Q0.shape[-2]
    out = np.empty(Q.shape[:-1], dtype=np.float64)
    for r0, r1 in _chunks(Q, K.shape[-2]):
        _, _, m, l = _probs(Q[..., r0:r1, :], K, causal, scale, window, (r0, r1, Nq),
                            block_mask)
        with np.errstate(divide="ignore"):
            out[..., r0:r1] = np.where(l > 0, m + np.log(np.where(l > 0, l, 1.0)), -np.inf)[..., 0]
    return out.reshape(Q0.shape[:-1])


def attention_backward(Q: Any, K: Any, V: Any, dO: Any, causal: object = False,
                       scale: float | None = None, window: int | None = None,
                       block_mask: BlockMask | None = None
                       ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Analytic float64 gradients (dQ, dK, dV) of ``sum(attention(Q, K, V) * dO)``.

    With P = softmax(S): dV = Pᵀ dO, dP = dO Vᵀ, dS = P ∘ (dP − rowsum(dO ∘ O)),
    dQ = scale · dS K, dK = scale · dSᵀ Q.  For grouped-query inputs the gradients of a shared
    key/value head are summed over its query heads.  Computed in chunks of query rows.
    """
    Q0 = np.asarray(Q, dtype=np.float64)
    K = np.asarray(K, dtype=np.float64)
    V = np.asarray(V, dtype=np.float64)
    Q, _ = _group(Q0, K)
    dO, _ = _group(np.asarray(dO, dtype=np.float64), K)
    Nq = Q0.shape[-2]
    dQ = np.empty_like(Q)
    dK = np.zeros_like(K)
    dV = np.zeros_like(V)
    for r0, r1 in _chunks(Q, K.shape[-2]):
        q, do = Q[..., r0:r1, :], dO[..., r0:r1, :]
        P, s, _, _ = _probs(q, K, causal, scale, window, (r0, r1, Nq), block_mask)
        O = P @ V
        dV += np.swapaxes(P, -1, -2) @ do
        dP = do @ np.swapaxes(V, -1, -2)
        D = np.sum(do * O, axis=-1, keepdims=True)
        dS = P * (dP - D)
        dQ[..., r0:r1, :] = s * (dS @ K)
        dK += s * (np.swapaxes(dS, -1, -2) @ q)
    return _ungroup(dQ, Q0), dK, dV
