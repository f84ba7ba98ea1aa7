"""CPU cost of Theorem B′'s closure (issue 36 item 3, docs/bounds.md §12.1) against its search.

On the 704 points of ``bench_speed.py``'s sweep (N = 256…32,768, d = 16…128, M = 2¹⁰…2²⁰,
causal and not) and a few large single cases, it times per call, in CPU time
(``time.process_time``), ``levelled.closed_levelled`` (the closure, no cache: cold) and
``levelled._closed`` with its caches cleared (the search it replaces, cold), the public
``qkpv_levelled_pairs`` a second time (warm: its cache), and counts where the closure is above
the search (never below: exit 1 if it were).

Run:  python benchmarks/bench_levelled_closure.py [--rounds 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

from attnio.bounds import levelled as L
from attnio.bounds.base import attention_shape, pairs_of


def points() -> list[tuple[int, int, int]]:
    out = []
    for N in (256 << i for i in range(8)):
        for d in (16, 32, 64, 128):
            for M in (1024 << i for i in range(11)):
                for causal in (False, True):
                    out.append((pairs_of(attention_shape(N, d, causal=causal)), d, M))
    return out


LARGE = ((10**18, 128, 65536), (10**12, 64, 4096), (5 * 10**8, 256, 1024), (10**6, 40, 6000))


def per_call(fn, pts) -> float:
    t = time.process_time()
    for p in pts:
        fn(*p)
    return (time.process_time() - t) / len(pts) * 1e6


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args(argv)
    pts = points()
    L.closed_levelled(*pts[0])  # the table read once
    closure, search, warm = [], [], []
    for _ in range(args.rounds):
        closure.append(per_call(L.closed_levelled, pts))
        L._closed.cache_clear()
        search.append(per_call(L._closed, pts))
        L._monotone.cache_clear()
        per_call(lambda P, d, M: L.qkpv_levelled_pairs(P=P, d=d, M=M), pts)
        warm.append(per_call(lambda P, d, M: L.qkpv_levelled_pairs(P=P, d=d, M=M), pts))
    above = below = 0
    for p in pts:
        c, r = L.closed_levelled(*p)[0], L._closed(*p)[0]
        above += c > r
        below += c < r
    print(f"{len(pts)} points (bench_speed's sweep), CPU µs per call, median of {args.rounds}:")
    print(f"  closure (cold)      {statistics.median(closure):8.1f}")
    print(f"  search (cold)       {statistics.median(search):8.1f}")
    print(f"  public, cached      {statistics.median(warm):8.1f}")
    print(f"  closure above the search at {above} points, below at {below}")
    for P, d, M in LARGE:
        t = time.process_time()
        for _ in range(20):
            v = L.closed_levelled(P, d, M)[0]
        c = (time.process_time() - t) / 20 * 1e6
        print(f"  P={P:.3g} d={d} M={M}: closure {c:.0f} µs, value {v:,} (search "
              f"{L._closed(P, d, M)[0]:,})")
    return 1 if below else 0


if __name__ == "__main__":
    sys.exit(main())
