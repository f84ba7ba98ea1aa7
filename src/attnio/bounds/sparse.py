"""Bounds for block-sparse attention: a Shape whose ``block_mask`` (:class:`~attnio.core.BlockMask`)
says which blocks of queries × keys are computed (FlashAttention's block-sparse algorithm, Dao et
al. 2022, Algorithm 5).

Nothing here counts the layout: :func:`attnio.core.masks.row_counts` does, for every bound.  The
explicit bounds of :mod:`.forward` (Theorems A, B), :mod:`.backward` (Theorems D, E), the trivial
read-once bounds and the first-generation bounds use the mask only through those counts (P, the
visible pairs of rows that see >= 2 keys; the Q, K, V rows the output depends on), so
:func:`attnio.bounds.applicable_to` and :func:`attnio.bounds.backward_applicable_to` evaluate them
on a block-sparse Shape as on any other mask.  This module adds the one statement specific to
block sparsity: FlashAttention's Proposition 4 (:func:`flash_block_sparse_for`), an upper bound
of that algorithm, ``Θ(Nd + N²d²s/M)``, reported as an asymptotic form.  Theorem A with P = s·N²
is its explicit matching lower bound for M >> d² (about 3.35·sN²d²/M), Theorem B for M << d².
Li et al.'s (arXiv 2410.09397) sparse lower bounds could not be read (only their abstract was):
they are not reproduced (docs/bounds.md §11).

>>> from attnio.core import BlockMask
>>> from attnio.core.workload import Shape
>>> bm = BlockMask([[1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1]], 16)
>>> b = flash_block_sparse_for(Shape(64, 64, 8, block_mask=bm), 64)
>>> b.explicit, b.value == 64 * 8 + 64 * 64 * 8 * 8 * 0.25 / 64
(False, True)
"""

from __future__ import annotations

from ..core.errors import ParameterError
from ..core.workload import Shape
from .base import Bound, check_M, regime_of

__all__ = ["DAO_ET_AL", "flash_block_sparse_for"]

DAO_ET_AL = "Dao et al., FlashAttention (arXiv 2205.14135)"


def flash_block_sparse_for(shape: Shape, M: int) -> Bound:
    """FlashAttention's Proposition 4 for a Shape with a block mask: block-sparse FlashAttention
    needs ``Θ(Nd + N²d²s/M)`` HBM accesses, s the fraction of kept blocks, for ``d <= M <= Nd``.

    It analyses that algorithm (an upper bound), so it is reported as an asymptotic form with
    constant 1, per query head, N² read as Nq·Nkv (never a "count >= bound" claim).  Raises when
    the Shape has no block mask or M is outside [d, Nq·d]."""
    M = check_M(M)
    bm = shape.block_mask
    if bm is None:
        raise ParameterError("flash_block_sparse needs a Shape with a block_mask",
                             param="block_mask")
    Nq, Nkv, d = shape.Nq, shape.Nkv, shape.d
    if not d <= M <= Nq * d:
        raise ParameterError(f"M must be in [d, N·d] = [{d}, {Nq * d}] for Proposition 4, "
                             f"got M={M}", param="M")
    s = bm.density
    return Bound(shape.n_heads * (Nq * d + Nq * Nkv * d * d * s / M),
                 f"{DAO_ET_AL}, Proposition 4",
                 ("block-sparse FlashAttention (Algorithm 5): an upper bound of that algorithm",
                  f"s = {s:.4g}, the fraction of kept blocks", "d <= M <= N·d"),
                 False, name="flash_block_sparse", regime=regime_of(d, M), constant=1.0)
