"""Scan every explicit bound over M and over N on 14 shapes: a bound must never rise when M grows
(a schedule for M is one for any M' >= M) nor fall when N grows (issue 36, item 3).

For each shape (a head dimension and a mask: none, causal in both alignments, sliding windows,
grouped-query heads) it evaluates every explicit forward bound (:func:`attnio.bounds.applicable_to`)
and every explicit backward bound (:func:`attnio.bounds.backward_applicable_to`)

* at one N over M from d to 4·N·d in steps of ``--ratio`` (and the integers around the issue's
  examples), counting the rises ``value(M') > value(M)`` for consecutive M < M';
* at one M over N from 2 to ``--nmax`` in steps of ``--ratio`` (every integer below 300), counting
  the falls ``value(N') < value(N)`` for consecutive N < N',

and prints, per bound, the rises and falls and the first few, and the CPU time.  Exit status 1
when any bound rises or falls.  ``--closure`` adds Theorems A and D closed by construction
(:func:`attnio.bounds.closure.closed_monotone`, not yet the public values) as two more bounds,
``pv_segment_closed`` and ``backward_accum_closed``.

Run:  python benchmarks/bench_bound_monotone.py [--ratio 1.01] [--nmax 4096] [--only NAMES]
                                                [--json FILE] [--quick] [--closure]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import defaultdict
from typing import Any

from attnio import bounds
from attnio.bounds.backward import backward_applicable_to
from attnio.bounds.base import attention_shape

#: (label, d, mask keywords, the N of the M scan, the M of the N scan)
SHAPES: tuple[tuple[str, int, dict[str, Any], int, int], ...] = (
    ("d4", 4, {}, 373, 745),
    ("d16", 16, {}, 1000, 2048),
    ("d40", 40, {}, 321, 12910),
    ("d64", 64, {}, 244, 13689),
    ("d64 causal", 64, {"causal": True}, 1000, 16384),
    ("d64 causal top_left", 64, {"causal": "top_left"}, 1000, 8192),
    ("d64 causal window 64", 64, {"causal": True, "window": 64}, 1000, 4096),
    ("d64 causal window 256", 64, {"causal": True, "window": 256}, 3000, 65536),
    ("d64 8 heads on 2", 64, {"heads": 8, "kv_heads": 2}, 500, 24000),
    ("d96 causal", 96, {"causal": True}, 300, 8169),
    ("d128", 128, {}, 2048, 16384),
    ("d128 32 heads on 8 causal", 128, {"heads": 32, "kv_heads": 8, "causal": True}, 1024, 65536),
    ("d160 causal", 160, {"causal": True}, 300, 13615),
    ("d256", 256, {}, 1024, 1024),
)

#: M values of the issue's examples, scanned integer by integer around them
EXAMPLES_M = {"d4": (730, 745), "d40": (12910, 13168)}


#: Whether :func:`explicit` adds the closed Theorems A and D (``--closure``).
CLOSURE = False


def explicit(shape_kw: dict[str, Any], N: int, d: int, M: int) -> dict[str, float]:
    """Every explicit bound's value (forward and backward) at these sizes."""
    sh = attention_shape(N, d, **shape_kw)
    out = {b.name: b.value for b in bounds.applicable_to(sh, M) if b.explicit}
    out.update({b.name: b.value for b in backward_applicable_to(sh, M) if b.explicit})
    if CLOSURE:
        from attnio.bounds import backward, closure, forward
        from attnio.bounds.base import pairs_of

        P = pairs_of(sh)
        out["pv_segment_closed"] = closure.closed_monotone(forward._A, P, d, M)[0]
        out["backward_accum_closed"] = closure.closed_monotone(backward._D, P, d, M)[0]
    return out


def geometric(lo: int, hi: int, ratio: float) -> list[int]:
    out, x = [], float(lo)
    while x <= hi:
        out.append(int(x))
        x = max(x * ratio, x + 1)
    return sorted(set(out) | {hi})


def scan(ratio: float, nmax: int, only: set[str] | None, quick: bool) -> dict[str, Any]:
    rises: dict[str, list[Any]] = defaultdict(list)
    falls: dict[str, list[Any]] = defaultdict(list)
    evals = 0
    shapes = SHAPES[::3] if quick else SHAPES
    for label, d, kw, N0, M0 in shapes:
        Ms = geometric(d, 4 * N0 * d, ratio)
        for a, b in ((EXAMPLES_M.get(label) or ()),) if label in EXAMPLES_M else ():
            Ms = sorted(set(Ms) | set(range(a - 20, b + 21)))
        prev: dict[str, float] = {}
        for M in Ms:
            vals = explicit(kw, N0, d, M)
            evals += 1
            for name, v in vals.items():
                if only and name not in only:
                    continue
                if name in prev and v > prev[name][1]:
                    rises[name].append((label, N0, prev[name][0], prev[name][1], M, v))
                prev[name] = (M, v)
        Ns = sorted(set(range(2, min(300, nmax) + 1)) | set(geometric(300, nmax, ratio)))
        prev = {}
        for N in Ns:
            vals = explicit(kw, N, d, M0)
            evals += 1
            for name, v in vals.items():
                if only and name not in only:
                    continue
                if name in prev and v < prev[name][1]:
                    falls[name].append((label, M0, prev[name][0], prev[name][1], N, v))
                prev[name] = (N, v)
    return {"rises_in_M": dict(rises), "falls_in_N": dict(falls), "points": evals,
            "shapes": len(shapes)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ratio", type=float, default=1.01, help="step of the geometric scans")
    ap.add_argument("--nmax", type=int, default=4096, help="the largest N of the N scans")
    ap.add_argument("--only", default="", help="comma-separated bound names (default: all)")
    ap.add_argument("--quick", action="store_true", help="every third shape only")
    ap.add_argument("--json", default="", help="write the findings here")
    ap.add_argument("--closure", action="store_true",
                    help="also scan Theorems A and D closed by construction (attnio.bounds.closure)")
    args = ap.parse_args(argv)
    global CLOSURE
    CLOSURE = args.closure
    t = time.process_time()
    got = scan(args.ratio, args.nmax, set(filter(None, args.only.split(","))) or None, args.quick)
    cpu = time.process_time() - t
    names = sorted(set(got["rises_in_M"]) | set(got["falls_in_N"]))
    print(f"{got['shapes']} shapes, {got['points']} evaluations of every explicit bound, "
          f"{cpu:.1f} s CPU")
    total_r = sum(len(v) for v in got["rises_in_M"].values())
    total_f = sum(len(v) for v in got["falls_in_N"].values())
    for name in names:
        r, f = got["rises_in_M"].get(name, []), got["falls_in_N"].get(name, [])
        print(f"  {name}: {len(r)} rises in M, {len(f)} falls in N")
        for label, N, M1, v1, M2, v2 in r[:3]:
            print(f"    rise  {label} N={N}: {v1:,.0f} at M={M1:,}, {v2:,.0f} at M={M2:,}")
        for label, M, N1, v1, N2, v2 in f[:3]:
            print(f"    fall  {label} M={M}: {v1:,.0f} at N={N1:,}, {v2:,.0f} at N={N2:,}")
    print(f"total: {total_r} rises in M, {total_f} falls in N")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump({**got, "cpu_s": cpu, "ratio": args.ratio, "nmax": args.nmax}, fh)
    return 1 if total_r or total_f else 0


if __name__ == "__main__":
    sys.exit(main())
