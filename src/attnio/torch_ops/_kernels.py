"""Feature maps of the linear-attention engine, as torch code with hand-written backward passes.

A kernel gives, for rows stored as columns ``xT`` (..., E, T), *unweighted* features ``M`` (..., r, T)
(features along rows, tokens contiguous: every construction step is a contiguous block) and a combined
weight ``cw`` (r,) such that the attention weight of query q on key k is
``sum_a M(q)_a cw_a M(k)_a``; the engine folds ``cw`` into the small r x (Ev+1) state instead of
scaling the n x r feature matrices.  ``backward(xT, M, dM)`` returns dL/dxT given dL/dM.

* :class:`PolyKernel`: the monomials of degree <= g, ``cw_a = c_j s^j j!/a!`` for the polynomial
  ``P(x) = sum_j c_j x^j`` (so ``<M(q), cw M(k)> = P(s <q, k>)`` exactly, the multinomial
  theorem of :mod:`attnio.approx.features`), and ``scores(q, k) = P(s q k^T)`` evaluated directly
  (Horner) for the engine's in-chunk tiles: the very same polynomial values, without features.
  The monomials are built level by level with no gather: ordered by degree, then by last variable,
  then by the order of their prefix in the level below, the monomials of degree j whose last
  variable is v are ``(the first C(v+j-1, j-1) monomials of degree j-1) * x_v``, one contiguous
  slice times one column.
* :class:`FavorKernel`: Performer's positive random features ``exp(w^T x~ - |x~|^2/2 - shift)``.
"""

from __future__ import annotations

import functools
import itertools
import math

import numpy as np

from ..approx.features import MAX_R_COMPUTE, FeatureMap, feature_dim, monomials

__all__ = ["FavorKernel", "PolyKernel", "level_layout", "poly_kernel"]


@functools.lru_cache(maxsize=32)
def level_layout(d: int, g: int) -> tuple[tuple[tuple[int, int, int, int], ...], np.ndarray]:
    """The level-by-level construction and the permutation to :func:`monomials`' order.

    Returns ``(steps, perm)``: each step ``(dst, src, count, v)`` means
    ``M[..., dst:dst+count] = M[..., src:src+count] * x[..., v]``; ``perm[i]`` is the index in
    :func:`attnio.approx.features.monomials` order of the i-th monomial in this order.
    """
    if feature_dim(d, g) > MAX_R_COMPUTE:
        monomials(d, g)  # the clear refusal (naming degree) before any table is built
    levels: list[list[tuple[int, ...]]] = [[()]]
    steps = []
    start = [0]  # first index of each level
    pos = 1
    for j in range(1, g + 1):
        prev = levels[-1]
        cur: list[tuple[int, ...]] = []
        for v in range(d):
            cnt = math.comb(v + j - 1, j - 1)  # degree-(j-1) monomials with last variable <= v
            steps.append((pos + len(cur), start[-1], cnt, v))
            cur.extend(p + (v,) for p in prev[:cnt])
        start.append(pos)
        pos += len(cur)
        levels.append(cur)
    order = [m for lev in levels for m in lev]
    ref = {m: i for i, m in enumerate(
        m for j in range(g + 1) for m in itertools.combinations_with_replacement(range(d), j))}
    perm = np.array([ref[m] for m in order], dtype=np.int64)
    return tuple(steps), perm


class PolyKernel:
    """Monomial features of P(s <q, k>) (see the module docstring).

    The top degree (C(d+g-1, g) of the r monomials) is never materialised: its block for last
    variable v is ``x_v * (the first cnt_v monomials of degree g-1)``, so a product with it is
    a product with that contiguous slice of the lower levels and a row scaling by x_v (the same
    multiply-adds, minus the largest elementwise passes).
    """

    direct = True

    def __init__(self, fm: FeatureMap, dtype, device):
        import torch

        self.d, self.g, self.r = fm.d, fm.degree, fm.r
        self.scale = float(fm.scale)
        self.coefficients = tuple(float(c) for c in fm.coefficients)
        monomials(fm.d, fm.degree)  # refuses r beyond MAX_R_COMPUTE before any table is built
        steps, perm = level_layout(fm.d, fm.degree)
        wq, wk = fm.weights()
        self.cw = torch.as_tensor(np.ascontiguousarray((wq * wk)[perm]), dtype=dtype, device=device)
        nt = len(steps) - fm.d if fm.degree >= 1 else len(steps)
        self.steps, self.top = steps[:nt], steps[nt:]  # top: (dst, src, cnt, v) of degree g
        self.r_low = self.top[0][0] if self.top else self.r
        self.low_end = self.top[0][1] if self.top else 0  # first index of degree g-1

    def lower(self, xT, query: bool = True):
        """The monomials below the top degree, (..., r_low, T)."""
        import torch

        xT = xT.contiguous()  # tokens contiguous: every step below is a contiguous block
        M = torch.empty(xT.shape[:-2] + (self.r_low, xT.shape[-1]), dtype=xT.dtype,
                        device=xT.device)
        M[..., 0, :] = 1
        for dst, src, cnt, v in self.steps:
            torch.mul(M[..., src:src + cnt, :], xT[..., v:v + 1, :], out=M[..., dst:dst + cnt, :])
        return M

    def m_mul(self, xT, Ml, C):
        """``M C`` for C (..., T, m): (..., r, m)."""
        import torch

        parts = [Ml @ C]
        for _, src, cnt, v in self.top:
            parts.append(Ml[..., src:src + cnt, :] @ (C * xT[..., v, :, None]))
        return torch.cat(parts, -2) if len(parts) > 1 else parts[0]

    def mt_mul(self, xT, Ml, B):
        """``M^T B`` for B (..., r, m): (..., T, m)."""
        out = Ml.transpose(-1, -2) @ B[..., :self.r_low, :]
        for dst, src, cnt, v in self.top:
            out += (Ml[..., src:src + cnt, :].transpose(-1, -2) @ B[..., dst:dst + cnt, :]) \
                * xT[..., v, :, None]
        return out

    def grad_outer(self, xT, Ml, pairs):
        """dL/dxT when dL/dM = sum of X Y^T over ``pairs`` (X (..., r, m), Y (..., T, m))."""
        import torch

        xT = xT.contiguous()
        dx = torch.zeros_like(xT)
        dM = None
        for X, Y in pairs:
            part = X[..., :self.r_low, :] @ Y.transpose(-1, -2)
            dM = part if dM is None else dM.add_(part)
            for dst, src, cnt, v in self.top:
                Xv = X[..., dst:dst + cnt, :]
                dM[..., src:src + cnt, :] += Xv @ (Y * xT[..., v, :, None]).transpose(-1, -2)
                dx[..., v, :] += (Y * (Ml[..., src:src + cnt, :].transpose(-1, -2) @ Xv)).sum(-1)
        assert dM is not None, "grad_outer needs at least one (X, Y) pair"
        for dst, src, cnt, v in reversed(self.steps):
            blk = dM[..., dst:dst + cnt, :]
            dx[..., v, :] += (blk * Ml[..., src:src + cnt, :]).sum(-2)
            dM[..., src:src + cnt, :].addcmul_(blk, xT[..., v:v + 1, :])
        return dx

    def features(self, xT, query: bool = True):
        """All r features (..., r, T) (for tests and the in-tile products of other kernels)."""
        import torch

        Ml = self.lower(xT, query)
        parts = [Ml] + [Ml[..., src:src + cnt, :] * xT[..., v:v + 1, :]
                        for _, src, cnt, v in self.top]
        return torch.cat(parts, -2)

    def scores(self, q, k):
        """P(s q k^T) for the in-chunk tiles, and x = s q k^T (for the backward)."""
        x = (q @ k.transpose(-1, -2)) * self.scale
        c = self.coefficients
        A = x * c[-1] + c[-2] if len(c) > 1 else x * 0 + c[0]
        for cj in reversed(c[:-2]):
            A = A * x + cj
        return A, x

    def dscores(self, x):
        """P'(x) * s."""
        c = self.coefficients
        if len(c) == 1:
            return x * 0
        dc = [j * c[j] for j in range(1, len(c))]
        D = x * 0 + dc[-1]
        for cj in reversed(dc[:-1]):
            D = D * x + cj
        return D * self.scale


@functools.lru_cache(maxsize=32)
def poly_kernel(fm: FeatureMap, dtype, device) -> PolyKernel:
    """A cached :class:`PolyKernel` (its tables and weights are built once per map and device)."""
    return PolyKernel(fm, dtype, device)


class FavorKernel:
    """FAVOR+ features ``exp(u - |x~|^2/2 - shift) / sqrt(m)``, ``u = x~ w^T``, ``x~ = sqrt(s) x``.

    Queries subtract their own row maximum of u (cancels in the row's ratio), keys one global
    constant ``key_shift`` (cancels in every ratio); both are constants for the gradient.
    """

    direct = False

    def __init__(self, W, scale: float, key_shift):
        import torch

        self.W = W  # m x E
        self.r = W.shape[0]
        self.rs = math.sqrt(scale)
        self.key_shift = key_shift
        self.cw = torch.ones(self.r, dtype=W.dtype, device=W.device)
        self.inv = 1.0 / math.sqrt(self.r)

    def features(self, xT, query: bool = True):
        import torch

        xs = xT * self.rs
        u = self.W @ xs
        h = 0.5 * (xs * xs).sum(-2, keepdim=True)
        shift = u.amax(-2, keepdim=True) if query else self.key_shift
        return torch.exp(u - h - shift) * self.inv

    lower = features

    def m_mul(self, xT, M, C):
        return M @ C

    def mt_mul(self, xT, M, B):
        return M.transpose(-1, -2) @ B

    def grad_outer(self, xT, M, pairs):
        dM = None
        for X, Y in pairs:
            part = X @ Y.transpose(-1, -2)
            dM = part if dM is None else dM + part
        g = dM * M
        return (self.W.T @ g - g.sum(-2, keepdim=True) * (xT * self.rs)) * self.rs
