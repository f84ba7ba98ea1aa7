"""``attnio bound``: every lower bound that applies to a workload, with its theorem and status."""

from __future__ import annotations

import json

from ..core import ParameterError, fmt_count
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
    from .. import bounds

    shape = common.workload_from_args(args)
    M = common.memory_from_args(args).M
    shape = common.block_mask_from_args(args, shape, M)
    bs = bounds.applicable_to(shape, M, q=args.q, binary=args.binary)
    best = bounds.best(bs)
    bbs = bounds.backward_applicable_to(shape, M) if args.backward else []
    abs_ = _approximate(args, shape, M)
    bbest = bounds.best(bbs) if bbs else None
    regime = bounds.regime_of(shape.d, M)
    bm = shape.block_mask
    if args.json:
        print(json.dumps({"N": shape.Nq, "Nq": shape.Nq, "Nkv": shape.Nkv, "d": shape.d, "M": M,
                          "causal": shape.causal, "causal_align": shape.causal_align
                          if shape.causal else None, "window": shape.window,
                          "batch": shape.batch, "heads": shape.heads,
                          "kv_heads": shape.kv_heads, "regime": regime,
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
    print(f"lower bounds for attention {shape.describe()} M={M:,}: {regime}")
    _table(bs, best, fmt_count)
    if bbs:
        print(f"\nlower bounds for its backward pass (dQ, dK, dV) M={M:,}:")
        _table(bbs, bbest, fmt_count)
    if abs_:
        print(f"\nlower bounds for eps = {args.eps:g}-approximate attention (|Q|, |K| entries "
              f"<= {args.entry_bound:g}) M={M:,}:")
        _table(abs_, bounds.best(abs_) if any(b.explicit for b in abs_) else None, fmt_count)
    print("* the largest explicit bound; asymptotic bounds are Θ/Ω forms with constant 1")
    return 0


def _approximate(args, shape, M: int) -> list:
    """The bounds of :mod:`attnio.bounds.approximate` for ``--eps`` (with ``--entry-bound``): the
    features r = C(d + g, g) of the least degree g whose proven relative error on [-R, R] is at
    most eps (R = B²·d·scale, the default scale 1/√d), for one unmasked head."""
    import math

    from .. import bounds
    from ..approx import check_eps, feature_dim, polynomial, score_radius

    if args.eps is None:
        if args.entry_bound is not None:
            raise ParameterError("--entry-bound goes with --eps (the approximate bounds)",
                                 param="entry_bound")
        return []
    eps = check_eps(args.eps)
    if args.entry_bound is None:
        raise ParameterError("--eps needs --entry-bound B (|Q|, |K| entries <= B): the "
                             "polynomial's range depends on it", param="eps")
    if shape.causal or shape.window is not None or shape.heads != 1 or shape.batch != 1 \
            or shape.block_mask is not None:
        raise ParameterError("--eps: the approximate bounds are for one unmasked head "
                             "(no --causal, --window, --heads, --batch or block mask)",
                             param="approx_eps")
    R = score_radius(shape.d, 1.0 / math.sqrt(shape.d), args.entry_bound)
    p = polynomial(eps, R)
    r = feature_dim(shape.d, p.degree)
    out = [bounds.approx_w_stationary(N=shape.Nq, Nkv=shape.Nkv, d=shape.d, M=M, r=r),
           bounds.alman_song_degree(eps, R)]
    if min(shape.Nq, shape.Nkv) >= 2:
        out.append(bounds.seth_entry_threshold(max(shape.Nq, shape.Nkv)))
    return out


def _table(bs, best, fmt_count) -> None:
    w = max(len(b.name) for b in bs)
    print(f"{'bound':<{w}}  {'value':>30}  {'explicit':>8}  theorem")
    for b in bs:
        mark = " *" if b is best else ""
        print(f"{b.name:<{w}}  {fmt_count(b.value):>30}  {'yes' if b.explicit else 'no':>8}  "
              f"{b.theorem}{mark}")
