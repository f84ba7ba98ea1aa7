"""The small-cache backward pass against FlashAttention-2's backward, measured in words.

For each head dimension d and every M a power of two from the least M both schedules run
(flash2's backward needs M >= 7d + 4) up to d²/4, the least-I/O tiling of each schedule by
closed form (equal to the simulated count: tests/algorithms/test_backward_schedules.py asserts it on every
candidate tiling; one point per d is also simulated here, in count mode), the factor
FA2 / small-cache, and the slope of log(factor) against log(d/√M) (Li et al. predict the factor
grows like d/√M: slope 1).  Then the crossover: the least power-of-two M at which FA2's backward
moves no more words than the small-cache one.  Counts only, no timings.

    python benchmarks/bench_backward.py            # print, write benchmarks/results/backward.json
    python benchmarks/bench_backward.py --write    # ... and regenerate the table in docs/backward.md
"""

from __future__ import annotations

import argparse
import json
import math
import pathlib
import re

import numpy as np

import attnio
from attnio.algorithms import get_backward, mapper
from attnio.core.workload import Shape
from attnio.runner import BackwardPass

ROOT = pathlib.Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "backward.md"
OUT = ROOT / "benchmarks" / "results" / "backward.json"
SC = get_backward("small_cache_backward")
FA2 = get_backward("flash2_backward")


def _least(schedule, shape: Shape, M: int) -> int:
    """The every-head count of the schedule's least-I/O tiling (the mapper's search)."""
    return mapper.search(schedule, shape, M).predicted.total

N = 4096
DS = (64, 128, 256, 512)


def _pow2_range(lo: int, hi: int) -> list[int]:
    M = 1 << max(0, (lo - 1).bit_length())
    out = []
    while M <= hi:
        out.append(M)
        M *= 2
    return out


def measure(causal: bool) -> dict:
    rows, fits, crossovers = [], {}, {}
    for d in DS:
        shape = Shape(N, N, d, causal=causal)
        xs, fs = [], []
        for M in _pow2_range(FA2.min_M(shape), d * d // 4):
            sc, fa = mapper.search(SC, shape, M), mapper.search(FA2, shape, M)
            f = fa.predicted.total / sc.predicted.total
            rows.append({"d": d, "M": M, "small_cache": sc.predicted.total,
                         "flash2": fa.predicted.total,
                         "factor": f, "d_over_sqrtM": d / math.sqrt(M)})
            xs.append(d / math.sqrt(M))
            fs.append(f)
        fits[d] = float(np.polyfit(np.log(xs), np.log(fs), 1)[0])
        M = 1 << (d * d // 4).bit_length()
        while _least(SC, shape, M) < _least(FA2, shape, M):
            M *= 2
        lo, hi = M // 2, M  # bisection: small-cache fewer at lo, not at hi
        while hi - lo > max(1, M // 256):
            mid = (lo + hi) // 2
            if _least(SC, shape, mid) < _least(FA2, shape, mid):
                lo = mid
            else:
                hi = mid
        crossovers[d] = {"M": M, "M_over_d2": M / (d * d), "bisected_M": hi,
                         "bisected_M_over_d2": hi / (d * d),
                         "small_cache_at_half": _least(SC, shape, M // 2),
                         "flash2_at_half": _least(FA2, shape, M // 2)}
        # one point simulated: the closed form is the count
        Ms = d * d // 16
        t = SC.coerce_tiling(shape, Ms)
        res = attnio.run("flash2", shape=shape, M=max(Ms, 4 * d + 4), mode="count",
                         backward=BackwardPass("small_cache_backward", t))
        assert res.backward_io.total == SC.cost(shape, t).io.total
    allx = [r["d_over_sqrtM"] for r in rows]
    allf = [r["factor"] for r in rows]
    return {"rows": rows, "slope_per_d": fits, "crossover": crossovers,
            "slope_all": float(np.polyfit(np.log(allx), np.log(allf), 1)[0]),
            "min_factor": min(allf), "max_factor": max(allf)}


def table(res: dict, causal: bool) -> str:
    lines = [f"N = {N}, {'causal' if causal else 'no mask'}",
             "",
             "| d | M | M/d² | small-cache words | FA2 backward words | FA2 / small-cache | d/√M |",
             "|---|---|---|---|---|---|---|"]
    for r in res["rows"]:
        lines.append(f"| {r['d']} | {r['M']:,} | {r['M'] / r['d'] ** 2:.4g} | "
                     f"{r['small_cache']:,} | {r['flash2']:,} | {r['factor']:.2f} | "
                     f"{r['d_over_sqrtM']:.2f} |")
    lines += ["", "| d | slope of log(factor) vs log(d/√M) | first power-of-two M with FA2 ≤ "
              "small-cache | crossover M (bisected, ±M/256) | crossover M / d² |",
              "|---|---|---|---|---|"]
    for d in DS:
        c = res["crossover"][d]
        lines.append(f"| {d} | {res['slope_per_d'][d]:.3f} | {c['M']:,} | {c['bisected_M']:,} | "
                     f"{c['bisected_M_over_d2']:.3g} |")
    lines += ["", f"All d together: slope {res['slope_all']:.3f}; factor "
                  f"{res['min_factor']:.2f}–{res['max_factor']:.2f} over M ≤ d²/4."]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--write", action="store_true", help="regenerate the table in docs/backward.md")
    args = ap.parse_args()
    out = {}
    texts = []
    for causal in (False, True):
        res = measure(causal)
        out["causal" if causal else "unmasked"] = res
        texts.append(table(res, causal))
    report = "\n\n".join(texts)
    print(report)
    OUT.write_text(json.dumps(out, indent=1, default=str) + "\n")
    if args.write:
        text = DOC.read_text()
        start, end = "<!-- backward-table -->", "<!-- /backward-table -->"
        pat = re.compile(re.escape(start) + r".*?" + re.escape(end), re.S)
        if not pat.search(text):
            raise SystemExit("markers not found in docs/backward.md")
        DOC.write_text(pat.sub(lambda _m: start + "\n" + report + "\n" + end, text, count=1))


if __name__ == "__main__":
    main()
