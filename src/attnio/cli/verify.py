"""``attnio verify ALGO``: explicit count next to LRU, FIFO and OPT replays at M and 2M."""

from __future__ import annotations

import json

from .common import (
    add_memory_arguments,
    add_output_arguments,
    add_resource_arguments,
    add_tiling_argument,
    add_workload_arguments,
    memory_from_args,
    parse_tiling,
    progress_from_args,
    resources_from_args,
    workload_from_args,
)

NAME = "verify"
HELP = "replay a schedule's element trace through LRU, FIFO and OPT caches at M and 2M"


def add_arguments(p) -> None:
    p.add_argument("algorithm", help="a registered attention algorithm")
    add_workload_arguments(p, N=128, d=16)
    add_memory_arguments(p, default_M=2048)
    add_tiling_argument(p)
    p.add_argument("--policies", default="lru,fifo,opt", help="comma-separated: lru,fifo,opt")
    add_resource_arguments(p)
    add_output_arguments(p)


def main(args) -> int:
    from .. import algorithms
    from ..cachesim.validation import verify
    from ..core.errors import ParameterError

    alg = algorithms.get(args.algorithm)
    pol = tuple(x.strip() for x in args.policies.split(",") if x.strip())
    if not pol:
        raise ParameterError(f"--policies must name at least one of lru, fifo, opt, got "
                             f"{args.policies!r}", param="policies")
    shape = workload_from_args(args)
    M = memory_from_args(args).M
    with progress_from_args(args, f"verifying {alg.name} {shape.describe()}",
                            unit="steps, then events") as bar:
        v = verify(alg.name, M=M, shape=shape, tiling=parse_tiling(args.tiling), policies=pol,
                   progress=bar, **resources_from_args(args))  # type: ignore[arg-type]
    if args.json:
        print(json.dumps(v.as_dict(), sort_keys=True))
    else:
        print(v.table())
    return 0
