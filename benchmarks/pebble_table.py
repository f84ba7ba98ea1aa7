"""Reproduce the solved-instance table of docs/pebbling.md.

    python benchmarks/pebble_table.py                 # the table (Markdown) on stdout
    python benchmarks/pebble_table.py --first 2       # the two smallest instances only
    python benchmarks/pebble_table.py --compare-cpsat # also time CP-SAT alone on each instance

Every instance gets ``--time-limit`` seconds for the standard game (A* search, then CP-SAT) and
``--sliding-time-limit`` for the sliding variant.  OPT is printed as a number when proven
globally optimal, else as ``[proven lower bound, best schedule found]``.  The ``s`` column is
wall-clock seconds on the machine that ran it (not reproduced by the test).
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from attnio import pebble


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--time-limit", type=float, default=90.0,
                    help="seconds per instance, both solves together (default 90)")
    ap.add_argument("--sliding-time-limit", type=float, default=30.0,
                    help="of which the sliding variant's share (default 30)")
    ap.add_argument("--first", type=int, default=None, help="only the first K instances")
    ap.add_argument("--compare-cpsat", action="store_true",
                    help="also run CP-SAT alone (60 s cap) and print its value and time")
    ap.add_argument("--json", default=None, help="also write the rows to this JSON file")
    args = ap.parse_args(argv)
    todo = pebble.TABLE_INSTANCES[: args.first] if args.first else pebble.TABLE_INSTANCES
    rows = []
    for inst, M in todo:
        t0 = time.perf_counter()
        c = pebble.compare(inst, M, time_limit=args.time_limit,
                           sliding_time_limit=args.sliding_time_limit)
        row = pebble.table_row(c)
        if args.compare_cpsat:
            cp = pebble.cpsat(c["dag"], M, time_limit=args.time_limit - args.sliding_time_limit)
            row["cpsat alone"] = (f"{cp.io} ({'opt T=%d' % cp.horizon if cp.optimal_for_horizon else 'not proven'},"
                                  f" {cp.seconds:.1f} s)")
        rows.append(row)
        print(f"# {row['instance']} M={M}: OPT {row['OPT']} ({time.perf_counter() - t0:.1f} s)",
              file=sys.stderr, flush=True)
    print(pebble.format_table(rows))
    if args.compare_cpsat:
        print()
        print("| instance | M | OPT | CP-SAT alone |\n|---|---|---|---|")
        for r in rows:
            print(f"| {r['instance']} | {r['M']} | {r['OPT']} | {r['cpsat alone']} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
