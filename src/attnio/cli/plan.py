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
    common.add_output_arguments(p)


def main(args) -> int:
    from ..planner.planner import plan_shape

    shape = common.workload_from_args(args)
    mem = common.memory_from_args(args)
    bwd = common.backward_from_args(args)
    shape = common.block_mask_from_args(args, shape, mem.M)
    p = plan_shape(shape, mem, approx_eps=args.eps,
                   entry_bound=args.entry_bound, backward=args.backward, backward_algorithm=bwd)
    if args.json:
        print(json.dumps(p.to_dict(), sort_keys=True, default=str))
    else:
        print(repr(p))
    return 0
