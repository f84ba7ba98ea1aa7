"""``attnio verify ALGO``: explicit count next to LRU, FIFO and OPT replays at M and 2M."""

from __future__ import annotations

import json

NAME = "verify"
HELP = "replay a schedule's element trace through LRU, FIFO and OPT caches at M and 2M"


def add_arguments(p) -> None:
    p.add_argument("algorithm", help="a registered attention algorithm")
    p.add_argument("--N", type=int, default=128, help="sequence length (Nq = Nkv = N)")
    p.add_argument("--d", type=int, default=16, help="head dimension")
    p.add_argument("--M", type=int, default=2048, help="fast-memory words")
    p.add_argument("--causal", action="store_true", help="causal (bottom-right aligned) mask")
    p.add_argument("--policies", default="lru,fifo,opt", help="comma-separated: lru,fifo,opt")
    p.add_argument("--json", action="store_true", help="print one JSON object")


def main(args) -> int:
    from ..cachesim.validation import verify

    pol = tuple(x.strip() for x in args.policies.split(",") if x.strip())
    if not pol:
        from ..core.errors import ParameterError

        raise ParameterError(f"--policies must name at least one of lru, fifo, opt, got "
                             f"{args.policies!r}")
    v = verify(args.algorithm, args.N, args.d, args.M, causal=args.causal, policies=pol)
    if args.json:
        print(json.dumps(v.as_dict(), sort_keys=True))
    else:
        print(v.table())
    return 0
