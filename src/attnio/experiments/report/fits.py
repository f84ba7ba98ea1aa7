"""Scaling fits: least-squares log-log slopes of each series, with the read-once floor rule.

The read-once floor F = (Nq + 2·Nkv)·d + Nq·d (inputs read once, output written once) is linear
in N, so near it any count looks linear.  The exponents of exact algorithms are fitted on points
whose floor is below 10% of the total only (:data:`FLOOR_SHARE`); approximate attention, whose
count is meant to approach the floor, is fitted on all its points.

The claims' exponents hold only in the asymptotic range of each theorem, so a claim refits each
series on the points inside a stated range (:func:`restricted`, :data:`RANGES`):

* ``"N2"`` (I/O ∝ N² at fixed d, M): N >= 4·M/d.  Every exact count is a read-once term linear
  in N plus a quadratic term of order N²d²/M (or N²d/√M); the quadratic one dominates once
  N·d/M is large, and below N = M/d a cache of M words holds all of K and V.
* ``"flash_M"`` (FlashAttention's I/O ∝ 1/M): 4d² <= M <= N·d/4.  Above N·d/4 the cache holds
  a quarter of K and V and the count nears the linear read-once floor; below 4d² a block of
  M/(4d) rows is a handful of rows and the rounding of the block sizes is not negligible.
* ``"square_M"`` (square tiling's I/O ∝ 1/√M): M <= d²/4, where Saha & Ye's small-cache term
  N²d/√M is the smaller of the two.

A restricted series with fewer than :data:`MIN_POINTS` distinct values in range supports no
exponent: its claim reports it as not covered, never as failed.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from ...core.errors import ParameterError
from .rows import _ok_rows, _setting

__all__ = ["FLOOR_SHARE", "MIN_POINTS", "RANGES", "Fit", "fit_slope", "in_range", "restricted",
           "series_fits"]

FLOOR_SHARE = 0.10
MIN_POINTS = 3
#: the asymptotic ranges of the claims' exponents, by name: (words, the variable it restricts)
RANGES = {"N2": ("N >= 4·M/d", "N"), "flash_M": ("4d² <= M <= N·d/4", "M"),
          "square_M": ("M <= d²/4", "M")}


def fit_slope(x: Sequence[float], y: Sequence[float]) -> tuple[float, float]:
    """Least-squares slope and intercept of log y on log x."""
    lx, ly = np.log(np.asarray(x, float)), np.log(np.asarray(y, float))
    if len(lx) < 2 or np.ptp(lx) == 0:
        raise ParameterError(f"a slope needs >= 2 distinct x values, got {len(set(lx.tolist()))}")
    slope, icpt = np.polyfit(lx, ly, 1)
    return float(slope), float(icpt)


@dataclass
class Fit:
    """One series' fit: ``var`` is "N" or "M"; ``region`` "all", "M<d2" or "M>=d2"."""

    algorithm: str
    var: str
    region: str
    d: int
    N: int | None
    M: int | None
    causal: bool
    mode: str
    eps: float | None
    slope: float | None
    points: list[tuple[int, int]] = field(default_factory=list)   # (x, total) used in the fit
    excluded: int = 0                                              # points left out (floor)
    rule: str = ""
    setting: tuple = (None, None, 1, 1, 1)  # (mask alignment, window, batch, heads, kv_heads)

    @property
    def label(self) -> str:
        return f"{self.slope:+.2f}" if self.slope is not None else "n/a"


def in_range(rule: str, x: int, d: int, N: int | None = None, M: int | None = None) -> bool:
    """Whether a point at ``x`` (the series' variable) lies in the asymptotic range ``rule`` of
    :data:`RANGES`; ``N`` (M-series) or ``M`` (N-series) is the series' fixed size."""
    if rule == "N2":
        return M is not None and x * d >= 4 * M
    if rule == "flash_M":
        return N is not None and 4 * d * d <= x and 4 * x <= N * d
    if rule == "square_M":
        return 4 * x <= d * d
    raise ParameterError(f"rule must be one of {', '.join(RANGES)}, got {rule!r}")


def restricted(f: Fit, rule: str) -> Fit:
    """``f`` refitted on its points inside the asymptotic range ``rule`` of :data:`RANGES` (the
    floor rule still applied); ``slope`` is None when fewer than :data:`MIN_POINTS` distinct
    values remain."""
    if rule not in RANGES:
        raise ParameterError(f"rule must be one of {', '.join(RANGES)}, got {rule!r}")
    words, var = RANGES[rule]
    if f.var != var:
        raise ParameterError(f"rule {rule!r} restricts {var}-series, got an {f.var}-series")
    pts = [p for p in f.points if in_range(rule, p[0], f.d, f.N, f.M)]
    slope = None
    if len({p[0] for p in pts}) >= MIN_POINTS:
        slope = fit_slope([p[0] for p in pts], [p[1] for p in pts])[0]
    return replace(f, region=rule, slope=slope, points=pts,
                   excluded=f.excluded + len(f.points) - len(pts), rule=f"{f.rule}; {words}")


def _fit_points(rows: list[dict], var: str, exact: bool) -> tuple[list[tuple[int, int]], int]:
    pts, excluded = [], 0
    for r in sorted(rows, key=lambda r: r[var]):
        if exact and r.get("floor") is not None and r["floor"] >= FLOOR_SHARE * r["total"]:
            excluded += 1
            continue
        pts.append((r[var], r["total"]))
    return pts, excluded


def _series(rows: list[dict], var: str) -> dict[tuple, list[dict]]:
    """Square-problem rows grouped by (algorithm, the two fixed sizes, setting, mode, eps),
    with >= MIN_POINTS distinct values of ``var`` ("N" or "M")."""
    g: dict[tuple, list[dict]] = defaultdict(list)
    for r in rows:
        if r["Nq"] != r["Nkv"]:
            continue
        fixed = (r["d"], r["M"]) if var == "N" else (r["Nq"], r["d"])
        key = (r["algorithm"],) + fixed + (_setting(r), r["mode"], r["eps"])
        g[key].append(dict(r, N=r["Nq"]))
    return {k: v for k, v in g.items() if len({r[var] for r in v}) >= MIN_POINTS}


def _make_fit(series: tuple, var: str, region: str, rows: list[dict], exact: bool) -> Fit:
    """The fit of one series, ``series`` = (algorithm, d, N, M, setting, mode, eps) with the
    varied size (``var``) None."""
    alg, d, N, M, setting, mode, eps = series
    pts, excl = _fit_points(rows, var, exact)
    rule = (f"points with read-once floor < {FLOOR_SHARE:.0%} of total" if exact
            else "all points (approximate: the count is meant to approach the floor)")
    slope = None
    if len({p[0] for p in pts}) >= 2:
        slope = fit_slope([p[0] for p in pts], [p[1] for p in pts])[0]
    return Fit(alg, var, region, d, N, M, setting[0] is not None, mode, eps, slope, pts, excl,
               rule, setting)


def series_fits(rows: Iterable[dict]) -> list[Fit]:
    """Every series' fit: N-series at fixed (d, M) and M-series at fixed (N, d), the latter
    split at M = d² (each side fitted alone); rows of the seed papers' setting only."""
    return _fits_over(_ok_rows(rows))


def _fits_over(ok: list[dict]) -> list[Fit]:
    fits: list[Fit] = []
    for (alg, d, M, setting, mode, eps), rs in sorted(_series(ok, "N").items(), key=_key):
        exact = bool(rs[0]["exact"])
        fits.append(_make_fit((alg, d, None, M, setting, mode, eps), "N", "all", rs, exact))
    for (alg, N, d, setting, mode, eps), rs in sorted(_series(ok, "M").items(), key=_key):
        exact = bool(rs[0]["exact"])
        for region, sel in (("M<d2", [r for r in rs if r["M"] < d * d]),
                            ("M>=d2", [r for r in rs if r["M"] >= d * d])):
            if sel:
                fits.append(_make_fit((alg, d, N, None, setting, mode, eps), "M", region, sel,
                                      exact))
    return fits


def _key(item):
    k = item[0]
    return tuple((0, "") if v is None else (1, str(v) if isinstance(v, tuple) else v) for v in k)
