"""``attnio bound``: every lower bound that applies to (N, d, M), with its theorem and status."""

from __future__ import annotations

import json

from .plan import add_memory_arguments, resolve_M

NAME = "bound"
HELP = "list every applicable I/O lower bound for attention of size (N, d, M)"


def add_arguments(p) -> None:
    p.add_argument("--N", type=int, required=True, help="sequence length (queries)")
    p.add_argument("--Nkv", type=int, default=None, help="keys/values (default N)")
    p.add_argument("--d", type=int, required=True, help="head dimension")
    add_memory_arguments(p)
    p.add_argument("--causal", action="store_true", help="causal (bottom-right aligned) mask")
    p.add_argument("--heads", type=int, default=1, help="independent heads (bounds multiply)")
    p.add_argument("--q", type=int, default=None,
                   help="inputs over the finite field F_q (prime power q > N): adds Theorem 4.8")
    p.add_argument("--binary", action="store_true",
                   help="binary inputs Q, K in {0,1}: adds Theorem 4.14")
    p.add_argument("--json", action="store_true", help="print one JSON object")


def main(args) -> int:
    from .. import bounds

    M, _, _ = resolve_M(args)
    bs = bounds.applicable(args.N, args.d, M, Nkv=args.Nkv, causal=args.causal, heads=args.heads,
                           q=args.q, binary=args.binary)
    best = bounds.best(bs)
    if args.json:
        print(json.dumps({"N": args.N, "Nkv": args.Nkv or args.N, "d": args.d, "M": M,
                          "causal": args.causal, "heads": args.heads,
                          "bounds": [b.to_dict() for b in bs], "best": best.name},
                         sort_keys=True))
        return 0
    size = f"N={args.N}" if not args.Nkv or args.Nkv == args.N else f"Nq={args.N} Nkv={args.Nkv}"
    print(f"lower bounds for attention {size} d={args.d} M={M:,}"
          f"{' causal' if args.causal else ''}{f' heads={args.heads}' if args.heads > 1 else ''}")
    print(f"{'bound':<28} {'value':>22}  {'explicit':>8}  {'regime':<22}  theorem")
    for b in bs:
        mark = " *" if b is best else ""
        print(f"{b.name:<28} {b.value:>22,.0f}  {'yes' if b.explicit else 'no':>8}  "
              f"{b.regime:<22}  {b.theorem}{mark}")
    print("* the largest explicit bound; asymptotic bounds are Θ/Ω forms with constant 1")
    return 0
