"""Square tiling's tile arithmetic (:mod:`.square_tiling`): functions on fast-tile arrays only,
in place, as in :mod:`._kernels`: the Phase-1 score slices, the stable exp with a running max,
the raw-score fold into (m, l), the log-sum-exp, the Phase-2 weights, and the paper's literal
exp(S) with its overflow and underflow checks (:class:`ExpOverflowError`)."""

from __future__ import annotations

import math

import numpy as np

from ..core.errors import AttnioError
from ..core.workload import Shape
from . import _kernels as K_

__all__ = ["ExpOverflowError"]


class ExpOverflowError(AttnioError, FloatingPointError):
    """The literal (``stable=False``) schedule met an exp that overflowed or a row that underflowed."""


def acc_slice(S: np.ndarray, Q: np.ndarray, K: np.ndarray, l0: int, l1: int,
               scale: float) -> None:
    S += scale * (Q[:, l0:l1] @ K.T)


def exp_stable(S: np.ndarray, m: np.ndarray, l: np.ndarray, t: np.ndarray) -> None:
    """S <- exp(S - m_new) with the running max m_new; l rescaled and accumulated; t <- m_new used."""
    np.max(S, axis=1, out=t)
    np.maximum(t, m, out=t)
    ts = K_.safe_max(t)
    S -= ts[:, None]
    np.exp(S, out=S)
    l *= np.exp(m - ts)
    l += S.sum(axis=1)
    m[:] = t
    t[:] = ts


def fold_scores(S: np.ndarray, m: np.ndarray, l: np.ndarray) -> None:
    """(m, l) <- the running row max and the sum of exp(S - m) with the tile S folded in; S is
    left as it is (the raw scores are what is written)."""
    mn = np.maximum(m, S.max(axis=1))
    ms = K_.safe_max(mn)
    l *= np.exp(m - ms)
    l += np.exp(S - ms[:, None]).sum(axis=1)
    m[:] = mn


def log_sum_exp(t: np.ndarray, m: np.ndarray, l: np.ndarray) -> None:
    """t <- m + log l per row (+inf where the row saw no key, so its weights become 0)."""
    with np.errstate(divide="ignore"):
        t[:] = np.where(l > 0, K_.safe_max(m) + np.log(np.where(l > 0, l, 1.0)), np.inf)


def weights(w: np.ndarray, g: np.ndarray) -> None:
    with np.errstate(invalid="ignore"):
        np.exp(w - g, out=w)


def zero_masked(a: np.ndarray, r0: int, c0: int, offset: int) -> None:
    rows = np.arange(r0, r0 + a.shape[0])[:, None]
    cols = np.arange(c0, c0 + a.shape[1])[None, :]
    a[cols > rows + offset] = 0.0


def exp_literal(S: np.ndarray, l: np.ndarray, r0: int, c0: int) -> None:
    """The paper's A = exp(S) (no max subtracted), refusing to write an overflowed tile."""
    with np.errstate(over="ignore"):
        np.exp(S, out=S)
    if not np.isfinite(S).all():
        r, c = (int(x) for x in np.argwhere(~np.isfinite(S))[0])
        raise ExpOverflowError(
            f"square_tiling(stable=False): exp overflowed at score S[{r0 + r}, {c0 + c}] "
            f"(a logit above {math.log(np.finfo(S.dtype).max):.1f} in {S.dtype}); the paper's "
            "algorithm does not subtract the row max: use stable=True")
    l += S.sum(axis=1)


def check_row_sums(l: np.ndarray, r0: int, shape: Shape) -> None:
    rows = np.arange(r0, r0 + l.shape[0])
    if shape.causal:
        sees = np.minimum(shape.Nkv, rows + 1 + shape.offset) > 0
    else:
        sees = np.ones_like(rows, bool)
    if not np.isfinite(l).all():
        r = int(np.argwhere(~np.isfinite(l))[0][0])
        raise ExpOverflowError(
            f"square_tiling(stable=False): the row sum of exp(S) overflowed in row {r0 + r}; "
            "use stable=True")
    bad = sees & (l <= 0)
    if bad.any():
        r = int(np.argwhere(bad)[0][0])
        raise ExpOverflowError(
            f"square_tiling(stable=False): every exp(S) of row {r0 + r} underflowed to 0 (logits "
            f"below {math.log(np.finfo(l.dtype).tiny):.1f}); the output row would be lost: use "
            "stable=True")


def normalise_literal(O: np.ndarray, l: np.ndarray, r0: int) -> None:
    O /= np.where(l > 0, l, 1.0)[:, None]
    if not np.isfinite(O).all():
        r = int(np.argwhere(~np.isfinite(O))[0][0])
        raise ExpOverflowError(f"square_tiling(stable=False): output row {r0 + r} is not finite; "
                               "use stable=True")
