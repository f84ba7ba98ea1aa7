"""``attnio plan``: the least-I/O algorithm and tiling for a workload, with its distance to the bound."""

from __future__ import annotations

import json

from . import common

NAME = "plan"
HELP = "pick the least-I/O algorithm and tiling for (N, d, M) and report its distance to the bound"


def add_arguments(p) -> None:
    common.add_sparse_workload_arguments(p)
    common.add_backward_arguments(p, what="plan the backward pass (forward + backward)")
    p.add_argument("--eps", type=float, default=None,
                   help="also score approximate algorithms with this error target")
    p.add_argument("--entry-bound", type=float, default=None, dest="entry_bound",
                   help="with --eps: bound B on the entries of Q and K (|q|, |k| <= B)")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--factors", action="store_true",
                   help="split the certificate into schedule and bound slack with a denser "
                        "search (every tile size on axes of <= 64 rows, no time cap, the "
                        "loop-order search on tiny shapes); by default a quick one (<= 16 rows, "
                        "capped at 1 s)")  # attnio.planner.FACTOR_SEARCHES["quick"]
    g.add_argument("--no-factors", action="store_true", dest="no_factors",
                   help="do not split the certificate (the plan alone, no search)")
    common.add_output_arguments(p)


def main(args) -> int:
    from ..planner import plan_with_factors

    shape = common.workload_from_args(args)
    mem = common.memory_from_args(args)
    bwd = common.backward_from_args(args)
    shape = common.block_mask_from_args(args, shape, mem.M)
    factors = None if args.no_factors else "full" if args.factors else "quick"
    with common.progress_from_args(args, "certificate factors: searching schedules") as prog:
        fp = plan_with_factors(shape, mem, approx_eps=args.eps, entry_bound=args.entry_bound,
                               backward=args.backward, backward_algorithm=bwd, factors=factors,
                               progress=prog)
    if args.json:
        print(json.dumps(fp.to_dict(), sort_keys=True, default=str))
    else:
        print(fp.report())
    return 0
