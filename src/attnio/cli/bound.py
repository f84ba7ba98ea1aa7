"""``attnio bound``: every lower bound that applies to a workload, with its theorem and status."""

from __future__ import annotations

import json

from ..core import fmt_count
from . import common

NAME = "bound"
HELP = "list every applicable I/O lower bound for attention of size (N, d, M)"


def add_arguments(p) -> None:
    common.add_sparse_workload_arguments(p)
    p.add_argument("--backward", action="store_true",
                   help="also list the bounds on the backward pass")
    p.add_argument("--q", type=int, default=None,
                   help="inputs over the finite field F_q (prime power q > N): adds Theorem 4.8")
    p.add_argument("--binary", action="store_true",
                   help="binary inputs Q, K in {0,1}: adds Theorem 4.14")
    p.add_argument("--eps", type=float, default=None, metavar="E",
                   help="also list the bounds on eps-approximate attention (polynomial method: "
                        "the W-stationary feature-space bound at the features a degree reaching "
                        "eps needs, the degree's asymptotic form, SETH's entry threshold); "
                        "needs --entry-bound")
    p.add_argument("--entry-bound", dest="entry_bound", type=float, default=None, metavar="B",
                   help="with --eps: the bound B on |Q|, |K| entries (scores in [-R, R], "
                        "R = B^2 d / sqrt(d))")
    common.add_output_arguments(p)


def main(args) -> int:
    """Parse the flags into one :func:`attnio.bounds.listing` call and print it."""
    from .. import bounds

    shape = common.workload_from_args(args)
    M = common.memory_from_args(args).M
    shape = common.block_mask_from_args(args, shape, M)
    ls = bounds.listing(shape, M, q=args.q, binary=args.binary, backward=args.backward,
                        eps=args.eps, entry_bound=args.entry_bound)
    bs, best, bbs, abs_, bbest = ls.bounds, ls.best, ls.backward, ls.approximate, ls.backward_best
    bm = shape.block_mask
    if args.json:
        print(json.dumps({"N": shape.Nq, "Nq": shape.Nq, "Nkv": shape.Nkv, "d": shape.d, "M": M,
                          "causal": shape.causal, "causal_align": shape.causal_align
                          if shape.causal else None, "window": shape.window,
                          "batch": shape.batch, "heads": shape.heads,
                          "kv_heads": shape.kv_heads, "regime": ls.regime,
                          "bounds": [b.to_dict() for b in bs], "best": best.name,
                          "best_value": best.value,
                          "block_mask": None if bm is None else bm.describe(),
                          "density": None if bm is None else bm.density,
                          "backward_bounds": [b.to_dict() for b in bbs] if bbs else None,
                          "backward_best": None if bbest is None else bbest.name,
                          "backward_best_value": None if bbest is None else bbest.value,
                          "approximate_bounds": [b.to_dict() for b in abs_] if abs_ else None},
                         sort_keys=True, default=str))
        return 0
    print(f"lower bounds for attention {shape.describe()} M={M:,}: {ls.regime}")
    _table(bs, best, fmt_count)
    if bbs:
        print(f"\nlower bounds for its backward pass (dQ, dK, dV) M={M:,}:")
        _table(bbs, bbest, fmt_count)
    if abs_:
        print(f"\nlower bounds for eps = {args.eps:g}-approximate attention (|Q|, |K| entries "
              f"<= {args.entry_bound:g}) M={M:,}:")
        _table(abs_, ls.approximate_best, fmt_count)
    print("* the largest explicit bound; asymptotic bounds are Θ/Ω forms with constant 1")
    return 0


def _table(bs, best, fmt_count) -> None:
    w = max(len(b.name) for b in bs)
    print(f"{'bound':<{w}}  {'value':>30}  {'explicit':>8}  theorem")
    for b in bs:
        mark = " *" if b is best else ""
        print(f"{b.name:<{w}}  {fmt_count(b.value):>30}  {'yes' if b.explicit else 'no':>8}  "
              f"{b.theorem}{mark}")
