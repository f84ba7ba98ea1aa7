"""Lower bounds on the I/O of the attention backward pass (docs/bounds.md §10).

The backward pass reads Q, K, V, O, dO (and the forward's logsumexp L) and writes dQ, dK, dV.
Its count is the backward pass alone: fast memory starts empty, as in the forward.

* :func:`backward_trivial` - explicit: dO is read (every dO_il moves dV generically and no other
  input determines it), dQ, dK, dV written;
* :func:`backward_inputs` - explicit, for the standard backward (the class of Theorems D and E):
  the operands of the products S_ij = q_i·k_j and dP_ij = dO_i·v_j of the required pairs are read
  too, so Q, K, V, dO are read and dQ, dK, dV written: 7Nd unmasked;
* :func:`backward_accum` (Theorem D) - explicit: the 3·P·d products of the dV, dQ, dK
  accumulations, with a potential on the accumulators held at segment boundaries: about
  ``8.8·N²d²/M`` for M >> d² (FlashAttention-2's backward moves about ``16·N²d²/M``);
* :func:`backward_pooled` (Theorem E) - explicit: the five product families of the backward
  (S, dP, dV, dQ, dK: 5·P·d) under one budget: about ``6.1·N²d/√M`` for M << d²;
* :func:`li_backward` - asymptotic: Li, Liang, Shi, Song et al. (arXiv 2410.09397), Theorem 1.1,
  ``Θ(min((N²d² + Nd³)/M, (N²d + Nd²)/√M))``, reported with constant 1.

:func:`backward_applicable_to` lists them for a Shape (the backward certificate).  Theorems D and E
depend on the mask only through the required pairs P, like the forward ones.

>>> [b.name for b in backward_applicable_to(Shape(1024, 1024, 64), 16384)]
['backward_trivial', 'backward_inputs', 'backward_accum', 'backward_pooled', 'li_backward']
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from ..core import masks
from ..core.blockmask import BlockMask
from ..core.errors import ParameterError
from ..core.workload import Shape
from .base import Bound, attention_shape, check_M, keyword_sizes, pairs_of, regime_of
from .segments import (
    PairsTheorem,
    PooledFunctions,
    _cubes,
    _pymax,
    pooled_lambdas,
    pooled_lambdas_batch,
    potential_lambdas,
    potential_lambdas_many,
    segments_bound,
    sum_line_peak,
)

if TYPE_CHECKING:  # annotations only (numpy.typing costs ~15 ms at import)
    import numpy.typing as npt

    from .segments import FloatArray

__all__ = ["BACKWARD_ASSUMPTIONS", "LI_ET_AL", "backward_accum", "backward_accum_for",
           "backward_inputs", "backward_inputs_for",
           "backward_accum_lambdas", "backward_accum_pairs", "backward_accum_prepare",
           "backward_accum_value", "backward_applicable", "backward_applicable_to",
           "backward_pooled", "backward_pooled_for", "backward_pooled_lambdas",
           "backward_pooled_pairs", "backward_pooled_prepare", "backward_pooled_value", "backward_trivial", "backward_trivial_for", "li_backward",
           "li_backward_for"]

LI_ET_AL = "Li, Liang, Shi, Song et al., arXiv 2410.09397"

#: The class of backward algorithms Theorems D and E speak of (docs/bounds.md §10).
BACKWARD_ASSUMPTIONS = (
    "S_ij and dP_ij = Σ_l dO_il·v_jl are sums of d products (standard matmul), any order",
    "P_ij (from S_ij, L_i) and dS_ij = P_ij·(dP_ij - D_i) come by chains of pair-specific steps",
    "dV_jl = Σ_i P_ij·dO_il, dQ_il = Σ_j dS_ij·k_jl, dK_jl = Σ_i dS_ij·q_il: one product per "
    "required pair in each, summed in any order (partial sums may be spilled)",
    "recomputation allowed; fast memory holds <= M words between operations",
)


# ---------------------------------------------------------------------------- trivial
def backward_trivial_for(shape: Shape) -> Bound:
    """:func:`backward_trivial` of a Shape (all its heads)."""
    rc = masks.row_counts(shape)
    d = shape.d
    value = shape.n_heads * (rc.rows1 * d + shape.Nq * d) + shape.n_kv_heads * 2 * shape.Nkv * d
    return Bound(value, "trivial: dO read once, dQ, dK, dV written once",
                 ("every word of dQ, dK, dV is written at least once",
                  "every dO_il of a row that sees a key moves dV_jl (generic inputs) and is "
                  "not determined by the other inputs, so it is read",
                  "Q, K, V, O, L are not counted: O and L carry information about Q, K, V"),
                 True, name="backward_trivial", regime="any M")


@keyword_sizes("Nq, Nkv, d")
def backward_trivial(*, N: int, d: int, Nkv: int | None = None, causal: object = False,
                     heads: int = 1, kv_heads: int | None = None,
                     window: int | None = None) -> Bound:
    """dO read (rows that see a key), dQ, dK, dV written: ``2·Nq·d + 2·Nkv·d`` unmasked."""
    shape = attention_shape(N, d, Nkv=Nkv, causal=causal, heads=heads, kv_heads=kv_heads,
                            window=window)
    return backward_trivial_for(shape)


def backward_inputs_for(shape: Shape) -> Bound:
    """:func:`backward_inputs` of a Shape (all its heads)."""
    rc = masks.row_counts(shape)
    d = shape.d
    value = (shape.n_heads * (rc.rows2 * d + rc.rows1 * d + shape.Nq * d)
             + shape.n_kv_heads * (2 * rc.k_rows * d + 2 * shape.Nkv * d))
    return Bound(value, "the standard backward's operands read once, its outputs written once "
                 "(docs/bounds.md §10)",
                 (*BACKWARD_ASSUMPTIONS,
                  "every q_il of a row that sees >= 2 keys and every k_jl, v_jl of a key such a "
                  "row sees is an operand of a product S_ij or dP_ij of a required pair, so it "
                  "is read; dO is read (backward_trivial); dQ, dK, dV are written"),
                 True, name="backward_inputs", regime="any M")


@keyword_sizes("Nq, Nkv, d")
def backward_inputs(*, N: int, d: int, Nkv: int | None = None, causal: object = False,
                    heads: int = 1, kv_heads: int | None = None,
                    window: int | None = None) -> Bound:
    """For the standard backward (the class of Theorems D and E): Q, K, V (the rows the required
    pairs use) and dO read, dQ, dK, dV written: ``4·Nq·d + 3·Nkv·d`` unmasked (7Nd)."""
    shape = attention_shape(N, d, Nkv=Nkv, causal=causal, heads=heads, kv_heads=kv_heads,
                            window=window)
    return backward_inputs_for(shape)


# ---------------------------------------------------------------------------- Theorem D
#: Theorem D's cubic constant: oqk + (k + q)·min(q, o)·min(k, v) <= (q + k + o + v)³/(12√3).
D_CUBIC = 1.0 / (12.0 * math.sqrt(3.0))
#: The cells [τ_a, τ_b] of [1/2, 1] whose branches cover G(s) = max_τ τ(1-τ)s² + D_CUBIC·τ³s³/d²
#: (τ = the share of the import budget spent on Q, K, V, dO entries): uniform from 1/2, then
#: geometric towards 1, where the pure cubic branch (τ = 1) takes over.
_D_EDGES = tuple(sorted({0.5 + i / 12 for i in range(7)} | {1.0 - 2.0 ** -k for k in range(1, 7)}))


def _d_branches(d: int) -> tuple[tuple[float, float], ...]:
    """Branches c2·s² + c3·s³ whose maximum is >= Theorem D's G(s) (docs/bounds.md §10, step 6):
    for τ in a cell [a, b] of [1/2, 1], τ(1-τ) <= a(1-a) and τ³ <= b³; τ < 1/2 is below τ = 1/2."""
    dd = float(d * d)
    return tuple((a * (1.0 - a), D_CUBIC * b ** 3 / dd)
                 for a, b in zip(_D_EDGES[:-1], _D_EDGES[1:]))


def _dominated(b: tuple[float, float], by: tuple[float, float], top: float) -> bool:
    """Whether branch b is <= branch ``by`` at every s in [0, top]: (c2 - c2') + (c3 - c3')·s is
    linear in s, so it is <= 0 on the interval iff it is at both ends."""
    return b[0] <= by[0] and (b[0] - by[0]) + (b[1] - by[1]) * top <= 0.0


def backward_accum_lambdas(M: float, d: int, K: float, mu: float) -> tuple[float, float, float]:
    """Theorem D's (Λ, Λ_f, Λ_l): the dV, dQ, dK products a middle, first, last segment can do.

    The import budget s never exceeds M + K in any segment, so the branches dominated by another
    one on [0, M + K] are dropped (the maximum of the others is the same there): exact, and the
    many branches only cost time where they matter."""
    branches = _d_branches(d)
    top = float(M) + float(K)
    kept = tuple(b for i, b in enumerate(branches)  # (of equal branches, the first is kept)
                 if not any(_dominated(b, c, top) and (c != b or j < i)
                            for j, c in enumerate(branches) if j != i))
    return potential_lambdas(M, K, mu, kept)


def backward_accum_value(P: int, d: int, M: int, K: int, mu: float) -> int:
    """Theorem D at segment length K and potential μ >= 0 (any values give a valid bound)."""
    return segments_bound(3 * P * d, K, *backward_accum_lambdas(M, d, K, mu))


def _d_kept(branches: Sequence[tuple[float, float]], top: FloatArray) -> npt.NDArray[np.bool_]:
    """(branches × elements) the branches :func:`backward_accum_lambdas` keeps at each top =
    M + K: the same tests (:func:`_dominated`, the first of equal branches kept), elementwise."""
    c2 = np.array([b[0] for b in branches], dtype=np.float64)
    c3 = np.array([b[1] for b in branches], dtype=np.float64)
    n = len(branches)
    i, j = np.arange(n)[:, None], np.arange(n)[None, :]
    same = (c2[:, None] == c2[None, :]) & (c3[:, None] == c3[None, :])
    static = (i != j) & (~same | (j < i)) & (c2[:, None] <= c2[None, :])  # b_i vs c = b_j
    linear = ((c2[:, None] - c2[None, :])[:, :, None]
              + (c3[:, None] - c3[None, :])[:, :, None] * top) <= 0.0  # i × j × elements
    kept: npt.NDArray[np.bool_] = ~(static[:, :, None] & linear).any(axis=1)
    return kept


def _d_work(P: int, d: int, mu: FloatArray) -> int:
    return 3 * P * d


def _d_lambdas(d: int, Ms: Sequence[int], Ks: Sequence[int],
               mus: Sequence[float]) -> tuple[FloatArray, FloatArray, FloatArray]:
    """:func:`backward_accum_lambdas` on a batch (the same floats: the same branches kept; a
    batch of one by the scalar function, where that is faster)."""
    if len(Ms) < 2:
        rows = np.array([backward_accum_lambdas(M, d, K, mu) for M, K, mu in zip(Ms, Ks, mus)],
                        dtype=np.float64).reshape(-1, 3)
        return rows[:, 0], rows[:, 1], rows[:, 2]
    Ma, Ka = np.asarray(Ms, dtype=np.float64), np.asarray(Ks, dtype=np.float64)
    branches = _d_branches(d)
    kept = _d_kept(branches, Ma + Ka)
    # (the branches no element keeps only cost time)
    used = np.asarray(kept.any(axis=1) if len(Ma) else np.ones(len(branches)), dtype=bool)
    return potential_lambdas_many(Ma, Ka, np.asarray(mus, dtype=np.float64),
                                  [b for b, u in zip(branches, used.tolist()) if u], kept[used])


_D = PairsTheorem(
    name="backward_accum", kind="potential", table="D", value=backward_accum_value, fine=True,
    work=_d_work, lambdas=_d_lambdas,
    theorem="Theorem D: dV, dQ, dK products, potential on the accumulators (docs/bounds.md §10)",
    assumptions=BACKWARD_ASSUMPTIONS)


@keyword_sizes()
def backward_accum(*, N: int, d: int, M: int, Nkv: int | None = None, causal: object = False,
                   heads: int = 1, kv_heads: int | None = None,
                   window: int | None = None) -> Bound:
    """Theorem D: ``Q >= K·(h - 1)``, h the least number of segments with
    ``3·P·d <= Λ_f + Λ_l + (h - 2)·Λ``."""
    return _D.for_shape(attention_shape(N, d, Nkv=Nkv, causal=causal, heads=heads,
                                        kv_heads=kv_heads, window=window), M)


@keyword_sizes()
def backward_accum_pairs(*, P: int, d: int, M: int) -> Bound:
    """Theorem D for P required pairs (over all query heads), head dimension d, M fast
    words."""
    return _D.pairs(P, d, M)


#: Theorem D of a Shape (all its query heads; P from its mask).
backward_accum_for = _D.for_shape

#: Theorem D at many (P, d, M) at once, for the later calls (:meth:`PairsTheorem.prepare`).
backward_accum_prepare = _D.prepare


# ---------------------------------------------------------------------------- Theorem E
def _e_functions(d: int):
    dd = float(d * d)
    c3 = 1.0 / (4.0 * dd)

    def J(I: float) -> float:  # quadratic part I²/3 (Motzkin-Straus) + cubic part I³/(4d²)
        return I * I / 3.0 + c3 * I ** 3

    def peaks(T: float, a: float, b: float) -> tuple[float]:
        return (sum_line_peak(T, 1.0 / 3.0, c3),)

    dd4 = 4.0 * dd  # (the same product each call: once)

    def rho(I: float) -> float:  # S and dP root pieces: 2·max(I, I²/(4d²))
        return 2.0 * max(I, I * I / dd4)

    return J, peaks, rho, (4.0 * dd,), 0.0


def backward_pooled_lambdas(M: float, d: int, K: float, nu: float) -> tuple[float, float, float]:
    """Theorem E's (Λ, Λ_f, Λ_l): products minus ν·(root pieces) per segment."""
    J, peaks, rho, breaks, flat = _e_functions(d)
    return pooled_lambdas(M, K, nu, J, peaks, rho, breaks, flat)


def backward_pooled_value(P: int, d: int, M: int, K: int, nu: float) -> int:
    """Theorem E at segment length K and multiplier 0 <= ν < 5d/2."""
    if not 0.0 <= 2.0 * nu < 5.0 * d:
        raise ParameterError(f"nu must be in [0, 5d/2) = [0, {2.5 * d}), got {nu}", param="nu")
    return segments_bound((5.0 * d - 2.0 * nu) * P, K, *backward_pooled_lambdas(M, d, K, nu))


def _e_functions_many(d: int) -> PooledFunctions:  # (the array forms of _e_functions)
    dd = float(d * d)
    c3 = 1.0 / (4.0 * dd)

    def J(I: FloatArray) -> FloatArray:
        out: FloatArray = I * I / 3.0 + c3 * _cubes(I)
        return out

    def peaks(T: FloatArray) -> tuple[FloatArray]:
        c2 = 1.0 / 3.0  # sum_line_peak(T, 1/3, c3), elementwise
        b = 3.0 * (c3 * T - c2)
        return ((b + np.sqrt(b * b + 32.0 * c2 * c3 * T)) / (8.0 * c3),)

    def rho(I: FloatArray) -> FloatArray:
        out: FloatArray = 2.0 * _pymax(I, I * I / (4.0 * dd))
        return out

    def J_fast(I: FloatArray) -> FloatArray:  # J with the cube multiplied out (a screen only)
        out: FloatArray = I * I / 3.0 + c3 * (I * I * I)
        return out

    return PooledFunctions(J, peaks, rho, (4.0 * dd,), 0.0, J_fast)


@functools.lru_cache(maxsize=1 << 14)
def _e_lambdas_one(d: int, M: int, K: int, nu: float) -> tuple[float, float, float]:
    return backward_pooled_lambdas(M, d, K, nu)


def _e_work(P: int, d: int, nu: FloatArray) -> FloatArray:
    out: FloatArray = (5.0 * d - 2.0 * nu) * float(P)  # (as backward_pooled_value)
    return out


def _e_lambdas(d: int, Ms: Sequence[int], Ks: Sequence[int],
              nus: Sequence[float]) -> tuple[FloatArray, FloatArray, FloatArray]:
    """:func:`backward_pooled_lambdas` on a batch (the same floats): :func:`~.segments.pooled_lambdas_batch`."""
    return pooled_lambdas_batch(_e_lambdas_one, _e_functions_many, d, Ms, Ks, nus)


_E = PairsTheorem(
    name="backward_pooled", kind="pooled", table="E", value=backward_pooled_value, nu_max=2.4,
    work=_e_work, lambdas=_e_lambdas,
    theorem="Theorem E: the five backward product families under one budget "
    "(docs/bounds.md §10)",
    assumptions=BACKWARD_ASSUMPTIONS)


@keyword_sizes()
def backward_pooled(*, N: int, d: int, M: int, Nkv: int | None = None, causal: object = False,
                    heads: int = 1, kv_heads: int | None = None,
                    window: int | None = None) -> Bound:
    """Theorem E: ``Q >= K·(h - 1)``, h the least number of segments with
    ``(5d - 2ν)·P <= Λ_f + Λ_l + (h - 2)·Λ``."""
    return _E.for_shape(attention_shape(N, d, Nkv=Nkv, causal=causal, heads=heads,
                                        kv_heads=kv_heads, window=window), M)


@keyword_sizes()
def backward_pooled_pairs(*, P: int, d: int, M: int) -> Bound:
    """Theorem E for P required pairs (over all query heads), head dimension d, M fast
    words."""
    return _E.pairs(P, d, M)


#: Theorem E of a Shape (all its query heads; P from its mask).
backward_pooled_for = _E.for_shape

#: Theorem E at many (P, d, M) at once, for the later calls (:meth:`PairsTheorem.prepare`).
backward_pooled_prepare = _E.prepare


# ---------------------------------------------------------------------------- Li et al.
def li_backward_for(shape: Shape, M: int) -> Bound:
    """:func:`li_backward` of a Shape (all its query heads)."""
    M = check_M(M)
    d, P = shape.d, pairs_of(shape)
    n = shape.n_heads * shape.Nq
    large = (P * d * d + n * d ** 3) / M
    small = (P * d + n * d * d) / math.sqrt(M)
    assumptions = ["standard matrix multiplication (no fast matmul)",
                   "red-blue pebble game, recomputation allowed",
                   "its other preconditions could not be read (only the abstract, the v1 HTML's "
                   "first page and the reviews were readable)"]
    if shape.masked or shape.sparse or shape.Nkv != shape.Nq:
        assumptions.append("N² read as the number of required pairs P (derived extension; "
                           "Li et al.'s own sparse statements could not be read)")
    return Bound(min(large, small), f"{LI_ET_AL}, Theorem 1.1", tuple(assumptions), False,
                 name="li_backward", regime=regime_of(d, M), constant=1.0)


@keyword_sizes()
def li_backward(*, N: int, d: int, M: int, Nkv: int | None = None, causal: object = False,
                heads: int = 1, kv_heads: int | None = None,
                window: int | None = None) -> Bound:
    """Li et al. (arXiv 2410.09397) Theorem 1.1: the backward pass needs
    ``Θ(min((N²d² + Nd³)/M, (N²d + Nd²)/√M))`` I/Os; crossover at M = Θ(d²).  Asymptotic
    (constant 1): FlashAttention-2's backward attains the large-cache form, their small-cache
    algorithm the other."""
    shape = attention_shape(N, d, Nkv=Nkv, causal=causal, heads=heads, kv_heads=kv_heads,
                            window=window)
    return li_backward_for(shape, M)


# ---------------------------------------------------------------------------- the certificate
def backward_applicable_to(shape: Shape, M: int) -> list[Bound]:
    """Every backward bound whose preconditions hold for ``shape`` with M fast words: the
    explicit :func:`backward_trivial`, :func:`backward_inputs` (the standard backward's operands),
    :func:`backward_accum` (Theorem D),
    :func:`backward_pooled` (Theorem E), then Li et al.'s asymptotic form.  Every one reads the
    mask (causal, window, or a block-sparse layout) through :func:`attnio.core.masks.row_counts`."""
    M = check_M(M)
    return [backward_trivial_for(shape), backward_inputs_for(shape), backward_accum_for(shape, M),
            backward_pooled_for(shape, M), li_backward_for(shape, M)]


@keyword_sizes()
def backward_applicable(*, N: int, d: int, M: int, Nkv: int | None = None,
                        causal: object = False, heads: int = 1, kv_heads: int | None = None,
                        window: int | None = None,
                        block_mask: BlockMask | None = None) -> list[Bound]:
    """:func:`backward_applicable_to` for these sizes (``block_mask``: a block-sparse layout)."""
    shape = attention_shape(N, d, Nkv=Nkv, causal=causal, heads=heads, kv_heads=kv_heads,
                            window=window, block_mask=block_mask)
    return backward_applicable_to(shape, M)
