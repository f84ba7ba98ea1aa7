"""Theorems A and D closed by construction (attnio.bounds.closure) against their searches, on
the grids of bench_bounds.py (396 points, no mask) and bench_certificate_heldout.py (560 points:
masks, GQA, non-powers of two): the value, the certificate's best explicit bound with the closed
value in place of the searched one (forward: every bound of ``applicable_to``; backward: of
``backward_applicable_to``), and the CPU time of each evaluation (docs/bounds.md §12.1).

Run:  python benchmarks/bench_bound_closure.py [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

import bench_bounds  # noqa: E402
import bench_certificate_heldout  # noqa: E402

from attnio import bounds  # noqa: E402
from attnio.bounds import backward, closure, forward  # noqa: E402
from attnio.bounds.base import pairs_of  # noqa: E402
from attnio.core.workload import Shape  # noqa: E402


def points() -> list[tuple[str, Shape, int]]:
    out = [("bounds", Shape(N, N, d), M) for N, d, M in bench_bounds.grid()]
    out += [("heldout", Shape.make(N, d, causal=c, heads=h, kv_heads=k), M)
            for N, d, M, c, h, k in bench_certificate_heldout.grid()]
    return out


def measure() -> tuple[list[dict], dict[str, float]]:
    rows, cpu = [], {"closed": 0.0, "searched": 0.0}
    for grid, sh, M in points():
        P, d = pairs_of(sh), sh.d
        t = time.process_time()
        sa = forward._A.closed(P, d, M)[0]
        sd = backward._D.closed(P, d, M)[0]
        cpu["searched"] += time.process_time() - t
        t = time.process_time()
        ca = closure.closed_monotone(forward._A, P, d, M)[0]
        cd = closure.closed_monotone(backward._D, P, d, M)[0]
        cpu["closed"] += time.process_time() - t
        fw = {b.name: b.value for b in bounds.applicable_to(sh, M) if b.explicit}
        bw = {b.name: b.value for b in backward.backward_applicable_to(sh, M) if b.explicit}
        assert fw["pv_segment"] == sa and bw["backward_accum"] == sd
        rows.append({"grid": grid, "shape": sh.describe(), "M": M, "P": P,
                     "A": [sa, ca], "D": [sd, cd],
                     "forward_best": [max(fw.values()), max({**fw, "pv_segment": ca}.values())],
                     "backward_best": [max(bw.values()),
                                       max({**bw, "backward_accum": cd}.values())]})
    return rows, {k: v / len(rows) * 1e3 for k, v in cpu.items()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", default="", help="write every point here")
    args = ap.parse_args(argv)
    rows, ms = measure()
    print(f"{len(rows)} points; CPU per point, A and D together, cold per (d, M): searched "
          f"{ms['searched']:.2f} ms, closed {ms['closed']:.2f} ms")
    print("grid     value           n  lower  <-0.5%  higher  least     most")
    for grid in ("bounds", "heldout"):
        part = [r for r in rows if r["grid"] == grid]
        for key in ("A", "D", "forward_best", "backward_best"):
            rel = [b / a - 1.0 for a, b in (r[key] for r in part) if a > 0]
            print(f"{grid:8} {key:14} {len(rel):4} {sum(x < 0 for x in rel):6} "
                  f"{sum(x < -0.005 for x in rel):7} {sum(x > 0 for x in rel):7}  "
                  f"{100 * min(rel):+.2f}%  {100 * max(rel):+.2f}%")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump({"points": rows, "cpu_ms_per_point": ms}, fh)
    return 0


if __name__ == "__main__":
    sys.exit(main())
