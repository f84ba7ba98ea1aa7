"""Planner latency: ``attnio.plan(N, d, M)`` cold (caches cleared) and cached, and where the cold
time goes (per algorithm's candidate search).

Run:  python benchmarks/bench_planner.py  [--out benchmarks/results/planner.json]

Targets: <= 10 ms per cold call at N = 2^20 (issue 5), and for causal shapes up to N = 10^9
(issue 18; ``bench_speed.py`` has the medians of the causal cases).  Cold = every lru_cache of attnio cleared before the
call (best of 3); cached = the same call again (best of 1000).  The
per-algorithm column is the time of that algorithm's candidate generation + footprint filter +
closed-form scoring inside one cold plan.
"""

from __future__ import annotations

import argparse
import json
import platform
import time

from _cold import clear_attnio_caches

import attnio
from attnio import planner
from attnio.core.workload import Shape
from attnio.planner import planner as _planner_module

CASES = [(2**12, 64, 65536), (2**16, 64, 65536), (2**20, 64, 65536), (2**20, 64, 16384),
         (2**20, 128, 83968), (2**20, 64, 4096), (2**20, 64, 1024), (2**20, 64, 65536, True),
         (10**9, 128, 65536, True)]


def clear() -> int:
    """Clear every functools.lru_cache of the attnio modules (a cold call)."""
    return clear_attnio_caches()


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
    shape = Shape(N, N, d, causal=causal)
    out = {}
    for alg in attnio.algorithms.all_algorithms():
        if not alg.exact:
            continue
        clear()
        t0 = time.perf_counter()
        try:
            _planner_module._score(alg, shape, M, None, None, False)
        except attnio.AttnioError:
            pass
        out[alg.name] = time.perf_counter() - t0
    clear()
    t0 = time.perf_counter()
    attnio.bounds.applicable_to(shape, M)
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
        print(f"{N:>8} {d:>4} {M:>7} {str(causal):>6} {p.chosen.algorithm:>14} {1e3 * c:>8.1f} "
              f"{1e6 * h:>9.1f}  " + ", ".join(f"{k} {1e3 * v:.1f}" for k, v in slow))
        rows.append({"N": N, "d": d, "M": M, "causal": causal, "algorithm": p.chosen.algorithm,
                     "cold_s": c, "cached_s": h, "per_algorithm_s": parts})
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"machine": platform.platform(), "python": platform.python_version(),
                       "rows": rows}, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
