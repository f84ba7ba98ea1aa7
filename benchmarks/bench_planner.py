"""Planner latency: ``attnio.plan(N, d, M)`` cold (caches cleared) and cached, and where the cold
time goes (per algorithm's candidate search).

Run:  python benchmarks/bench_planner.py  [--out benchmarks/results/planner.json]

Target (issue 5): <= 10 ms per call at N = 2^20.  Cold = every lru_cache of the planner and of the
bounds cleared before the call (best of 3); cached = the same call again (best of 1000).  The
per-algorithm column is the time of that algorithm's candidate generation + footprint filter +
closed-form scoring inside one cold plan.
"""

from __future__ import annotations

import argparse
import json
import platform
import time

import attnio
from attnio import bounds as B
from attnio import planner
from attnio.algorithms import flash_decoding
from attnio.core.workload import Shape

CASES = [(2**12, 64, 65536), (2**16, 64, 65536), (2**20, 64, 65536), (2**20, 64, 16384),
         (2**20, 128, 83968), (2**20, 64, 4096), (2**20, 64, 1024), (2**20, 64, 65536, True)]


def clear():
    planner._plan.cache_clear()
    for f in (B._large_cache, B._small_cache, B._matmul_lw, flash_decoding._flash2_best):
        f.cache_clear()


def cold(N, d, M, causal, repeat=3):
    ts = []
    for _ in range(repeat):
        clear()
        t0 = time.perf_counter()
        planner.plan(N, d, M, causal=causal)
        ts.append(time.perf_counter() - t0)
    return min(ts)


def cached(N, d, M, causal, repeat=1000):
    planner.plan(N, d, M, causal=causal)
    t0 = time.perf_counter()
    for _ in range(repeat):
        planner.plan(N, d, M, causal=causal)
    return (time.perf_counter() - t0) / repeat


def per_algorithm(N, d, M, causal):
    shape = Shape(N, N, d)
    out = {}
    for alg in attnio.algorithms.all_algorithms():
        if not alg.exact:
            continue
        t0 = time.perf_counter()
        try:
            planner._score(alg, shape, M, causal, None, None)
        except attnio.AttnioError:
            pass
        out[alg.name] = time.perf_counter() - t0
    clear()
    t0 = time.perf_counter()
    B.applicable(N, d, M, causal=causal)
    out["(bounds)"] = time.perf_counter() - t0
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None, help="write the results as JSON here")
    args = ap.parse_args(argv)
    rows = []
    print(f"{'N':>8} {'d':>4} {'M':>7} {'causal':>6} {'chosen':>14} {'cold ms':>8} {'cached us':>9}"
          "  slowest candidate searches (ms)")
    for case in CASES:
        N, d, M = case[:3]
        causal = len(case) > 3 and case[3]
        c = cold(N, d, M, causal)
        h = cached(N, d, M, causal)
        parts = per_algorithm(N, d, M, causal)
        p = planner.plan(N, d, M, causal=causal)
        slow = sorted(parts.items(), key=lambda kv: -kv[1])[:3]
        print(f"{N:>8} {d:>4} {M:>7} {str(causal):>6} {p.algorithm:>14} {1e3 * c:>8.1f} "
              f"{1e6 * h:>9.1f}  " + ", ".join(f"{k} {1e3 * v:.1f}" for k, v in slow))
        rows.append({"N": N, "d": d, "M": M, "causal": causal, "algorithm": p.algorithm,
                     "cold_s": c, "cached_s": h, "per_algorithm_s": parts})
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"machine": platform.platform(), "python": platform.python_version(),
                       "rows": rows}, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
