"""``attnio plan``: the least-I/O algorithm and tiling for a workload, with its distance to the bound."""

from __future__ import annotations

import json

from .common import (
    add_backward_arguments,
    add_memory_arguments,
    add_output_arguments,
    add_sparsity_arguments,
    add_workload_arguments,
    backward_from_args,
    block_mask_from_args,
    memory_from_args,
    workload_from_args,
)

NAME = "plan"
HELP = "pick the least-I/O algorithm and tiling for (N, d, M) and report its distance to the bound"


def add_arguments(p) -> None:
    add_workload_arguments(p)
    add_sparsity_arguments(p)
    add_memory_arguments(p)
    add_backward_arguments(p, what="plan the backward pass (forward + backward)")
    p.add_argument("--eps", type=float, default=None,
                   help="also score approximate algorithms with this error target")
    p.add_argument("--entry-bound", type=float, default=None, dest="entry_bound",
                   help="with --eps: bound B on the entries of Q and K (|q|, |k| <= B)")
    add_output_arguments(p)


def main(args) -> int:
    from ..planner.planner import FastMemory, plan_shape

    shape = workload_from_args(args)
    mem = memory_from_args(args)
    bwd = backward_from_args(args)
    shape = block_mask_from_args(args, shape, mem.M)
    p = plan_shape(shape, FastMemory(mem.M, mem.dtype_bytes, mem.device), approx_eps=args.eps,
                   entry_bound=args.entry_bound, backward=args.backward, backward_algorithm=bwd)
    if args.json:
        print(json.dumps(p.to_dict(), sort_keys=True, default=str))
    else:
        print(repr(p))
    return 0
