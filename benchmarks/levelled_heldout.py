"""Theorem B′'s table on the held-out forward grid (docs/bounds.md §13.1), regimes A and B.

For every point of ``bench_certificate_heldout.grid()`` with M < 4d² (where the table claims
something): the planner's count, the best explicit bound (``plan_shape``'s certificate) and
Theorem B′ alone, written to a json; with ``--compare OLD.json`` the points whose ratio crosses
1.6, and every point where a bound falls, are printed.  Run it before and after a change of
``levelled.json`` (PYTHONPATH chooses the library):

    python benchmarks/levelled_heldout.py --out /tmp/before.json
    python benchmarks/levelled_heldout.py --out /tmp/after.json --compare /tmp/before.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys

from bench_certificate_heldout import grid

from attnio.bounds.levelled import qkpv_levelled_for
from attnio.core.workload import Shape
from attnio.planner import planner as _planner


def measure() -> list[dict]:
    rows = []
    for N, d, M, causal, heads, kvh in grid():
        if M >= 4 * d * d:
            continue
        shape = Shape.make(N, d, causal=causal, heads=heads, kv_heads=kvh)
        p = _planner.plan_shape(shape, M)
        best = p.certificate.best_bound
        rows.append({"point": [N, d, M, causal, heads, kvh], "total": p.chosen.predicted.total,
                     "bound": int(best.value), "bound_name": best.name,
                     "levelled": int(qkpv_levelled_for(shape, M).value)})
    return rows


def summary(rows: list[dict]) -> str:
    ratios = [r["total"] / r["bound"] for r in rows]
    return (f"{len(rows)} points, median ratio {statistics.median(ratios):.4f}, max "
            f"{max(ratios):.4f}, {sum(q <= 1.6 for q in ratios)} <= 1.6, Theorem B′ best at "
            f"{sum(r['bound_name'] == 'qkpv_levelled' for r in rows)}")


def compare(old: list[dict], new: list[dict]) -> None:
    by = {json.dumps(r["point"]): r for r in old}
    up = fell = 0
    gains = []
    for r in new:
        o = by[json.dumps(r["point"])]
        ro, rn = o["total"] / o["bound"], r["total"] / r["bound"]
        if (ro <= 1.6) != (rn <= 1.6):
            print(f"crosses 1.6: {r['point']} {ro:.4f} -> {rn:.4f} ({r['bound_name']})")
        for key in ("bound", "levelled"):
            if r[key] < o[key]:
                print(f"{key} FALLS: {r['point']} {o[key]} -> {r[key]} "
                      f"({100 * (r[key] / o[key] - 1):+.3f}%, {r['bound_name']})")
        if r["bound"] < o["bound"]:
            fell += 1
        elif r["bound"] > o["bound"]:
            up += 1
            gains.append(r["bound"] / o["bound"] - 1)
    print(f"best bound rose at {up} points (median {100 * statistics.median(gains or [0]):.3f}%, "
          f"max {100 * max(gains or [0]):.3f}%), fell at {fell}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--compare", default=None)
    args = ap.parse_args(argv)
    rows = measure()
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(rows, f)
    print(summary(rows))
    if args.compare:
        with open(args.compare, encoding="utf-8") as f:
            old = json.load(f)
        print("before:", summary(old))
        compare(old, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
