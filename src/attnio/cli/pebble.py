"""``attnio pebble``: the exact red-blue pebbling optimum of a tiny instance, next to the simulator.

Prints the optimum of the red-blue pebble game on the instance's DAG (:mod:`attnio.pebble.dag`), the
sliding variant's optimum, every exact algorithm's simulated count at the same M, and the seed
bounds of :mod:`attnio.bounds`.  See docs/pebbling.md for the models and how to read them.
"""

from __future__ import annotations

import json

from ..core import ParameterError, check_int, check_real

NAME = "pebble"
HELP = "exact red-blue pebbling optimum of a tiny attention or matmul instance"


def add_arguments(p) -> None:
    from .common import add_output_arguments, add_workload_arguments

    add_workload_arguments(p, N=2, d=1, heads=False, mask=False, Nq=False)
    p.add_argument("--M", type=int, default=4, help="red pebbles (fast-memory words); default 4")
    p.add_argument("--matmul", type=int, nargs=3, metavar=("m", "k", "n"), default=None,
                   help="solve C = A·B (A m×k, B k×n) instead of attention")
    p.add_argument("--no-rowmax", action="store_true", help="attention without the row max")
    p.add_argument("--normalize", choices=("P", "O"), default="P",
                   help="divide P by the row sum (P, default) or the output (O)")
    p.add_argument("--time-limit", type=float, default=60.0,
                   help="seconds for all the solving together (default 60)")
    p.add_argument("--no-sliding", action="store_true", help="skip the sliding variant")
    p.add_argument("--moves", action="store_true", help="print the optimal schedule")
    add_output_arguments(p)


def main(args) -> int:
    from ..pebble import MAX_TIME_LIMIT_S, Instance, compare
    from .common import progress_from_args

    if args.matmul:
        if args.N is not None or args.Nkv is not None or args.d is not None:

            raise ParameterError("--matmul solves C = A·B: drop --N/--Nkv/--d", param="N")
        inst = Instance("matmul", tuple(check_int(f"--matmul {n}", v, minimum=1, maximum=4)
                                        for n, v in zip("mkn", args.matmul)))
    else:
        N = check_int("N", 2 if args.N is None else args.N, minimum=1, maximum=4)
        Nkv = N if args.Nkv is None else check_int("Nkv", args.Nkv, minimum=1, maximum=4)
        d = check_int("d", 1 if args.d is None else args.d, minimum=1, maximum=3)
        inst = Instance("attention", (N, Nkv, d), rowmax=not args.no_rowmax,
                        normalize=args.normalize)
    M = check_int("M", args.M, minimum=1)
    limit = check_real("time_limit", args.time_limit, lo=0, lo_open=True,
                       hi=MAX_TIME_LIMIT_S, what="seconds; at most a day")
    with progress_from_args(args, f"pebbling {inst.label}, M={M}", limit, unit="s of the limit",
                            clock=True) as bar:
        c = compare(inst, M, time_limit=limit, sliding=not args.no_sliding,
                    on_phase=lambda text: bar.describe(text, limit, "s of the limit"))
    r, sl, g = c["result"], c["sliding"], c["dag"]
    if args.json:
        obj = {
            "instance": inst.label, "dag": g.title, "nodes": len(g), "edges": g.n_edges, "M": M,
            "optimum": r.io, "globally_optimal": r.globally_optimal,
            "optimal_for_horizon": r.optimal_for_horizon, "lower_bound": r.lower_bound,
            "scope": r.scope, "method": r.method, "reads": r.reads, "writes": r.writes,
            "sliding_optimum": sl.io if sl else None,
            "sliding_globally_optimal": sl.globally_optimal if sl else None,
            "sliding_lower_bound": sl.lower_bound if sl else None,
            "simulated": {n: (v if v is not None else note) for n, v, note in c["simulated"]},
            "bounds": [{"name": n, "value": v, "explicit": e} for n, v, e in c["bounds"]],
            "moves": [str(m) for m in r.moves] if args.moves else None,
        }
        print(json.dumps(obj, sort_keys=True))
        return 0

    def opt(res) -> str:
        if res is None or res.io is None:
            return f"no schedule found (lower bound {res.lower_bound if res else '?'})"
        if res.globally_optimal:
            return f"{res.io:>6}   optimal ({res.reads} R + {res.writes} W; {res.scope})"
        return (f"{res.io:>6}   best found, not proven; proven lower bound {res.lower_bound} "
                f"({res.scope})")

    print(f"pebble: {g.title} ({len(g)} nodes, {g.n_edges} edges), M={M}")
    print(f"  optimum, red-blue game     {opt(r)}")
    if sl is not None:
        print(f"  optimum, sliding variant   {opt(sl)}")
    print(f"  trivial bound of the DAG   {g.trivial_bound():>6}")
    print("  simulated algorithms (attnio.run, count mode, same N, d, M):")
    for name, v, note in c["simulated"]:
        print(f"    {name:24s} {v if v is not None else note}")
    if c["bounds"]:
        print("  seed bounds (attnio.bounds):")
        for name, v, e in c["bounds"]:
            kind = "explicit" if e else "asymptotic, constant 1: not a number to compare"
            print(f"    {name:28s} {v:>10.4g}   {kind}")
    if args.moves:
        print("  schedule: " + " ".join(str(m) for m in r.moves))
    return 0
