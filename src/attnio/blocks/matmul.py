"""Blocked matrix multiplication C = A·B on the two-level memory: the small-cache building block.

A is m×k, B is k×n, C is m×n; A and B start in slow memory and C must end there.  The schedule is
*output-stationary*: each C tile stays in fast memory while the reduction runs over k, and is
written exactly once::

    for each row block i of C (bm rows):
        for each column block j of C (bn columns):
            C_ij = 0 in fast memory
            for each slice l of the reduction (bk wide):
                load A[i, l] (bm×bk), B[l, j] (bk×bn);  C_ij += A[i, l] B[l, j]
            write C_ij

Two named tile rules and a search:

* ``"square"``: bm = bn = bk = b, the largest b with 3b² ≤ M (the textbook blocked matmul);
* ``"outer"`` (COSMA's sequential schedule, Kwasniewski et al., SC'19): bk = 1, bm = bn = a, the
  largest a with a² + 2a ≤ M, i.e. ``a = ⌊√(M+1)⌋ − 1``: C is an a×a tile updated by outer products
  of one column of A and one row of B.  (The issue states ``a = ⌊√M⌋``; that tile leaves no room for
  the column of A and the row of B, so under an enforced capacity a is one less — derived.)
* ``"auto"`` (the default): the least closed form over rectangular candidates (bm ≠ bn allowed,
  bk grown to fill the leftover space at equal I/O, ties toward fewer steps).

Closed form (exact; Tm = ⌈m/bm⌉, Tn = ⌈n/bn⌉)::

    reads  = Tn·m·k + Tm·k·n          (each A row block is read once per column block, ...)
    writes = m·n
    footprint = bm'·bn' + bk'·(bm' + bn')     (bm' = min(bm, m), bn' = min(bn, n), bk' = min(bk, k))

Lower bound.  COSMA (arXiv 1908.09606) Theorem 1: any schedule of standard matmul that writes C
moves at least ``2mnk/√M + mn`` words.  This schedule meets it with no slack:
``reads ≥ mk·n/bn + kn·m/bm ≥ 2mnk/√(bm·bn) ≥ 2mnk/√M`` because bm·bn < M (AM–GM), and
``writes = mn``.  With the outer-product tiles the ratio tends to √M/a ≈ 1 + 1/√M; the tests hold
the best tile choice to ≤ 2× of the bound for M ≥ 64 on shapes where m, n ≥ √M (when m or n is
smaller than √M the bound's first term is below the cost of reading A and B once, the floor
mk + kn + mn, and the right comparison is with that floor; the tests check ≤ 2× of
max(bound, floor) there).  The square rule (3b² ≤ M) tends to √3 ≈ 1.73 (its b ≈ √(M/3)):
A and B tiles as large as C leave C only a third of the memory.  Measured ratios: docs/small_cache.md
(``python benchmarks/bench_small_cache.py --write`` regenerates them).

Its API mirrors an attention algorithm's (``candidate_tilings``, ``footprint``, ``min_M``,
``predicted_io``, ``default_tiling``, ``coerce_tiling``) on a :class:`MatmulShape` (or an
``(m, k, n)`` tuple), with :meth:`BlockedMatmul.schedule` taking A, B, C; it is not registered as an
attention algorithm.  :func:`run_matmul` is the entry point.

>>> r = run_matmul(shape=(64, 32, 48), M=300)
>>> (r.io.reads, r.io.writes) == (r.predicted.reads, r.predicted.writes)
True
>>> import numpy as np
>>> A, B = np.ones((5, 3)), np.ones((3, 4))
>>> bool((run_matmul(A, B, M=12).output == 3.0).all())
True
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from ..core.checks import check_choice, check_int
from ..core.errors import CapacityError, ParameterError
from ..core.memory import IOCount, IOStats, SlowArray, TwoLevelMemory
from ..core.progress import ProgressCallback
from ..core.resources import (
    FLOPS_PER_SECOND,
    STEP_SECONDS,
    Cost,
    Limits,
)
from ..core.workload import MAX_M, MAX_SIZE, cdiv

__all__ = [
    "ALGORITHM",
    "BlockedMatmul",
    "MatmulResult",
    "MatmulShape",
    "MatmulTiling",
    "cosma_bound",
    "estimate_matmul",
    "run_matmul",
]


@dataclass(frozen=True)
class MatmulShape:
    """C (m×n) = A (m×k) · B (k×n)."""

    m: int
    k: int
    n: int

    def __post_init__(self) -> None:
        for name in ("m", "k", "n"):
            object.__setattr__(self, name, check_int(name, getattr(self, name), minimum=1,
                                                     maximum=MAX_SIZE))

    @classmethod
    def coerce(cls, shape: Any) -> MatmulShape:
        if isinstance(shape, MatmulShape):
            return shape
        if isinstance(shape, Mapping):
            return cls(**shape)
        try:
            parts = tuple(shape)
        except TypeError:
            raise ParameterError(f"shape must be (m, k, n) or a MatmulShape, got {shape!r}",
                                 param="shape") from None
        if len(parts) != 3:
            raise ParameterError(f"shape must be (m, k, n) or a MatmulShape, got {shape!r}",
                                 param="shape")
        return cls(*parts)


@dataclass(frozen=True)
class MatmulTiling:
    """C tiles of bm×bn, reduction slices of bk."""

    bm: int
    bn: int
    bk: int


def cosma_bound(m: int, k: int, n: int, M: int) -> float:
    """COSMA (arXiv 1908.09606) Theorem 1: I/O ≥ 2mnk/√M + mn for standard matmul writing C."""
    return 2.0 * m * n * k / math.sqrt(M) + m * n


def _fp(bm: int, bn: int, bk: int) -> int:
    return bm * bn + bk * (bm + bn)


def _isqrt_floor(x: int) -> int:
    return math.isqrt(max(0, x))


class BlockedMatmul:
    """The output-stationary blocked matmul and its tile rules (see the module docstring)."""

    name = "matmul"
    summary = "blocked C = A·B, C tiles accumulated in fast memory and written once"
    Tiling = MatmulTiling

    # ------------------------------------------------------------------ tilings
    def footprint(self, shape: Any, tiling: MatmulTiling) -> int:
        s = MatmulShape.coerce(shape)
        return _fp(min(tiling.bm, s.m), min(tiling.bn, s.n), min(tiling.bk, s.k))

    def min_M(self, shape: Any = None) -> int:
        return _fp(1, 1, 1)

    def square_tiling(self, shape: Any, M: int) -> MatmulTiling:
        """bm = bn = bk = b with 3b² ≤ M (at least 1)."""
        b = max(1, _isqrt_floor(M // 3))
        return MatmulTiling(b, b, b)

    def outer_tiling(self, shape: Any, M: int) -> MatmulTiling:
        """COSMA's sequential tiles: bk = 1, bm = bn = a, a² + 2a ≤ M (a = ⌊√(M+1)⌋ − 1)."""
        a = max(1, _isqrt_floor(M + 1) - 1)
        return MatmulTiling(a, a, 1)

    def _fill_bk(self, s: MatmulShape, M: int, bm: int, bn: int) -> int:
        bm, bn = min(bm, s.m), min(bn, s.n)
        return max(1, min(s.k, (M - bm * bn) // (bm + bn)))

    def candidate_tilings(self, shape: Any, M: int) -> list[MatmulTiling]:
        s = MatmulShape.coerce(shape)
        out = []
        bm_max = min(s.m, max(1, (M - 1) // 2))  # bn = bk = 1
        bms = set()
        b = 1.0
        while b <= bm_max:
            bms.add(int(b))
            b *= 1.25
        bms.add(bm_max)
        for t in range(cdiv(s.m, bm_max), cdiv(s.m, bm_max) + 12):
            bms.add(cdiv(s.m, t))
        for bm in sorted(bms):
            if bm > bm_max:
                continue
            bn = min(s.n, (M - bm) // (bm + 1))  # bk = 1
            if bn < 1:
                continue
            bn = cdiv(s.n, cdiv(s.n, bn))  # the smallest bn with the same number of blocks
            bm2 = cdiv(s.m, cdiv(s.m, bm))
            out.append(MatmulTiling(bm2, bn, self._fill_bk(s, M, bm2, bn)))
        for rule in (self.square_tiling(s, M), self.outer_tiling(s, M)):
            if self.footprint(s, rule) <= M:
                out.append(rule)
        return out

    def steps(self, shape: Any, tiling: MatmulTiling) -> int:
        s = MatmulShape.coerce(shape)
        return cdiv(s.m, tiling.bm) * cdiv(s.n, tiling.bn) * cdiv(s.k, tiling.bk)

    def default_tiling(self, shape: Any, M: int) -> MatmulTiling:
        """The least closed form over the candidates; ties toward fewer steps."""
        s = MatmulShape.coerce(shape)
        M = self._check_M(M)
        fits = [t for t in self.candidate_tilings(s, M) if self.footprint(s, t) <= M]
        return min(fits, key=lambda t: (self.predict(s, t).total, self.steps(s, t)))

    def _check_M(self, M: int) -> int:
        M = check_int("M", M, minimum=1, maximum=MAX_M)
        if M < self.min_M():
            raise ParameterError(f"M={M} is too small for matmul: it needs M >= {self.min_M()} "
                                 "words", param="M")
        return M

    def coerce_tiling(self, shape: Any, M: int, tiling: Any = None) -> MatmulTiling:
        """None/"auto" (least closed form), "square", "outer"/"cosma", a MatmulTiling or a mapping."""
        s = MatmulShape.coerce(shape)
        M = self._check_M(M)
        if tiling is None or tiling == "auto":
            return self.default_tiling(s, M)
        if tiling == "square":
            tiling = self.square_tiling(s, M)
        elif tiling in ("outer", "cosma"):
            tiling = self.outer_tiling(s, M)
        elif isinstance(tiling, str):
            raise ParameterError(
                f"tiling for matmul must be 'auto', 'square', 'outer' (or 'cosma'), a MatmulTiling "
                f"or a mapping with bm, bn, bk; got {tiling!r}", param="tiling")
        elif isinstance(tiling, Mapping):
            names = {f.name for f in dataclasses.fields(MatmulTiling)}
            if set(tiling) != names:
                raise ParameterError(f"tiling for matmul needs exactly the fields {sorted(names)}, "
                                     f"got {sorted(tiling)}", param="tiling")
            tiling = MatmulTiling(**tiling)
        if not isinstance(tiling, MatmulTiling):
            raise ParameterError("tiling for matmul must be a MatmulTiling, a mapping or a rule "
                                 "name", param="tiling")
        for f in ("bm", "bn", "bk"):
            check_int(f"tiling.{f}", getattr(tiling, f), minimum=1, maximum=MAX_SIZE)
        need = self.footprint(s, tiling)
        if need > M:
            raise CapacityError(f"matmul with tiling {tiling}", 0, need, M)
        return tiling

    # ------------------------------------------------------------------ counts
    def predict(self, shape: Any, tiling: MatmulTiling) -> IOCount:
        """The closed form for a tiling (not validated: see :meth:`predicted_io`)."""
        s = MatmulShape.coerce(shape)
        Tm, Tn = cdiv(s.m, tiling.bm), cdiv(s.n, tiling.bn)
        return IOCount(reads=Tn * s.m * s.k + Tm * s.k * s.n, writes=s.m * s.n)

    def predicted_io(self, shape: Any, M: int, *, tiling: Any = None) -> IOCount:
        """The closed-form count, exactly as the simulator counts it."""
        s = MatmulShape.coerce(shape)
        return self.predict(s, self.coerce_tiling(s, M, tiling))

    # ------------------------------------------------------------------ schedules
    def schedule(self, mem: TwoLevelMemory, A: SlowArray, B: SlowArray, C: SlowArray, *,
                 shape: Any, tiling: MatmulTiling) -> None:
        """C = A·B through ``mem`` (output-stationary; see the module docstring)."""
        s = MatmulShape.coerce(shape)
        for ib in mem.blocks(s.m, tiling.bm):
            for jb in mem.blocks(s.n, tiling.bn):
                Ct = mem.alloc((ib.size, jb.size), 0.0, label="C_ij")
                mem.accumulate_products(Ct, A, B, (ib, jb), mem.blocks(s.k, tiling.bk),
                                        labels=("A_il", "B_lj"))
                mem.store(Ct, C, ib, jb)
                mem.free(Ct)


ALGORITHM = BlockedMatmul()


@dataclass(frozen=True)
class MatmulResult:
    """What :func:`run_matmul` returns (the matmul analogue of :class:`attnio.Result`)."""

    algorithm: str
    shape: MatmulShape
    M: int
    tiling: MatmulTiling
    io: IOStats
    predicted: IOCount
    bound: float
    output: np.ndarray | None = None
    mode: str = "compute"

    @property
    def ratio(self) -> float:
        """Measured total I/O over the COSMA bound 2mnk/√M + mn."""
        return self.io.total / self.bound


def _as_matrix(name: str, x: Any) -> np.ndarray:
    a = np.asarray(x)
    if a.ndim != 2 or a.shape[0] < 1 or a.shape[1] < 1:
        raise ParameterError(f"{name} must be a non-empty 2-D array, got shape {a.shape}",
                             param=name)
    if not np.issubdtype(a.dtype, np.floating):
        raise ParameterError(f"{name} must have a floating dtype, got {a.dtype}", param=name)
    if not np.isfinite(a).all():
        raise ParameterError(f"{name} has a non-finite entry; entries must be finite", param=name)
    return a


def estimate_matmul(shape: Any, M: int, *, tiling: Any = None, mode: str = "compute",
                    inputs: bool = False) -> Cost:
    """Memory and time :func:`run_matmul` would spend (``inputs=True``: A and B too, and the
    reference A @ B), from closed forms; nothing is allocated."""
    s = MatmulShape.coerce(shape)
    if mode == "count":
        return Cost(0, 0.0, "count mode")
    t = ALGORITHM.coerce_tiling(s, M, tiling)
    words = 2 * (s.m * s.k + s.k * s.n) + 2 * s.m * s.n + 2 * M  # slow copies, C, output
    flops = 2 * s.m * s.k * s.n
    seconds = flops / FLOPS_PER_SECOND + ALGORITHM.steps(s, t) * STEP_SECONDS
    what = "the simulator's slow memory"
    if inputs:
        words += s.m * s.k + s.k * s.n + s.m * s.n
        seconds += flops / FLOPS_PER_SECOND
        what = "A, B, A @ B and the simulator's slow memory"
    return Cost(8 * words, seconds, what)


def run_matmul(A: Any = None, B: Any = None, *, M: int, shape: Any = None, tiling: Any = None,
               limits: Limits | None = None, bulk: bool = True,
               progress: ProgressCallback | None = None) -> MatmulResult:
    """C = A·B on a simulated fast memory of ``M`` words.

    Pass ``A`` (m×k) and ``B`` (k×n) for compute mode (``output`` is C), or ``shape=(m, k, n)``
    for count mode (the counts depend on the sizes only).  ``tiling``: None/"auto", "square",
    "outer" (COSMA), a :class:`MatmulTiling` or a mapping ``{"bm":, "bn":, "bk":}``.  As
    :func:`attnio.run`, under ``limits`` (a :class:`~attnio.core.resources.Limits`; default
    ``Limits()``): more memory than ``max_memory`` (default: what the machine has available) is
    refused before allocating, and so is a compute-mode run estimated to take more than
    ``budget_s`` seconds unless ``force``.  ``bulk=False`` counts alike blocks one by one (the
    same counts); ``progress(steps, total)`` reports the tile steps.
    """
    M = check_int("M", M, minimum=1, maximum=MAX_M)
    if limits is None:
        limits = Limits()
    elif not isinstance(limits, Limits):
        raise ParameterError(f"limits must be an attnio.core.resources.Limits, got "
                             f"{type(limits).__name__}", param="limits")
    mode: Literal["compute", "count"]
    if A is None and B is None:
        if shape is None:
            raise ParameterError("give A and B (compute mode) or shape=(m, k, n) for a count",
                                 param="shape")
        mode = "count"
        s = MatmulShape.coerce(shape)
        data = None
    else:
        if A is None or B is None:
            raise ParameterError("give both A and B (or neither, with shape=(m, k, n) for a "
                                 "count)", param="B")
        A, B = _as_matrix("A", A), _as_matrix("B", B)
        if A.shape[1] != B.shape[0]:
            raise ParameterError(f"A's columns must equal B's rows, got A {A.shape} and B {B.shape}", param="B")
        s = MatmulShape(A.shape[0], A.shape[1], B.shape[1])
        if shape is not None and MatmulShape.coerce(shape) != s:
            raise ParameterError(f"shape={shape!r} does not match the inputs' shape {s}", param="shape")
        mode = "compute"
        data = (A, B)
    t = ALGORITHM.coerce_tiling(s, M, tiling)
    limits.check(estimate_matmul(s, M, tiling=t, mode=mode), subject=f"{mode} mode on m={s.m} "
                 f"k={s.k} n={s.n}", timed=mode == "compute",
                 instead="count without A and B (shape=(m, k, n): same counts), or smaller m, k "
                         "and n (sizes)")
    dtype = np.float64 if data is None else np.result_type(np.float32, A.dtype, B.dtype)
    mem = TwoLevelMemory(M, mode=mode, bulk=bulk,
                         dtype=dtype, progress=progress,
                         progress_total=ALGORITHM.steps(s, t) if progress else 0)
    if data is not None:
        Ah, Bh = mem.slow("A", A.shape, A), mem.slow("B", B.shape, B)
    else:
        Ah, Bh = mem.slow("A", (s.m, s.k)), mem.slow("B", (s.k, s.n))
    Ch = mem.slow("C", (s.m, s.n))
    ALGORITHM.schedule(mem, Ah, Bh, Ch, shape=s, tiling=t)
    out = mem.contents(Ch) if mode == "compute" else None
    return MatmulResult("matmul", s, M, t, mem.stats(), ALGORITHM.predict(s, t),
                        cosma_bound(s.m, s.k, s.n, M), out, mode)


@dataclass(frozen=True)
class MatmulCheck:
    """What :func:`matmul_check` returns: the run and, in compute mode, ``max_abs_err`` =
    max |C - A @ B| against numpy's float64 product (None in count mode)."""

    result: MatmulResult
    max_abs_err: float | None


def matmul_check(shape: Any, M: int, *, tiling: Any = None, mode: str = "compute",
                 seed: int = 0, limits: Limits | None = None,
                 progress: ProgressCallback | None = None) -> MatmulCheck:
    """C = A·B for ``shape`` = (m, k, n) on random standard-normal A and B drawn from ``seed``
    (``attnio run matmul``), checked against A @ B; ``mode="count"``: the counts only, no data.
    The memory (A, B and the reference too) and time are estimated and refused under ``limits``
    before anything is drawn (:meth:`~attnio.core.resources.Limits.check`)."""
    s = MatmulShape.coerce(shape)
    if limits is None:
        limits = Limits()
    check_choice("mode", mode, ("compute", "count"))
    limits.check(estimate_matmul(s, M, tiling=tiling, mode=mode, inputs=True),
                 subject=f"{mode} mode on m={s.m} k={s.k} n={s.n}", timed=mode == "compute",
                 instead="count mode (same counts), or smaller m, k and n")
    if mode == "count":
        return MatmulCheck(run_matmul(shape=s, M=M, tiling=tiling), None)
    rng = np.random.default_rng(seed)
    A = rng.standard_normal((s.m, s.k))
    B = rng.standard_normal((s.k, s.n))
    res = run_matmul(A, B, M=M, tiling=tiling, limits=limits, progress=progress)
    assert res.output is not None  # compute mode returns the product
    return MatmulCheck(res, float(np.abs(res.output - A @ B).max()))
