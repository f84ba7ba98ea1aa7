"""Replay throughput (accesses/s) of attnio.replay's LRU, FIFO and OPT against pycachesim.

One element trace of 10^7 accesses (the first 10^7 events of a FlashAttention-2 trace), replayed
through a fully associative, write-back cache of 1024 words (1-word lines, write-allocate so that
pycachesim models the same cache).  Each replay runs once (the machine is shared); the figure of
merit is the ratio to pycachesim's throughput measured in the same process.  pycachesim is fed
runs of equal-kind accesses through its C iterload/iterstore loops (its fastest interface).

    python benchmarks/bench_replay.py [--events 10000000] [--capacity 1024]

Writes benchmarks/results/replay.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time

import numpy as np

import attnio
from attnio.cachesim.tracing import Trace


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=10_000_000)
    ap.add_argument("--capacity", type=int, default=1024)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results",
                                                  "replay.json"))
    args = ap.parse_args()
    src = dict(name="flash2", N=512, d=64, M=4096)
    t0 = time.perf_counter()
    full = attnio.trace(src["name"], src["N"], src["d"], src["M"])
    parts, n = [], 0
    for a, k in full.raw_chunks():
        parts.append((a, k))
        n += len(a)
        if n >= args.events:
            break
    if n < args.events:
        raise SystemExit(f"source trace has only {n} events")
    addr = np.concatenate([p[0] for p in parts])[:args.events]
    kind = np.concatenate([p[1] for p in parts])[:args.events]
    t_trace = time.perf_counter() - t0
    tr = Trace.from_arrays(addr, kind)
    C = args.capacity
    results = {}
    cache = attnio.cachesim.Cache(C, write_allocate=True)
    for label in ("lru", "fifo", "opt"):
        t0 = time.perf_counter()
        r = attnio.replay(tr, cache, label)
        dt = time.perf_counter() - t0
        results[label] = {"seconds": dt, "accesses_per_s": len(addr) / dt, "reads": r.reads,
                          "writes": r.writes}
        print(f"{label:16s} {dt:8.2f} s  {len(addr) / dt:12,.0f} acc/s  reads {r.reads:,} "
              f"writes {r.writes:,}", flush=True)
    try:
        from attnio.cachesim.validation import pycachesim_replay

        for pol in ("lru", "fifo"):
            t0 = time.perf_counter()
            r = pycachesim_replay(tr, C, pol)
            dt = time.perf_counter() - t0
            ours = attnio.replay(tr, attnio.cachesim.Cache(
                C, write_allocate=True, write_hit_refresh=False), pol) if pol == "lru" else None
            label = f"pycachesim-{pol}"
            results[label] = {"seconds": dt, "accesses_per_s": len(addr) / dt, "reads": r.reads,
                              "writes": r.writes}
            if ours is not None:
                results[label]["agrees_with_attnio_lru_write_hit_refresh_false"] = (
                    (ours.reads, ours.writes) == (r.reads, r.writes))
            print(f"{label:16s} {dt:8.2f} s  {len(addr) / dt:12,.0f} acc/s  reads {r.reads:,} "
                  f"writes {r.writes:,}", flush=True)
    except Exception as e:  # pragma: no cover - pycachesim missing
        print("pycachesim unavailable:", e)
    for pol in ("lru", "fifo"):
        ref = results.get(f"pycachesim-{pol}")
        if ref:
            results[pol]["speedup_vs_pycachesim"] = results[pol]["accesses_per_s"] / \
                ref["accesses_per_s"]
    ref = results.get("pycachesim-lru")
    if ref:
        results["opt"]["speedup_vs_pycachesim_lru"] = results["opt"]["accesses_per_s"] / \
            ref["accesses_per_s"]
    out = {"trace": {**src, "events": len(addr), "source_events": len(full),
                     "trace_seconds": t_trace, "writes_fraction": float(np.mean(kind))},
           "cache": {"capacity_words": C, "line_words": 1, "fully_associative": True,
                     "write_back": True, "write_allocate": True},
           "machine": {"python": platform.python_version(), "cpus": os.cpu_count(),
                       "note": "shared 2-core machine; one run each"},
           "results": results}
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(out, f, indent=2)
    print("wrote", args.out)


if __name__ == "__main__":
    main()
