"""The reproduction table: each claim of the seed papers, measured on a sweep's rows.

Tolerances (ours, stated in the table): exponents within 0.1 of the theorem's; the crossover M*
between square tiling and FlashAttention within a factor 16 of d² for every d and growing as
d^(2 ± 0.25) across d; counts >= explicit bounds with no tolerance at all.  Each claim is applied
only to the algorithms it is about: the exact-attention bounds to exact algorithms, the
approximate bounds (:mod:`attnio.bounds.approximate`) to approximate ones.

Each exponent claim is fitted in its asymptotic range only (:data:`.fits.RANGES`, stated in the
claim: N >= 4·M/d for N², 4d² <= M <= N·d/4 for FlashAttention's 1/M, M <= d²/4 for square
tiling's 1/√M), on series with at least :data:`.fits.MIN_POINTS` distinct values in that range,
and its "measured" cell names every series it covers (algorithm, d, the fixed size, the setting,
the range of the variable, the number of points).  A claim whose data are missing (no such
algorithm registered, or no series with enough points in range) is "not covered": a grid that
cannot support a claim never fails it, and never passes it.

FlashAttention-2 against the bounds: every unwindowed flash2 count at M >= d² is within
:data:`FA2_BOUND_C` of the best explicit lower bound.

Sliding windows (the rows the seed papers' claims leave out): every algorithm's windowed count
is linear in N at fixed W, d, M, fitted where N >= 4·W (:data:`WINDOW_N_FACTOR`: the rows whose
band is cut short by the sequence's start are at most a quarter of them) on all points (the
read-once floor is linear too), and the windowed schedules (:data:`WINDOWED`) are within
:data:`WINDOW_BOUND_C` of the best explicit bound on every windowed workload.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from .fits import MIN_POINTS, RANGES, Fit, fit_slope, restricted, series_fits
from .rows import (
    _DEFAULT_SETTING,
    _all_ok,
    _best_bound,
    _bounds,
    _decoded,
    _ok_rows,
    _setting,
    for_report,
    setting_label,
)

__all__ = ["FA2_BOUND_C", "NOT_COVERED", "WINDOWED", "WINDOW_BOUND_C", "Claim", "claims"]

NOT_COVERED = "not covered"
#: the constant of the claim "flash2 ÷ best explicit bound <= c for M >= d²".  Measured (count
#: mode, every power of two N = 2^8..2^16, d = 32..256, M = d²..2^24, causal and not): the
#: largest ratio is 2.43 unmasked and 2.54 causal, both at M = d² (the planner's best schedule
#: reaches 2.31 there, docs/bounds.md §13, regime B); c = 3 leaves room for sizes off the
#: powers of two.  An empirical constant, not a theorem: the claim guards that FlashAttention-2
#: stays within a small constant of the proven bounds in the large-cache regime.
FA2_BOUND_C = 3.0

#: the windowed schedules, and the constant of the claim "the least of them ÷ the best explicit
#: bound <= c" on every windowed workload.  Measured (count mode, the windowed study: N =
#: 1,024..65,536, d = 64 and 128, M = 2^12..2^20, W = 512 and 4,096, causal): the largest ratio
#: is 2.34 (window_cache and window_square; the planner's pick 2.22), at N = 1,024, d = 128,
#: M = 16,384, W = 512, where the band does not fit in M and M < d².  window_stream (stream
#: tiling over the band) is the least of them only at M <= d²/4 (d = 128, M = 4,096: 1.83
#: against window_square's 1.90, N = 1,024..16,384) and moves no maximum.  An empirical
#: constant, as :data:`FA2_BOUND_C`, not a theorem.
WINDOWED = ("window_cache", "window_square", "window_stream", "plan")
WINDOW_BOUND_C = 3.0
#: windowed N-series are fitted where N >= this many windows (docstring)
WINDOW_N_FACTOR = 4

EXP_TOL = 0.10
FLASH = ("flash1", "flash2")
SQUARE = "square_tiling"
BOUND_CLAIM = "exact attention: every measured count >= every applicable explicit lower bound"
APPROX_BOUND_CLAIM = ("approximate attention: every measured count >= every applicable explicit "
                      "approximate-attention bound")


@dataclass
class Claim:
    claim: str
    source: str
    criterion: str
    measured: str
    status: str            # "pass" | "fail" | "not covered"


_SY = "Saha & Ye (arXiv 2402.07443): Θ(min(N²d/√M, N²d²/M)), the two terms equal at M = d²"
_N_SOURCES = {
    "standard": "Dao et al. 2022, Theorem 2: standard attention Θ(Nd + N²)",
    "flash1": "Dao et al. 2022, Theorem 2: Θ(N²d²/M)",
    "flash2": "Dao 2023 (FlashAttention-2), same order as Dao et al. 2022 Theorem 2: Θ(N²d²/M)",
    "flash_decoding": "split-KV FlashAttention: FlashAttention-2's order Θ(N²d²/M) (derived)",
    "square_tiling": "Saha & Ye, Theorem 3.5 (Algorithm 1): O(N²d/√M)",
}
_CROSS = "crossover between small- and large-cache algorithms at M ≈ d²"


def _span(f: Fit) -> str:
    xs = sorted({p[0] for p in f.points})
    return f"{f.var}={xs[0]}..{xs[-1]}" if xs else f"no {f.var} in range"


def _fmt_slopes(fits: list[Fit]) -> str:
    """Each fit with exactly the points it covers: its slope, algorithm, d, the fixed size, ε,
    the setting (mask, window, heads), the range of the variable and the number of points."""
    return "; ".join(
        f"{f.slope:+.3f} ({f.algorithm}, d={f.d}, {'M=' + str(f.M) if f.var == 'N' else 'N=' + str(f.N)}"
        f"{'' if f.eps is None else f', eps={f.eps:g}'}, "
        f"{'no mask' if f.setting == _DEFAULT_SETTING else setting_label(f.setting)}, "
        f"{_span(f)}, {len(f.points)} pts)" for f in fits)


def _exponent_claim(fits: list[Fit], rule: str, target: float, claim: str, source: str,
                    na_why: str) -> Claim:
    """An exponent claim on the series ``fits`` refitted in the asymptotic range ``rule``:
    "not covered" when no series keeps :data:`MIN_POINTS` distinct values there."""
    words = RANGES[rule][0]
    inr = [restricted(f, rule) for f in fits]
    usable = [f for f in inr if f.slope is not None]
    short = len(inr) - len(usable)
    criterion = (f"fitted slope within {EXP_TOL} of {target:+g}, fitted only where {words} "
                 f"(asymptotic range), in every series with >= {MIN_POINTS} points there")
    if not usable:
        why = (f"{len(inr)} series swept, none with >= {MIN_POINTS} points where {words}"
               if inr else na_why)
        return Claim(claim, source, criterion, why, NOT_COVERED)
    ok = all(f.slope is not None and abs(f.slope - target) <= EXP_TOL for f in usable)
    note = (f" [{short} series with < {MIN_POINTS} points where {words}: not covered]"
            if short else "")
    return Claim(claim, source, criterion, _fmt_slopes(usable) + note, "pass" if ok else "fail")


def _crossover(rows: list[dict], N: int, d: int, setting: tuple = _DEFAULT_SETTING
               ) -> float | None:
    """M* where the best FlashAttention count drops below square tiling's (log-log interpolated),
    unmasked, in one setting."""
    rows = [r for r in rows if _setting(r) == setting and not r["causal"]
            and r["Nq"] == N and r["Nkv"] == N and r["d"] == d]
    sq = {r["M"]: r["total"] for r in rows if r["algorithm"] == SQUARE}
    fl: dict[int, int] = {}
    for r in rows:
        if r["algorithm"] in FLASH:
            fl[r["M"]] = min(fl.get(r["M"], r["total"]), r["total"])
    Ms = sorted(set(sq) & set(fl))
    if len(Ms) < 2:
        return None
    diff = [math.log(fl[m]) - math.log(sq[m]) for m in Ms]  # > 0: square tiling better
    for i in range(len(Ms) - 1):
        if diff[i] > 0 >= diff[i + 1]:
            a, b = math.log(Ms[i]), math.log(Ms[i + 1])
            t = diff[i] / (diff[i] - diff[i + 1])
            return math.exp(a + t * (b - a))
    return None


def _n_exponent_claims(ok: list[dict], fits: list[Fit]) -> list[Claim]:
    """1. N-exponent 2 for every exact attention algorithm."""
    exact_algs = sorted({r["algorithm"] for r in ok if r["exact"] and r["kind"] == "attention"})
    out = []
    for alg in exact_algs:
        fs = [f for f in fits if f.algorithm == alg and f.var == "N" and f.mode == "count"]
        out.append(_exponent_claim(
            fs, "N2", 2.0, f"{alg}: I/O grows as N^2 at fixed d, M (N >= 4·M/d)", _N_SOURCES.get(
                alg, "Saha & Ye (arXiv 2402.07443): Θ(min(N²d/√M, N²d²/M)) for exact attention"),
            "no N-series"))
    if not exact_algs:
        out.append(Claim("exact algorithms: I/O grows as N^2", "Saha & Ye", "slope 2 ± 0.1",
                         "no exact attention rows", NOT_COVERED))
    return out


def _m_exponent_claims(fits: list[Fit], registered: set[str]) -> list[Claim]:
    """2. M-exponent -1 for FlashAttention in 4d² <= M <= N·d/4; 3. -1/2 for square tiling at
    M <= d²/4."""
    out = []
    for alg in FLASH:
        fs = [f for f in fits if f.algorithm == alg and f.var == "M" and f.region == "M>=d2"
              and not f.causal]
        na = f"{alg} not registered" if alg not in registered else "no unmasked M-series"
        out.append(_exponent_claim(fs, "flash_M", -1.0, f"{alg}: I/O ∝ 1/M for 4d² <= M <= N·d/4",
                                   "Dao et al. 2022, Theorem 2: Θ(N²d²/M); Saha & Ye (large cache)",
                                   na))
    fs = [f for f in fits if f.algorithm == SQUARE and f.var == "M" and f.region == "M<d2"
          and not f.causal]
    na = f"{SQUARE} not registered" if SQUARE not in registered else "no unmasked M-series"
    out.append(_exponent_claim(fs, "square_M", -0.5, f"{SQUARE}: I/O ∝ 1/√M for M <= d²/4",
                               "Saha & Ye Thm 3.5 (Algorithm 1): O(N²d/√M)", na))
    return out


def _crossover_claim(ok: list[dict], registered: set[str]) -> Claim:
    """4. The crossover at M ≈ d²."""
    crit = ("M* (best FlashAttention count < square tiling's) within a factor 16 of d² for every "
            "d, and M* ∝ d^(2 ± 0.25) across d")
    present = {r["algorithm"] for r in ok}
    if SQUARE not in registered or SQUARE not in present:
        return Claim(_CROSS, _SY, crit, f"{SQUARE} "
                     f"{'not registered' if SQUARE not in registered else 'has no rows'}",
                     NOT_COVERED)
    found = []
    for N, d, st in sorted({(r["Nq"], r["d"], _setting(r)) for r in ok
                            if r["algorithm"] == SQUARE and not r["causal"]}, key=str):
        m = _crossover(ok, N, d, st)
        if m is not None:
            found.append((N, d, m))
    if not found:
        return Claim(_CROSS, _SY, crit, "no crossover inside the swept M range", NOT_COVERED)
    within = all(1 / 16 <= m / (d * d) <= 16 for _, d, m in found)
    measured = "; ".join(f"M*/d² = {m / (d * d):.3f} (N={N}, d={d})" for N, d, m in found)
    ds: dict[int, float] = {}
    for _N, d, m in found:
        ds.setdefault(d, m)
    grow_ok = True
    if len(ds) >= 2:
        s = fit_slope(list(ds), list(ds.values()))[0]
        measured += f"; M* ∝ d^{s:.2f}"
        grow_ok = abs(s - 2) <= 0.25
    return Claim(_CROSS, _SY, crit, measured, "pass" if within and grow_ok else "fail")


def _bound_claim(rows: list[dict], exact: bool) -> Claim:
    """5. Every measured count >= every applicable explicit bound (every workload: heads, GQA,
    both mask alignments, windows): exact algorithms against the exact-attention bounds,
    approximate ones against the approximate bounds only."""
    name, source = ((BOUND_CLAIM, "attnio.bounds (Saha & Ye; Theorems A-C)") if exact else
                    (APPROX_BOUND_CLAIM, "attnio.bounds.approximate (derived; arXiv 2605.23751 "
                                         "could not be read)"))
    sel = [r for r in _all_ok(rows) if bool(r["exact"]) == exact]
    pairs, worst, worst_row = 0, math.inf, None
    for r in sel:
        for bname, b in _bounds(r).items():
            if b.get("explicit") and b.get("value"):
                pairs += 1
                q = r["total"] / b["value"]
                if q < worst:
                    worst, worst_row = q, (r, bname)
    if worst_row is None:
        why = (f"no {'exact' if exact else 'approximate'}-algorithm rows" if not sel else
               "no explicit bound applies to these rows")
        return Claim(name, source, "total >= bound, no tolerance", why, NOT_COVERED)
    r, bname = worst_row
    return Claim(name, source, "total >= bound for every (row, bound), no tolerance",
                 f"{pairs} (row, bound) pairs over {len(sel)} rows; least total/bound = "
                 f"{worst:.4f} ({r['algorithm']} N={r['Nq']} d={r['d']} M={r['M']} vs {bname})",
                 "pass" if worst >= 1 else "fail")


def _fa2_bound_claim(rows: list[dict], registered: set[str]) -> Claim:
    """FlashAttention-2 within :data:`FA2_BOUND_C` of the best explicit bound for M >= d²
    (every unwindowed flash2 row: masks, heads and GQA included)."""
    name = f"flash2 ÷ best explicit bound <= {FA2_BOUND_C:g} for M >= d²"
    source = ("attnio.bounds (explicit bounds); the constant from count-mode sweeps of "
              "N = 2^8..2^16, d = 32..256 (max 2.43 unmasked, 2.54 causal, at M = d²) and "
              "docs/bounds.md §13")
    crit = (f"total / best explicit bound <= {FA2_BOUND_C:g} for every flash2 row with M >= d² "
            "and no window (an empirical constant, not a theorem)")
    sel = [r for r in _all_ok(rows) if r["algorithm"] == "flash2" and r.get("window") is None
           and r["M"] >= r["d"] ** 2]
    qs = [(r["total"] / b, r) for r in sel if (b := _best_bound(r))]
    if not qs:
        why = ("flash2 not registered" if "flash2" not in registered else
               "no unwindowed flash2 row at M >= d² with an explicit bound")
        return Claim(name, source, crit, why, NOT_COVERED)
    q, r = max(qs, key=lambda t: t[0])
    return Claim(name, source, crit,
                 f"{len(qs)} rows (d={','.join(str(d) for d in sorted({x['d'] for _, x in qs}))}, "
                 f"M={min(x['M'] for _, x in qs)}..{max(x['M'] for _, x in qs)}); largest "
                 f"total/bound = {q:.4f} (N={r['Nq']} d={r['d']} M={r['M']}, "
                 f"{setting_label(_setting(r))})",
                 "pass" if q <= FA2_BOUND_C else "fail")


def _window_linear_claims(rows: list[dict]) -> list[Claim]:
    """Windowed I/O linear in N at fixed W, d, M (one claim per algorithm with windowed rows):
    every N-series of one (d, M, setting, mode, eps), square problems, fitted on its points with
    N >= :data:`WINDOW_N_FACTOR`·W, slope within :data:`EXP_TOL` of 1 where it has
    :data:`MIN_POINTS` distinct N there."""
    win = [r for r in _all_ok(rows) if r.get("window") is not None and r["Nq"] == r["Nkv"]]
    if not win:
        return [Claim("windowed attention: I/O linear in N at fixed W, d, M",
                      "derived: a row sees at most W keys", "slope 1 ± 0.1",
                      "no windowed rows (sweep with --causal true --window W)", NOT_COVERED)]
    groups: dict[tuple, list[dict]] = {}
    for r in win:
        key = (r["algorithm"], r["d"], r["M"], _setting(r), r["mode"], r["eps"])
        groups.setdefault(key, []).append(r)
    words = f"N >= {WINDOW_N_FACTOR}·W"
    crit = (f"fitted slope within {EXP_TOL} of +1, fitted on every point where {words} (the "
            f"read-once floor is linear too), in every series with >= {MIN_POINTS} points there")
    out = []
    for alg in sorted({k[0] for k in groups}):
        fits, short = [], 0
        for (a, d, M, setting, mode, eps), rs in sorted(groups.items(), key=lambda kv: str(kv[0])):
            if a != alg:
                continue
            pts = sorted({(r["Nq"], r["total"]) for r in rs
                          if r["Nq"] >= WINDOW_N_FACTOR * r["window"]})
            if len({p[0] for p in pts}) < MIN_POINTS:
                short += 1
                continue
            slope = fit_slope([p[0] for p in pts], [p[1] for p in pts])[0]
            fits.append(Fit(alg, "N", "window", d, None, M, True, mode, eps, slope, pts, 0,
                            words, setting))
        name = f"{alg}: windowed I/O linear in N at fixed W, d, M ({words})"
        src = "derived: each query row sees at most W keys, so every term of the count is O(N·W)"
        if not fits:
            out.append(Claim(name, src, crit, f"{short} windowed series, none with >= "
                             f"{MIN_POINTS} points where {words}", NOT_COVERED))
            continue
        ok = all(f.slope is not None and abs(f.slope - 1.0) <= EXP_TOL for f in fits)
        note = (f" [{short} series with < {MIN_POINTS} points where {words}: not covered]"
                if short else "")
        out.append(Claim(name, src, crit, _fmt_slopes(fits) + note, "pass" if ok else "fail"))
    return out


def _window_bound_claim(rows: list[dict]) -> Claim:
    """The least count of the windowed schedules (:data:`WINDOWED`) on each windowed workload
    within :data:`WINDOW_BOUND_C` of the best explicit bound."""
    name = (f"windowed schedules ({', '.join(WINDOWED)}): the least ÷ best explicit bound <= "
            f"{WINDOW_BOUND_C:g} on every windowed workload")
    source = ("attnio.bounds (explicit bounds, the band's pairs counted by masks.row_counts); "
              "the constant from the windowed study (max 2.34)")
    crit = (f"min over {', '.join(WINDOWED)} of total / best explicit bound <= "
            f"{WINDOW_BOUND_C:g} for every windowed (N, d, M, setting) swept with one of them (an "
            "empirical constant, not a theorem)")
    best: dict[tuple, tuple[float, dict]] = {}
    for r in _all_ok(rows):
        if r.get("window") is None or r["algorithm"] not in WINDOWED:
            continue
        b = _best_bound(r)
        if not b:
            continue
        key = (_setting(r), r["Nq"], r["Nkv"], r["d"], r["M"], r["mode"])
        q = r["total"] / b
        if key not in best or q < best[key][0]:
            best[key] = (q, r)
    if not best:
        return Claim(name, source, crit, "no windowed row of a windowed schedule with an "
                     "explicit bound", NOT_COVERED)
    q, r = max(best.values(), key=lambda t: t[0])
    return Claim(name, source, crit,
                 f"{len(best)} windowed workloads; largest least-total/bound = {q:.4f} "
                 f"({r['algorithm']} N={r['Nq']} d={r['d']} M={r['M']}, "
                 f"{setting_label(_setting(r))})", "pass" if q <= WINDOW_BOUND_C else "fail")


def _closed_form_claim(rows: list[dict]) -> Claim:
    """6. Simulated counts equal each algorithm's closed form."""
    checked = [r for r in _all_ok(rows) if r.get("predicted_reads") is not None]
    bad = [r for r in checked
           if (r["reads"], r["writes"]) != (r["predicted_reads"], r["predicted_writes"])]
    return Claim("simulated counts equal each algorithm's derived closed form",
                 "attnio docstrings", "reads and writes equal predicted_io exactly",
                 f"{len(checked) - len(bad)} of {len(checked)} rows equal"
                 + (f"; first mismatch {bad[0]['algorithm']} N={bad[0]['Nq']} M={bad[0]['M']}"
                    if bad else ""),
                 NOT_COVERED if not checked else ("pass" if not bad else "fail"))


def _features_fit(r: dict) -> bool:
    """Whether an approximate row is in the regime where its features fit in M: the feature
    count r its tiling names, with W = ψ(K)ᵀV (r·d words) and the normaliser (r words), takes
    r·(d + 1) <= M."""
    t = _decoded(r.get("tiling"))
    return bool(t.get("r")) and int(t["r"]) * (r["d"] + 1) <= r["M"]


def _approx_claims(ok: list[dict], registered: set[str]) -> list[Claim]:
    """7. Approximate attention near-linear in N (one series per eps), fitted on the rows where
    its features fit in M (r·(d+1) <= M) only."""
    present = {r["algorithm"] for r in ok}
    approx_algs = sorted({r["algorithm"] for r in ok if not r["exact"]})
    if not approx_algs:
        missing = [n for n in registered if n not in present]
        return [Claim("approximate attention: I/O near-linear in N",
                      "arXiv 2605.23751 (abstract); Alman & Song 2023", "slope within 0.15 of 1",
                      "no approximate-algorithm rows" + (" (run the sweep with --eps)"
                                                         if missing else ""), NOT_COVERED)]
    out = []
    crit = (f"slope within 0.15 of 1, fitted only on rows whose r features fit in M "
            f"(r·(d+1) <= M), in every N-series with >= {MIN_POINTS} such points")
    for alg in approx_algs:
        name = f"{alg}: I/O near-linear in N where its features fit in M (r·(d+1) <= M)"
        sel = [r for r in ok if r["algorithm"] == alg and _features_fit(r)]
        usable = [f for f in series_fits(sel) if f.var == "N" and f.slope is not None
                  and len(f.points) >= MIN_POINTS]
        if not usable:
            out.append(Claim(name, "arXiv 2605.23751 (abstract; derived regime)", crit,
                             f"no N-series with >= {MIN_POINTS} points where r·(d+1) <= M",
                             NOT_COVERED))
            continue
        okk = all(f.slope is not None and abs(f.slope - 1) <= 0.15 for f in usable)
        out.append(Claim(name, "arXiv 2605.23751 (abstract; derived regime)", crit,
                         _fmt_slopes(usable), "pass" if okk else "fail"))
    return out


def claims(rows: Iterable[dict], fits: list[Fit] | None = None,
           registered: Iterable[str] | None = None) -> list[Claim]:
    """The reproduction table: each claim of the seed papers, measured on ``rows``."""
    rows = for_report(rows)
    ok = _ok_rows(rows)
    fits = series_fits(ok) if fits is None else fits
    if registered is None:
        from ... import algorithms as _alg

        registered = _alg.names()
    reg = set(registered)
    return [*_n_exponent_claims(ok, fits), *_m_exponent_claims(fits, reg),
            _crossover_claim(ok, reg), _bound_claim(rows, True), _bound_claim(rows, False),
            _fa2_bound_claim(rows, reg), *_window_linear_claims(rows), _window_bound_claim(rows),
            _closed_form_claim(rows), *_approx_claims(ok, reg)]
