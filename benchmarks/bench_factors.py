"""The cost of splitting the certificate in two factors (issue 25, point 4), next to the plan's.

For each shape: the cold ``attnio.plan`` (every attnio cache cleared; best of 3), the default
split ``attnio plan`` prints (``Plan.factors(cheap=16, budget_s=1.0)``) and the dense one of
``--factors`` (``cheap=64``, no cap, the loop-order search on tiny shapes), with how many tilings
each scored and the two factors.  The plan alone is unchanged by the split (it does not run it).

Run:  python benchmarks/bench_factors.py [--out benchmarks/results/factors.json]
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import platform
import time

from _cold import clear_attnio_caches

import attnio
from attnio.cli import plan as cli_plan

ROOT = pathlib.Path(__file__).resolve().parents[1]
CASES = [dict(N=10**9, d=128, M=65536, causal=True), dict(N=2**20, d=64, M=65536),
         dict(N=4096, d=64, M=65536), dict(N=300, d=160, M=13615, causal=True, heads=8, kv_heads=2),
         dict(N=4, d=2, M=12)]


def _best_of(fn, repeat=3):
    ts, out = [], None
    for _ in range(repeat):
        clear_attnio_caches()
        t0 = time.perf_counter()
        out = fn()
        ts.append(time.perf_counter() - t0)
    return min(ts), out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "factors.json"))
    args = ap.parse_args(argv)
    rows = []
    print(f"{'shape':<58} {'plan ms':>8} {'split ms':>9} {'tilings':>8} {'dense ms':>9} "
          f"{'tilings':>8}  schedule x bound")
    for kw in CASES:
        t_plan, p = _best_of(lambda kw=kw: attnio.plan(**kw))
        t0 = time.perf_counter()
        quick = p.factors(cheap=cli_plan.QUICK_CHEAP, budget_s=cli_plan.QUICK_BUDGET_S)
        t_quick = time.perf_counter() - t0
        t0 = time.perf_counter()
        dense = p.factors(cheap=64, loop_search=True)
        t_dense = time.perf_counter() - t0
        rows.append({"shape": kw, "plan_cold_s": t_plan, "quick_s": t_quick,
                     "quick": quick.to_dict(), "dense_s": t_dense, "dense": dense.to_dict()})
        print(f"{str(kw):<58} {1e3 * t_plan:8.2f} {1e3 * t_quick:9.1f} {quick.searched:8,} "
              f"{1e3 * t_dense:9.1f} {dense.searched:8,}  {dense.schedule_factor:.2f} x "
              f"{dense.bound_factor:.2f}", flush=True)
    out = {"rows": rows, "machine": {"python": platform.python_version(), "cpus": os.cpu_count()},
           "command": "python benchmarks/bench_factors.py"}
    pathlib.Path(args.out).write_text(json.dumps(out, indent=1, default=str) + "\n")
    print("wrote", args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
