"""``attnio verify ALGO``: explicit count next to LRU, FIFO and OPT replays at M and 2M."""

from __future__ import annotations

import json

from ..core import ParameterError, ResourceError
from . import common

NAME = "verify"
HELP = "replay a schedule's element trace through LRU, FIFO and OPT caches at M and 2M"


def add_arguments(p) -> None:
    common.add_schedule_arguments(p, N=128, d=16, default_M=2048)
    p.add_argument("--policies", default="lru,fifo,opt", help="comma-separated: lru,fifo,opt")
    common.add_resource_arguments(p)
    common.add_output_arguments(p)


def main(args) -> int:
    from .. import algorithms
    from ..cachesim import VerifyOptions, verify

    alg = algorithms.get(args.algorithm)
    pol = tuple(x.strip() for x in args.policies.split(",") if x.strip())
    if not pol:
        raise ParameterError(f"--policies must name at least one of lru, fifo, opt, got "
                             f"{args.policies!r}", param="policies")
    shape = common.workload_from_args(args)
    M = common.memory_from_args(args).M
    with common.progress_from_args(args, f"verifying {alg.name} {shape.describe()}",
                            unit="steps, then events") as bar:
        try:
            v = verify(alg.name, M=M, shape=shape, tiling=common.schedule_tiling_from_args(args, alg),
                       options=VerifyOptions(pol, limits=common.limits_from_args(args)),
                       progress=bar)
        except ResourceError as e:
            raise e.instead_of("use a smaller --N (or `attnio run --count-only` for the "
                               "explicit count)") from None
    if args.json:
        print(json.dumps(v.as_dict(), sort_keys=True))
    else:
        print(v.table())
    return 0
