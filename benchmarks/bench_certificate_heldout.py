"""The certificate on a held-out grid of non-powers of two (issue 25), forward and backward.

Grid: N in {300, 1000, 3000, 20000, 50000}, d in {40, 80, 96, 160}, seven M from 5d to N·d/2
(geometric, rounded), causal (bottom-right) or not, one head or 8 query heads on 2 K/V heads:
560 configurations.  For each: the forward plan (``plan_shape``: every exact algorithm) and the
backward plan (``backward_plan``: every backward schedule) where one fits, and

* the forward certificate: the plan's total / its best explicit bound (``Plan.ratio``), split as
  the two factors of :func:`attnio.planner.planner.certificate_factors`: the planner's count over
  the best schedule found by any means (``best_found``) and that over the best bound;
* the backward certificate: the backward plan's total / the best explicit backward bound.

Regimes: A: M < d²/4, B: d²/4 <= M < 4d², C: 4d² <= M < Nd/4, D: M >= Nd/4.  Ratios are kept exact
(``fractions.Fraction``) so the maximum is not rounded.

Run:  python benchmarks/bench_certificate_heldout.py [--out benchmarks/results/heldout.json] [--write]
  --write  regenerate the table of docs/bounds.md §13 (between the bench_heldout markers)
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import platform
import statistics
import time
from fractions import Fraction

from _docs import rewrite_block

import attnio
from attnio.core.workload import Shape
from attnio.planner import planner as _planner

ROOT = pathlib.Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "bounds.md"
START, END = "<!-- BEGIN bench_heldout -->", "<!-- END bench_heldout -->"
REGIMES = ("A: M < d²/4", "B: d²/4 <= M < 4d²", "C: 4d² <= M < Nd/4", "D: M >= Nd/4")
NS = (300, 1000, 3000, 20000, 50000)
DS = (40, 80, 96, 160)
HEADS = ((1, 1), (8, 2))


def regime(N: int, d: int, M: int) -> str:
    if 4 * M < d * d:
        return REGIMES[0]
    if M < 4 * d * d:
        return REGIMES[1]
    if 4 * M < N * d:
        return REGIMES[2]
    return REGIMES[3]


def memories(N: int, d: int) -> list[int]:
    lo, hi = 5 * d, N * d // 2
    return sorted({round(lo * (hi / lo) ** (k / 6)) for k in range(7)})


def grid():
    for N in NS:
        for d in DS:
            for M in memories(N, d):
                for causal in (False, True):
                    for heads, kvh in HEADS:
                        yield N, d, M, causal, heads, kvh


def point(N: int, d: int, M: int, causal: bool, heads: int, kvh: int) -> dict:
    shape = Shape.make(N, d, causal=causal, heads=heads, kv_heads=kvh)
    p = _planner.plan_shape(shape, M)  # the forward certificate: every exact algorithm
    f = _planner.certificate_factors(p)
    total, best = p.chosen.predicted.total, p.certificate.best_bound
    row = {"N": N, "d": d, "M": M, "causal": causal, "heads": heads, "kv_heads": kvh,
           "regime": regime(N, d, M), "algorithm": p.chosen.algorithm, "total": total,
           "bound": int(best.value), "bound_name": best.name, "ratio": [total, int(best.value)],
           "best_found": f.best_found, "best_found_by": f.best_found_by,
           "schedule_factor": [total, f.best_found],
           "bound_factor": [f.best_found, int(best.value)]}
    try:
        b = _planner.backward_plan(shape, M)
    except attnio.ParameterError:  # no backward schedule fits
        b = None
    bc = None if b is None else b.certificate
    if b is not None and bc is not None and bc.best_bound.value > 0:
        bt, bb = b.predicted.total, bc.best_bound
        row.update(backward_algorithm=b.algorithm, backward_total=bt,
                   backward_bound=int(bb.value), backward_bound_name=bb.name,
                   backward_ratio=[bt, int(bb.value)])
    return row


def summarise(rows: list[dict], key: str, alg: str = "algorithm") -> dict:
    out = {}
    for g in (*REGIMES, "all"):
        rr = [r for r in rows if (g == "all" or r["regime"] == g) and key in r]
        if not rr:
            continue
        ratios = [Fraction(*r[key]) for r in rr]
        worst = max(zip(ratios, rr), key=lambda t: t[0])
        w = worst[1]
        out[g] = {"n": len(rr), "median": float(statistics.median(ratios)),
                  "max": float(worst[0]),
                  "max_exact": f"{worst[0].numerator}/{worst[0].denominator}",
                  "worst": f"{w['N']}, {w['d']}, {w['M']}, {'causal' if w['causal'] else '-'}, "
                           f"{w['heads']}/{w['kv_heads']}, {w[alg]}"}
    return out


def table(summary: dict, what: str) -> str:
    lines = [f"| regime | points | median {what} | max {what} | worst point "
             "(N, d, M, mask, heads/kv, schedule) |", "|---|---:|---:|---:|---|"]
    for g, s in summary.items():
        lines.append(f"| {g} | {s['n']} | {s['median']:.3f} | {s['max']:.4f} | {s['worst']} |")
    return "\n".join(lines)


def report(rows: list[dict], res: dict) -> str:
    s = res["summary"]
    out = ["Held-out grid (issue 25): N ∈ {300, 1000, 3000, 20000, 50000}, d ∈ {40, 80, 96, 160}, "
           "seven M from 5d to Nd/2, causal or not, 1 head or 8 query heads on 2 K/V heads "
           f"({len(rows)} configurations).  Forward certificate = the planner's total / the best "
           "explicit bound:", "", table(s, "ratio"), "",
           f"Exact maximum: {s['all']['max_exact']} = {s['all']['max']:.6f}.", "",
           "The forward certificate as two factors: the planner's total / the best schedule found "
           "by any means on that shape (`certificate_factors`), and that / the best bound:", "",
           table(res["summary_schedule"], "planner/found"), "",
           table(res["summary_bound"], "found/bound"), ""]
    back = res["summary_backward"]
    if back:
        out += ["Backward certificate = the planner's backward schedule / the best explicit "
                f"backward bound, where a backward schedule fits ({back['all']['n']} points):", "",
                table(back, "ratio"), ""]
    chosen: dict[str, int] = {}
    for r in rows:
        chosen[r["algorithm"]] = chosen.get(r["algorithm"], 0) + 1
    out.append("Forward schedules chosen: " + ", ".join(f"{k} {v}" for k, v in
                                                       sorted(chosen.items())) + ".")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "heldout.json"))
    ap.add_argument("--write", action="store_true")
    args = ap.parse_args(argv)
    t0 = time.time()
    rows = [point(*c) for c in grid()]
    res = {"machine": platform.platform(), "python": platform.python_version(),
           "seconds": time.time() - t0, "summary": summarise(rows, "ratio"),
           "summary_schedule": summarise(rows, "schedule_factor"),
           "summary_bound": summarise(rows, "bound_factor", "best_found_by"),
           "summary_backward": summarise(rows, "backward_ratio", "backward_algorithm"),
           "rows": rows}
    text = report(rows, res)
    print(text)
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(res, f, indent=1)
    print("wrote", args.out, f"({res['seconds']:.0f} s)")
    if args.write:
        rewrite_block(DOC, START, END, text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
