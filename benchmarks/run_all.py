"""The benchmark suite in one command: ``python benchmarks/run_all.py`` (about a minute on the
2-core development machine; ``--out`` changes the results file, default
``benchmarks/results/suite.json``).

Figures (all measured in this one process, nothing asserted):

* ``count_throughput``: per exact attention algorithm, step-by-step count mode (``bulk=False``)
  at N=4096, d=64, M=16384: tile steps per second and simulated words (reads + writes) per second,
  best of 3; and bulk-mode (the default) wall time at N=65536, d=64, M=16384, best of 3;
* ``compute_overhead``: flash2 in compute mode on the simulator vs the same tiled numpy arithmetic
  without accounting (``plain_flash2`` of ``bench_foundation.py``), best of 3 each, as a ratio;
* ``planner``: ``attnio.plan(2**20, 64, 65536)`` cold (every planner/bounds cache cleared, as in
  ``bench_planner.py``; best of 5) and cached (mean of 1000 calls);
* ``speed`` (from ``bench_speed.py``, fewer repeats): causal plans cold up to N = 10^9, counts
  at N = 10^9 causal for every exact algorithm, and sweep throughput in count mode with
  ``--jobs 1`` and ``--jobs 2`` on its two grids (the whole ``run_sweep`` call: expansion,
  process start-up, writes).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import bench_speed  # noqa: E402
from bench_foundation import plain_flash2  # noqa: E402
from bench_planner import clear as clear_planner_caches  # noqa: E402

import attnio  # noqa: E402
from attnio import planner  # noqa: E402

EXACT = ("standard", "flash1", "flash2", "flash_decoding", "square_tiling")


def best_of(fn, repeat=3):
    out, best = None, float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def machine() -> dict:
    try:
        import torch

        tv = torch.__version__
    except ImportError:  # pragma: no cover
        tv = None
    return {"python": platform.python_version(), "numpy": np.__version__, "torch": tv,
            "attnio": attnio.__version__, "platform": platform.platform(),
            "processor": platform.processor(), "cpu_count": os.cpu_count()}


def count_throughput() -> dict:
    out = {}
    for name in EXACT:
        if name not in attnio.algorithms.names():
            continue
        t, r = best_of(lambda: attnio.run(name, shape=(4096, 64), M=16384, mode="count",
                                          bulk=False))
        t0 = time.perf_counter()
        attnio.run(name, shape=(65536, 64), M=16384, mode="count")
        first = time.perf_counter() - t0
        tb, rb = best_of(lambda: attnio.run(name, shape=(65536, 64), M=16384, mode="count"))
        out[name] = {
            "step_by_step": {"N": 4096, "d": 64, "M": 16384, "seconds": t, "steps": r.io.steps,
                             "words": r.io.total, "steps_per_s": r.io.steps / t,
                             "words_per_s": r.io.total / t},
            "bulk_N65536": {"N": 65536, "d": 64, "M": 16384, "seconds": tb, "first_call_s": first,
                            "steps": rb.io.steps, "words": rb.io.total},
        }
        print(f"count {name:15s} {r.io.steps / t:12,.0f} steps/s {r.io.total / t:14,.0f} words/s"
              f"   bulk N=65536: {tb * 1e3:8.2f} ms (first call {first * 1e3:.2f} ms)")
    return out


def compute_overhead(N=2048, d=64, M=16384) -> dict:
    rng = np.random.default_rng(0)
    Q, K, V = (rng.standard_normal((N, d)) for _ in range(3))
    t_sim, r = best_of(lambda: attnio.run("flash2", Q, K, V, M=M))
    Br, Bc = r.tiling.Br, r.tiling.Bc
    t_plain, O = best_of(lambda: plain_flash2(Q, K, V, Br, Bc, 1.0 / np.sqrt(d)))
    assert np.abs(O - r.output).max() < 1e-12  # the same arithmetic
    ratio = t_sim / t_plain
    print(f"compute overhead flash2 N={N} d={d} M={M}: simulator {t_sim:.3f} s, plain numpy "
          f"{t_plain:.3f} s, ratio {ratio:.2f}")
    return {"algorithm": "flash2", "N": N, "d": d, "M": M, "tiling": {"Br": Br, "Bc": Bc},
            "simulator_s": t_sim, "plain_numpy_s": t_plain, "ratio": ratio}


def planner_latency(N=2**20, d=64, M=65536) -> dict:
    def cold():
        clear_planner_caches()
        return planner.plan(N, d, M)

    t_cold, p = best_of(cold, repeat=5)
    planner.plan(N, d, M)
    t0 = time.perf_counter()
    for _ in range(1000):
        planner.plan(N, d, M)
    t_cached = (time.perf_counter() - t0) / 1000
    best = getattr(p, "best", None) or getattr(p, "algorithm", None)
    print(f"planner N=2^20 d={d} M={M}: cold {t_cold * 1e3:.2f} ms, cached {t_cached * 1e6:.1f} us")
    return {"N": N, "d": d, "M": M, "cold_s": t_cold, "cached_s": t_cached,
            "best": str(getattr(best, "algorithm", best))}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.join(HERE, "results", "suite.json"))
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    res = {"machine": machine(), "count_throughput": count_throughput(),
           "compute_overhead": compute_overhead(), "planner": planner_latency(),
           "speed": {"planner": bench_speed.planner(5), "count": bench_speed.counts(3),
                     "sweep": bench_speed.sweeps(1)}}
    res["suite_seconds"] = time.perf_counter() - t0
    with open(args.out, "w") as f:
        json.dump(res, f, indent=1, sort_keys=True)
        f.write("\n")
    print(f"wrote {args.out} ({res['suite_seconds']:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
