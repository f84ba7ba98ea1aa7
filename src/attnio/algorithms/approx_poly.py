"""``approx_poly``: the polynomial method (Alman & Song, arXiv 2302.13214), streamed.

Approximate ``exp(s)`` on the score range [-R, R] by a polynomial P of degree g with proven
relative error ``delta <= eps`` (:mod:`attnio.approx.poly`), factor ``P(s<q,k>) = <phi(q), psi(k)>``
through ``r = C(d+g, g)`` monomial features (:mod:`attnio.approx.features`), and compute::

    O = diag(U1 z)^-1 U1 W,    W = U2^T V (r x d),  z = U2^T 1 (r),  U1 = phi(Q), U2 = psi(K)

without ever forming an n x n matrix.  Output error: ``|O - O_exact| <= delta/(1-delta) * range``
of each column of V (derived in :func:`attnio.approx.poly.output_error_factor`).

Schedule (non-causal), features split into ``nb = ceil(r / rb)`` blocks of at most rb::

    for each feature block b:                                  # r-blocking when r(d+1) > M
        W_b = 0 (rb x d), z_b = 0 (rb) in fast memory
        for each K/V block j (Bn rows):  load K_j, V_j;  U2 = psi_b(K_j);  W_b += U2^T V_j;  z_b += U2^T 1
        for each Q block i (Bn rows):
            load Q_i;  U1 = phi_b(Q_i)
            num = (b > 0 ? load O_i : 0) + U1 W_b;   den = (b > 0 ? load D_i : 0) + U1 z_b
            b < nb-1:  write num -> O_i, den -> D_i        (partial sums, D a scratch array)
            b = nb-1:  write num / den -> O_i

Causal (bottom-right aligned, query i sees keys j <= i + Nkv - Nq): the linear-attention
recurrence with prefix sums.  Keys [0, Nkv - Nq) (if any) are folded into W_b, z_b first; then
for each query block [a, b) the keys [a + off, b + off) (clipped) are loaded once, the in-block
part is done with the masked Bn x Bn kernel tile ``S = (U1 U2^T) o mask`` and the earlier keys
through the prefix sums: ``num = U1 W_b + S V,  den = U1 z_b + S 1``, then ``W_b += U2^T V``,
``z_b += U2^T 1``.  Every K/V row is loaded once per feature block; query blocks that see no key
load nothing and write zeros.

Closed form.  With ``Qv`` the number of query rows in blocks that see at least one key (= Nq
without a mask) and ``Kv`` the keys some query sees (``Nkv``, or ``min(Nkv, Nq)`` top-left
aligned: the keys after the last query's diagonal are never loaded)::

    reads  = nb (2 Kv d + Qv d) + (nb - 1) Qv (d + 1)
    writes = (nb - 1) Qv (d + 1) + Nq d

For nb = 1 (``r (d+1)`` plus the tiles fit in M) this is ``2 (Nq + Nkv) d``, exactly the
trivial lower bound: I/O linear in n.  Fast memory (rb, Bn clamped to r and the row counts)::

    non-causal:  rb (d+1) + max(Bk (2d + rb), Bq (2d + rb + 1))
    causal:      rb (d+1) + max(Bk (2d + rb), Bq (4d + 2 rb + 1) + Bq^2)

Tiling choice: the fewest feature blocks (rb as large as fits with Bn = 1, then balanced), then
the largest Bn that still fits (fewer steps at equal I/O; for causal Nq > Nkv a few Bn are scored).

Parameters live in :class:`ApproxPolyTiling`: ``eps`` (relative error of P), ``entry_bound`` B
(``|Q|, |K| <= B``, R = |scale| B^2 d) or ``radius`` R directly, ``variant``, ``degree`` (None:
the least that meets eps), ``Bn``, ``rb``, ``scale`` (None: 1/sqrt(d); it must match the run's
scale because R depends on it) and ``allow_unbounded``.  Resolved tilings also carry ``r``,
``kernel_error`` (delta) and expose ``guaranteed_error`` = delta/(1-delta).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..approx.features import FeatureMap, feature_dim
from ..approx.poly import VARIANTS, check_eps, output_error_factor, polynomial
from ..approx.radius import check_entries, check_radius, score_radius
from ..core import masks
from ..core.checks import check_bool, check_real
from ..core.errors import CapacityError, ParameterError
from ..core.memory import Block, FastTile, IOCount, SlowArray, TwoLevelMemory
from ..core.workload import MAX_SIZE, Shape, cdiv, kv_visible_hi
from . import mapper
from .base import Algorithm, default_scale, largest_true
from .common import HeadGroup
from .protocol import Cost, Field, Mapspace

__all__ = ["ALGORITHM", "ApproxPoly", "ApproxPolyTiling", "approx_tilings", "predicted_io"]


@dataclass(frozen=True)
class ApproxPolyTiling:
    """Parameters of ``approx_poly``; ``r``, ``kernel_error`` and ``radius`` are filled in."""

    eps: float = 1e-3
    entry_bound: float | None = None
    variant: str = "chebyshev"
    degree: int | None = None
    Bn: int | None = None
    rb: int | None = None
    scale: float | None = None
    allow_unbounded: bool = False
    radius: float | None = None
    r: int | None = None
    kernel_error: float | None = None
    #: the score range was measured from the data: the schedule pays a counted pass over Q and K
    radius_pass: bool = False

    @property
    def r_blocks(self) -> int:
        """Number of feature blocks nb = ceil(r / rb) (passes over K, V and Q)."""
        assert self.r is not None and self.rb is not None, "a resolved tiling (coerce_tiling)"
        return cdiv(self.r, self.rb)

    @property
    def guaranteed_error(self) -> float:
        """delta/(1-delta): |O - O_exact| <= this * (max - min) of each column of V."""
        assert self.kernel_error is not None, "a resolved tiling (coerce_tiling)"
        return output_error_factor(self.kernel_error)

    def describe(self) -> str:
        """The resolved approximation in words: the polynomial's degree and variant, the
        features r, the score range R and the kernel's error (``attnio run``'s approx line)."""
        assert self.r is not None and self.radius is not None and self.kernel_error is not None, \
            "a resolved tiling (coerce_tiling)"
        return (f"degree {self.degree} ({self.variant}), r = {self.r:,}, R = {self.radius:.4g}, "
                f"kernel error <= {self.kernel_error:.3g}")

    def error_bound_for(self, V: object) -> float:
        """The guaranteed max |O - O_exact| for these values V (Nkv x d)."""
        V = np.asarray(V, dtype=np.float64)  # (..., Nkv, d): the range of each column, per head
        return self.guaranteed_error * float(np.max(V.max(axis=-2) - V.min(axis=-2)))


def _fp(d: int, rb: int, Bq: int, Bk: int, causal: bool) -> int:
    if causal:
        return rb * (d + 1) + max(Bk * (2 * d + rb), Bq * (4 * d + 2 * rb + 1) + Bq * Bq)
    return rb * (d + 1) + max(Bk * (2 * d + rb), Bq * (2 * d + rb + 1))


def _visible_rows(shape: Shape, Bq: int) -> int:
    """Rows of the Bq-row blocks whose last row sees a key (no window), in O(log N)."""
    return masks.covered_sums(shape.Nq, shape.Nkv, Bq, 1, shape.offset, shape.causal).size_seen


def _check_accumulators(shape: Shape, t: ApproxPolyTiling, inputs: Any) -> None:
    """Refuse V whose entries can overflow the feature accumulators (issue 24: V near 1e307).

    The sums U2^T V and U1 (U2^T V) add, before their terms cancel, at most
    Nkv * sum_j |a_j| R'^j * max |V| in magnitude (the monomial features of q and k multiply to
    at most (scale * |q| |k|)^j <= R'^j in absolute value, R' the measured score radius): when
    that exceeds the largest float of the arithmetic, the output could be infinite although the
    attention it approximates is finite, so the run is refused naming V.
    """
    Q, Kx, V = (np.asarray(x) for x in inputs[:3])
    vmax = float(np.abs(V).max()) if V.size else 0.0
    if vmax == 0.0:
        return
    dtype = np.result_type(np.float32, Q.dtype, Kx.dtype, V.dtype)
    nq = float(np.sqrt((Q.astype(np.float64) ** 2).sum(axis=-1)).max())
    nk = float(np.sqrt((Kx.astype(np.float64) ** 2).sum(axis=-1)).max())
    assert t.scale is not None and t.radius is not None  # a resolved tiling
    R = max(float(t.radius), score_radius(shape.d, t.scale, max_norm_q=nq, max_norm_k=nk))
    p = polynomial(t.eps, float(t.radius), t.variant, t.degree)
    kernel = sum(abs(a) * R ** j for j, a in enumerate(p.coefficients))
    worst = float(shape.Nkv) * kernel * vmax
    limit = float(np.finfo(dtype).max) / 4
    if not worst < limit:
        size = f"{worst:.3g}" if np.isfinite(worst) else "beyond the largest float"
        raise ParameterError(
            f"V: entries up to {vmax:.3g} can overflow approx_poly's {dtype} accumulators "
            f"(Nkv x polynomial kernel bound x max|V| = {size}, more than {limit:.3g}); scale V "
            "down (the output scales with it) or use an exact algorithm", param="V")


class ApproxPoly(Algorithm[ApproxPolyTiling]):
    name = "approx_poly"
    summary = "polynomial method (Alman-Song): O = D^-1 phi(Q) (psi(K)^T V), streamed; approximate"
    exact = False
    Tiling = ApproxPolyTiling
    #: The declared schema: what a user gives (eps, entry_bound or radius, variant, degree,
    #: blocks, scale) and what the schedule fills in (r, kernel_error, radius_pass).
    fields = (
        Field("eps", "float", 0.0, 1.0, doc="error target (relative, of the kernel), in (0, 1)"),
        Field("entry_bound", "float", 0.0, None, True, doc="|Q|, |K| entries <= B (> 0)"),
        Field("variant", "str", choices=VARIANTS, doc="the polynomial: Chebyshev or Taylor"),
        Field("degree", "int", 1, MAX_SIZE, True, doc="the polynomial's degree (None: from eps)"),
        Field("Bn", "int", 1, MAX_SIZE, True, doc="rows of Q and K a block"),
        Field("rb", "int", 1, MAX_SIZE, True, doc="features a block"),
        Field("scale", "float", None, None, True, doc="score scale (None: 1/sqrt(d))"),
        Field("allow_unbounded", "bool", doc="run on entries beyond the bound"),
        Field("radius", "float", 0.0, None, True, doc="score range R (>= 0; None: from B)"),
        Field("r", "int", 1, MAX_SIZE, True, doc="feature dimension C(d + g, g), filled in"),
        Field("kernel_error", "float", 0.0, None, True, doc="the polynomial's error, filled in"),
        Field("radius_pass", "bool", doc="R measured from the data: one counted pass over Q, K"),
    )

    # ------------------------------------------------------------ tilings
    def estimate_tiling(self, tiling: Any, entry_bound: float | None) -> Any:
        """A user tiling (None or a mapping) without an entry bound or a radius gets the bound
        the inputs will be drawn with (``entry_bound``; None, or read from a file: 1), since the
        polynomial's degree, and so the count, depends on it."""
        if not (tiling is None or isinstance(tiling, Mapping)):
            return tiling
        t = dict(tiling or {})
        if "entry_bound" not in t and "radius" not in t:
            t["entry_bound"] = 1.0 if entry_bound is None else entry_bound
        return t

    def count_needs(self, tiling: Any) -> str | None:
        """``"entry_bound"`` unless ``tiling`` gives the entry bound B or a radius R: with no
        inputs to measure, the polynomial's range comes from one of them."""
        if isinstance(tiling, Mapping):
            given = "entry_bound" in tiling or "radius" in tiling
        else:
            given = isinstance(tiling, ApproxPolyTiling) and (
                tiling.entry_bound is not None or tiling.radius is not None)
        return None if given else "entry_bound"

    def _clamp(self, shape: Shape, t: ApproxPolyTiling) -> tuple[int, int, int]:
        assert t.rb is not None and t.r is not None and t.Bn is not None, "a resolved tiling"
        return min(t.rb, t.r), min(t.Bn, shape.Nq), min(t.Bn, shape.Nkv)

    def footprint(self, shape: Shape, tiling: ApproxPolyTiling) -> int:
        rb, Bq, Bk = self._clamp(shape, tiling)
        return _fp(shape.d, rb, Bq, Bk, shape.causal)

    def min_M(self, shape: Shape) -> int:
        return _fp(shape.d, 1, 1, 1, shape.causal)

    def steps(self, shape: Shape, tiling: ApproxPolyTiling) -> int:
        assert tiling.Bn is not None, "a resolved tiling"
        return tiling.r_blocks * (cdiv(shape.Nq, tiling.Bn) + cdiv(shape.Nkv, tiling.Bn))

    def _resolve(self, shape: Shape, t: ApproxPolyTiling, inputs: Any) -> ApproxPolyTiling:
        """Fill in scale, radius, degree, r and kernel_error (checking the preconditions)."""
        d = shape.d
        eps = check_eps(t.eps)
        check_bool("allow_unbounded", t.allow_unbounded)
        s = default_scale(d, t.scale)
        B, R = t.entry_bound, t.radius
        if R is not None:
            R = check_real("radius", R, lo=0)
        if inputs is not None:
            Q = np.asarray(inputs[0], dtype=np.float64)
            Kx = np.asarray(inputs[1], dtype=np.float64)
            aq, ak = float(np.abs(Q).max()), float(np.abs(Kx).max())
            nq = float(np.sqrt((Q * Q).sum(axis=-1)).max())
            nk = float(np.sqrt((Kx * Kx).sum(axis=-1)).max())
            data_R = score_radius(d, s, max_norm_q=nq, max_norm_k=nk)
            if B is not None:
                check_entries(aq, ak, B, t.allow_unbounded)
            if R is not None:
                check_radius(data_R, R, t.allow_unbounded)
            measured = R is None and B is None  # the degree then depends on a pass over Q, K
            if R is None:
                R = score_radius(d, s, B) if B is not None else data_R
            if B is None:
                B = max(aq, ak)
            if measured:
                t = dataclasses.replace(t, radius_pass=True)
        elif R is None:
            if B is None:
                raise ParameterError.worded(
                    "approx_poly in count mode (no inputs) needs the entry bound B (|Q|, |K| "
                    "entries <= B): give {entry_bound} (or a radius R in the tiling)",
                    param="entry_bound", entry_bound="tiling={'entry_bound': B}")
            R = score_radius(d, s, B)
        p = polynomial(eps, R, t.variant, t.degree)
        return dataclasses.replace(
            t, eps=eps, scale=s, entry_bound=None if B is None else float(B), radius=float(R),
            degree=p.degree, r=feature_dim(d, p.degree), kernel_error=p.bound,
        )

    def _best_blocks(self, shape: Shape, M: int, r: int) -> list[tuple[int, int]]:
        d, causal = shape.d, shape.causal
        if _fp(d, 1, 1, 1, causal) > M:
            return []
        lo = largest_true(lambda rb: _fp(d, rb, 1, 1, causal) <= M, 1, r)  # largest rb, Bn = 1
        nb = cdiv(r, lo)
        rb = cdiv(r, nb)
        nmax = max(shape.Nq, shape.Nkv)

        def fits(bn: int) -> bool:
            return _fp(d, rb, min(bn, shape.Nq), min(bn, shape.Nkv), causal) <= M

        lo = largest_true(fits, 1, nmax)
        bns = {lo}
        if causal and shape.Nq > shape.Nkv:
            b = 1
            while b < lo:
                bns.add(b)
                b *= 2
        return [(rb, bn) for bn in sorted(bns)]

    def _with_blocks(self, shape: Shape, M: int, t: ApproxPolyTiling) -> ApproxPolyTiling:
        if t.rb is None or t.Bn is None:
            assert t.r is not None
            found = mapper.search(self, shape, M, [
                dataclasses.replace(t, rb=t.rb or rb, Bn=t.Bn or bn) for rb, bn in self._best_blocks(shape, M, t.r)])
            if found is None:
                if t.rb is not None or t.Bn is not None:  # a user block size that cannot fit
                    c = dataclasses.replace(t, rb=t.rb or 1, Bn=t.Bn or 1)
                    raise CapacityError(f"{self.name} with tiling {c}", 0,
                                        self.footprint(shape, c), M)
                mapper.check_M(self, shape, M)
                raise ParameterError(f"{self.name}: no tiling fits in M={M}", param="M")
            t = found.tiling
        return t

    def validate_tiling(self, shape: Shape, tiling: ApproxPolyTiling) -> None:
        super().validate_tiling(shape, tiling)  # Bn, rb, degree, r: optional sizes, by the schema

    def coerce_tiling(self, shape: Shape, M: int, tiling: Any = None,
                      inputs: Any = None) -> ApproxPolyTiling:
        if tiling is None or tiling == "auto":
            tiling = ApproxPolyTiling()
        elif isinstance(tiling, Mapping):
            tiling = self._tiling_from_mapping(tiling, required=False)
        if not isinstance(tiling, ApproxPolyTiling):
            raise ParameterError(f"tiling for {self.name} must be an ApproxPolyTiling or a "
                                 f"mapping of its fields {self._tiling_fields()}", param="tiling")
        self.validate_tiling(shape, tiling)
        t = self._resolve(shape, tiling, inputs)
        if inputs is not None:
            _check_accumulators(shape, t, inputs)
        t = self._with_blocks(shape, M, t)
        self._check_fits(shape, M, t)
        return t

    def candidate_tilings(self, shape: Shape, M: int, *, eps: float = 1e-3,
                          entry_bound: float | None = None,
                          radius: float | None = None) -> list[ApproxPolyTiling]:
        """Resolved tilings (both variants) for an entry bound (or radius); [] if none fits."""
        out = []
        for variant in ("chebyshev", "taylor"):
            base = self._resolve(shape, ApproxPolyTiling(eps=eps, entry_bound=entry_bound,
                                                         radius=radius, variant=variant), None)
            assert base.r is not None
            for rb, bn in self._best_blocks(shape, M, base.r):
                out.append(dataclasses.replace(base, rb=rb, Bn=bn))
        return out

    def mapspace(self, shape: Shape, M: int, **options: Any) -> Mapspace[ApproxPolyTiling]:
        """The base class's, and with an error target (``options``): an error target it cannot
        meet (no degree reaches ``eps`` on the score range; no entry bound or radius to bound
        that range in count mode) is why it cannot run (``<error type>: <its first line>``),
        the candidates then made once."""
        space = super().mapspace(shape, M, **options)
        if space.unsupported is not None or not options:
            return space
        try:
            tilings = self.mapspace_tilings(shape, M, **options)
        except (ParameterError, CapacityError) as e:
            return dataclasses.replace(
                space, unsupported=f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
        return dataclasses.replace(space, _tilings=lambda: tilings)

    def mapspace_tilings(self, shape: Shape, M: int, *, eps: float | None = None,
                         entry_bound: float | None = None, **options: Any
                         ) -> list[ApproxPolyTiling]:
        """The mapspace's candidates: approximate attention is searched only for an error
        target ``eps`` (and an entry bound or a radius)."""
        if options:
            raise ParameterError(f"{self.name} takes eps and entry_bound, got {sorted(options)}")
        if eps is None:
            raise ParameterError("approximate: give an error target eps", param="eps")
        return self.candidate_tilings(shape, M, eps=eps, entry_bound=entry_bound)

    def cost(self, shape: Shape, tiling: ApproxPolyTiling, *, lse: bool = False) -> Cost:
        """The closed form, with the guaranteed error factor and the feature dimension r."""
        c = super().cost(shape, tiling, lse=lse)
        return dataclasses.replace(c, error=tiling.guaranteed_error, features=tiling.r)

    def default_tiling(self, shape: Any, M: int, causal: object = None) -> ApproxPolyTiling:
        return self.coerce_tiling(Shape.coerce(shape).with_mask(causal), M, None)

    def feature_map(self, shape: Shape, tiling: ApproxPolyTiling) -> FeatureMap:
        assert tiling.radius is not None and tiling.scale is not None, "a resolved tiling"
        p = polynomial(tiling.eps, tiling.radius, tiling.variant, tiling.degree)
        return FeatureMap(shape.d, p.degree, p.coefficients, float(tiling.scale))

    def regime(self, shape: Shape, M: int, tiling: ApproxPolyTiling) -> str:
        """A one-line description of which regime the tiling is in (derived; docs/approximate.md)."""
        nb = tiling.r_blocks
        assert tiling.r is not None  # r_blocks checked it
        if nb == 1:
            return (f"one pass: W, z (r(d+1) = {tiling.r * (shape.d + 1):,} words) fit in M = {M:,}; "
                    "I/O = 2(Nq + Nkv)d, the trivial lower bound")
        return (f"r-blocked: r(d+1) = {tiling.r * (shape.d + 1):,} > M = {M:,}, {nb} passes over "
                "K, V, Q with partial sums of O and D in slow memory")

    # ------------------------------------------------------------ counts
    def _predict(self, shape: Shape, tiling: ApproxPolyTiling) -> IOCount:
        d, nb = shape.d, tiling.r_blocks
        assert tiling.Bn is not None
        Qv = _visible_rows(shape, min(tiling.Bn, shape.Nq))
        keys = kv_visible_hi(shape, shape.Nq)  # keys some row sees (top-left, Nq < Nkv: Nq)
        reads = nb * (2 * keys * d + Qv * d) + (nb - 1) * Qv * (d + 1)
        if tiling.radius_pass:  # measuring max|q|, max|k| and the row norms: Q and K once
            reads += (shape.Nq + shape.Nkv) * d
        writes = (nb - 1) * Qv * (d + 1) + shape.Nq * d
        return IOCount(reads=reads, writes=writes)

    # ------------------------------------------------------------ schedule
    def schedule(self, mem: TwoLevelMemory, Q: SlowArray, K: SlowArray, V: SlowArray,
                 O: SlowArray, *, shape: Shape, tiling: ApproxPolyTiling, scale: float) -> None:
        if tiling.scale is None or abs(scale - tiling.scale) > 1e-12 * max(1.0, abs(scale)):
            raise ParameterError(
                f"scale={scale!r} but this approx_poly tiling was planned for scale={tiling.scale!r} "
                "(the score range R depends on it); pass tiling={'scale': ...} with the same value"
            )
        fm = self.feature_map(shape, tiling) if mem.computing else None
        d, r, nb = shape.d, tiling.r, tiling.r_blocks
        rb, Bn = tiling.rb, tiling.Bn
        assert r is not None and rb is not None and Bn is not None, "a resolved tiling"
        if tiling.radius_pass:  # the pass that measured the score range R (see _resolve)
            for X, n in ((Q, shape.Nq), (K, shape.Nkv)):
                for b in mem.blocks(n, Bn):
                    mem.free(mem.load(X, b, label="radius"))
        D = mem.slow(f"D_partial({O.name})", (shape.Nq,)) if nb > 1 else None
        for fb in mem.blocks(r, rb, uniform=False):
            ctx = _Pass(mem, fm, fb.start, fb.stop, fb.index == 0, fb.index == nb - 1, D)
            W = mem.alloc((fb.size, d), 0.0, label="W_b")
            z = mem.alloc((fb.size,), 0.0, label="z_b")
            if shape.causal:
                self._causal_pass(ctx, HeadGroup.one(Q, K, V, O), (W, z), shape, tiling)
            else:
                for kb in mem.blocks(shape.Nkv, Bn):
                    ctx.absorb(K, V, kb.slice, W, z)
                for qb in mem.blocks(shape.Nq, Bn):
                    ctx.emit(Q, O, qb.slice, W, z)
            mem.free(W, z)

    def _causal_pass(self, ctx: _Pass, heads: HeadGroup, sums: tuple[FastTile, FastTile],
                     shape: Shape, tiling: ApproxPolyTiling) -> None:
        """One feature block's pass under the causal mask: the keys every query sees absorbed
        into the running sums ``sums`` (W, z), then each query block emitted with its own
        keys."""
        Q, K, V, O = heads.Qs[0], heads.K, heads.V, heads.Os[0]
        W, z = sums
        mem, off, Bn = ctx.mem, shape.offset, tiling.Bn
        assert Bn is not None, "a resolved tiling"
        if off > 0:  # keys every query sees
            for kb in mem.blocks(off, Bn):
                ctx.absorb(K, V, kb.slice, W, z)
        for qb in _alike_blocks(mem, shape, Bn):
            hi = kv_visible_hi(shape, qb.stop)
            if hi == 0:  # no row of the block sees a key: output 0, written once
                if ctx.last:
                    Oi = mem.alloc((qb.size, shape.d), 0.0, label="O_i")
                    mem.store(Oi, O, qb)
                    mem.free(Oi)
                continue
            klo = max(0, qb.start + off)
            ctx.emit(Q, O, qb.slice, W, z, keys=(K, V, slice(klo, hi), qb.start, off))


def _alike_blocks(mem: TwoLevelMemory, shape: Shape, Bn: int) -> Iterator[Block]:
    """The query blocks of the causal pass, as runs whose bodies move the same words.

    A block's body depends on its position only through its in-block keys
    ``[max(0, r0 + off), clip(r1 + off, 0, Nkv))``; only the blocks holding row ``-off`` (where
    that range starts to be clipped at 0) or row ``Nkv - off`` (clipped at Nkv), and the short
    last block, differ from their neighbours.  Those are iterated one by one; the runs between
    them are uniform (one executed block each in bulk count mode).
    """
    Nq, off = shape.Nq, shape.offset
    nblk = cdiv(Nq, Bn)
    edges = {nblk - 1} if Nq % Bn else set()
    for x in (-off, shape.Nkv - off):
        if 0 <= x < Nq:
            edges.add(x // Bn)
    start = 0
    for e in sorted(edges) + [nblk]:
        if e > start:
            yield from mem.blocks(Nq, Bn, lo=start * Bn, hi=e * Bn)
        if e < nblk:
            yield from mem.blocks(Nq, Bn, lo=e * Bn, hi=min(Nq, (e + 1) * Bn), uniform=False)
        start = e + 1


class _Pass:
    """The tile steps of one feature block [lo, hi): absorb keys into (W, z), emit outputs."""

    def __init__(self, mem: TwoLevelMemory, fm: FeatureMap | None, lo: int, hi: int, first: bool,
                 last: bool, D: SlowArray | None) -> None:
        self.mem, self.fm, self.lo, self.hi = mem, fm, lo, hi
        self.first, self.last, self.D = first, last, D

    def _features(self, X: FastTile, key: bool) -> FastTile:
        mem, fm, lo, hi = self.mem, self.fm, self.lo, self.hi
        U = mem.alloc((X.shape[0], hi - lo), label="U2" if key else "U1")

        def f(u: np.ndarray, x: np.ndarray) -> None:
            assert fm is not None  # compute runs f only when computing, and then fm is made
            u[...] = fm.psi(x, lo, hi) if key else fm.phi(x, lo, hi)

        mem.compute(f, U, X, writes=1)
        return U

    def absorb(self, K: SlowArray, V: SlowArray, rows: slice, W: FastTile, z: FastTile) -> None:
        """W += psi(K_rows)^T V_rows;  z += psi(K_rows)^T 1."""
        mem = self.mem
        Kj = mem.load(K, rows, label="K_j")
        Vj = mem.load(V, rows, label="V_j")
        U = self._features(Kj, True)
        mem.free(Kj)
        mem.compute(_accumulate, W, z, U, Vj, writes=2)
        mem.free(U, Vj)

    def emit(self, Q: SlowArray, O: SlowArray, rows: slice, W: FastTile, z: FastTile,
             keys: tuple[SlowArray, SlowArray, slice, int, int] | None = None) -> None:
        mem = self.mem
        n = rows.stop - rows.start
        Qi = mem.load(Q, rows, label="Q_i")
        U1 = self._features(Qi, False)
        mem.free(Qi)
        if self.first:
            num = mem.alloc((n, W.shape[1]), 0.0, label="num")
            den = mem.alloc((n,), 0.0, label="den")
        else:
            assert self.D is not None  # a later feature block: nb > 1, so schedule made D
            num = mem.load(O, rows, label="num")
            den = mem.load(self.D, rows, label="den")
        mem.compute(_project, num, den, U1, W, z, writes=2)
        if keys is not None:  # causal: in-block keys through the masked kernel tile
            K, V, krows, r0, off = keys
            Kj = mem.load(K, krows, label="K_j")
            Vj = mem.load(V, krows, label="V_j")
            U2 = self._features(Kj, True)
            mem.free(Kj)
            S = mem.alloc((n, krows.stop - krows.start), label="S")
            c0 = krows.start
            mem.compute(lambda s, a, b: _masked_kernel(s, a, b, r0, c0, off), S, U1, U2, writes=1)
            mem.compute(_project_local, num, den, S, Vj, writes=2)
            mem.free(S)
            mem.compute(_accumulate, W, z, U2, Vj, writes=2)
            mem.free(U2, Vj)
        mem.free(U1)
        if self.last:
            mem.compute(_divide, num, den, writes=1)
            mem.store(num, O, rows)
        else:
            assert self.D is not None  # not the last feature block: nb > 1, so schedule made D
            mem.store(num, O, rows)
            mem.store(den, self.D, rows)
        mem.free(num, den)


def _accumulate(W: np.ndarray, z: np.ndarray, U: np.ndarray, V: np.ndarray) -> None:
    W += U.T @ V
    z += U.sum(axis=0)


def _project(num: np.ndarray, den: np.ndarray, U: np.ndarray, W: np.ndarray,
             z: np.ndarray) -> None:
    num += U @ W
    den += U @ z


def _masked_kernel(S: np.ndarray, U1: np.ndarray, U2: np.ndarray, r0: int, c0: int,
                   off: int) -> None:
    np.matmul(U1, U2.T, out=S)
    rows = np.arange(r0, r0 + S.shape[0])[:, None]
    cols = np.arange(c0, c0 + S.shape[1])[None, :]
    S[cols > rows + off] = 0.0


def _project_local(num: np.ndarray, den: np.ndarray, S: np.ndarray, V: np.ndarray) -> None:
    num += S @ V
    den += S.sum(axis=1)


def _divide(num: np.ndarray, den: np.ndarray) -> None:
    """num <- num / den; rows that saw no key (den = 0) stay 0."""
    safe = np.where(den != 0, den, 1.0)
    num /= safe[:, None]


ALGORITHM = ApproxPoly()


def approx_tilings(shape: Any, M: int, causal: object = None, eps: float = 1e-3,
                   entry_bound: float | None = None, *,
                   radius: float | None = None) -> list[ApproxPolyTiling]:
    """Resolved ``approx_poly`` tilings (each shows ``r``, ``kernel_error`` and
    ``guaranteed_error``); [] when none fits in M.  Needs ``entry_bound`` (or ``radius``)."""
    return ALGORITHM.candidate_tilings(Shape.coerce(shape).with_mask(causal), M, eps=eps,
                                       entry_bound=entry_bound, radius=radius)


def predicted_io(N: int, d: int, M: int, *, eps: float = 1e-3, entry_bound: float = 1.0,
                 causal: object = False, Nkv: int | None = None, **tiling: Any) -> IOCount:
    """Closed-form count of ``approx_poly`` for Nq = N (Nkv = N unless given)."""
    t = dict(eps=eps, entry_bound=entry_bound, **tiling)
    shape = Shape.make(N, d, Nkv=Nkv, causal=causal)
    return ALGORITHM.cost(shape, ALGORITHM.coerce_tiling(shape, M, t)).io
