"""Generate docs/validation.md and docs/img/validation.png (explicit vs LRU vs OPT across M).

    python docs/gen_validation.py

Every exact attention algorithm of the registry, on a small grid (N <= 512, d <= 64); the tables,
the checks and the conclusions in the Markdown are computed from the replays, never typed.
Also writes the raw rows to docs/img/validation.json.
"""

from __future__ import annotations

import json
import os
import time

from attnio.cachesim.validation import grid, write_report

HERE = os.path.dirname(os.path.abspath(__file__))
SIZES = [(64, 8), (64, 32), (128, 16)]
MS = {(64, 8): [64, 128, 256, 512, 1024], (64, 32): [256, 512, 1024, 2048, 4096],
      (128, 16): [128, 512, 2048, 4096]}


def main() -> None:
    t0 = time.perf_counter()

    def progress(v):
        print(f"{time.perf_counter() - t0:7.1f}s {v.algorithm:14s} N={v.N} d={v.d} M={v.M} "
              f"events={v.events:,} explicit={v.explicit.total:,} "
              f"lru={v.count('lru', v.M):,} opt={v.count('opt', v.M):,}", flush=True)

    rows = grid(SIZES, Ms=lambda N, d: MS[(N, d)], progress=progress)
    with open(os.path.join(HERE, "img", "validation.json"), "w") as f:
        json.dump(rows, f, indent=1)
    write_report(rows, os.path.join(HERE, "validation.md"),
                 os.path.join(HERE, "img", "validation.png"), "img/validation.png",
                 "python docs/gen_validation.py")
    print(f"done in {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
