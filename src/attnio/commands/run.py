"""``attnio run ALGO``: run one algorithm on the simulator and print its counts."""

from __future__ import annotations

import dataclasses
import json

import numpy as np

NAME = "run"
HELP = "run an algorithm on the simulated two-level memory and print its I/O"


def add_arguments(p) -> None:
    p.add_argument("algorithm", help="a registered algorithm (see `attnio run --list`)", nargs="?")
    p.add_argument("--list", action="store_true", help="list the registered algorithms and exit")
    p.add_argument("--N", type=int, default=1024, help="sequence length (Nq = Nkv = N)")
    p.add_argument("--Nq", type=int, default=None, help="number of queries (overrides --N)")
    p.add_argument("--Nkv", type=int, default=None, help="number of keys/values (overrides --N)")
    p.add_argument("--d", type=int, default=64, help="head dimension")
    p.add_argument("--M", type=int, default=16384, help="fast-memory capacity in words")
    p.add_argument("--causal", action="store_true", help="causal (bottom-right aligned) mask")
    p.add_argument("--scale", type=float, default=None, help="softmax scale (default 1/sqrt(d))")
    p.add_argument("--count-only", action="store_true", help="count mode: shapes only, no arithmetic")
    p.add_argument("--seed", type=int, default=0, help="seed of the random inputs")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--tiling", default=None,
                   help="tiling: a rule name (auto, paper, square, outer), a side B, or JSON fields "
                        "such as '{\"stable\": false}'")
    p.add_argument("--m", type=int, default=None, help="matmul: rows of A and C")
    p.add_argument("--k", type=int, default=None, help="matmul: columns of A, rows of B")
    p.add_argument("--n", type=int, default=None, help="matmul: columns of B and C")


def tiling_dict(t) -> dict:
    return dataclasses.asdict(t) if dataclasses.is_dataclass(t) else dict(t or {})


def parse_tiling(text):
    """--tiling: None, a rule name, an int side, or a JSON object of tiling fields."""
    if text is None:
        return None
    t = text.strip()
    if t.lstrip("-").isdigit():
        return int(t)
    if t.startswith("{"):
        try:
            obj = json.loads(t)
        except json.JSONDecodeError as e:
            from ..errors import ParameterError

            raise ParameterError(f"--tiling is not valid JSON ({e.msg}): {text!r}") from None
        return obj
    return t


def main_matmul(args) -> int:
    """``attnio run matmul --m --k --n --M``: C = A·B on the simulator, with the COSMA ratio."""
    from ..algorithms.matmul import run_matmul
    from ..errors import ParameterError

    missing = [f"--{x}" for x in ("m", "k", "n") if getattr(args, x) is None]
    if missing:
        raise ParameterError(f"matmul needs {', '.join(missing)} (C = A·B with A m×k, B k×n)")
    tiling = parse_tiling(args.tiling)
    if args.count_only:
        res = run_matmul(shape=(args.m, args.k, args.n), M=args.M, tiling=tiling)
        err = None
    else:
        from ..algorithms.matmul import MatmulShape

        MatmulShape(args.m, args.k, args.n)  # validate sizes before drawing inputs
        rng = np.random.default_rng(args.seed)
        A = rng.standard_normal((args.m, args.k))
        B = rng.standard_normal((args.k, args.n))
        res = run_matmul(A, B, M=args.M, tiling=tiling)
        err = float(np.abs(res.output - A @ B).max())
    io = res.io
    if args.json:
        print(json.dumps({
            "algorithm": "matmul", "m": args.m, "k": args.k, "n": args.n, "M": args.M,
            "reads": io.reads, "writes": io.writes, "total": io.total, "peak": io.peak,
            "bound": res.bound, "ratio": res.ratio, "max_abs_err": err,
            "tiling": tiling_dict(res.tiling), "mode": res.mode}, sort_keys=True))
        return 0
    print(f"matmul  m={args.m} k={args.k} n={args.n} M={args.M}  ({res.mode} mode)")
    print(f"  tiling   {tiling_dict(res.tiling)}")
    print(f"  reads    {io.reads:,}")
    print(f"  writes   {io.writes:,}")
    print(f"  total    {io.total:,}")
    print(f"  peak     {io.peak:,} of M={args.M:,} words")
    print(f"  bound    {res.bound:,.0f}  (COSMA Thm 1: 2mnk/sqrt(M) + mn); ratio {res.ratio:.3f}")
    if err is not None:
        print(f"  max |C - A@B| = {err:.3e}")
    return 0


def main(args) -> int:
    from .. import algorithms, reference, run
    from ..errors import ParameterError

    if args.list:
        for name in algorithms.names(None):
            print(f"{name:16s} {algorithms.get(name).summary}")
        return 0
    if not args.algorithm:
        raise ParameterError("algorithm: name one of " + ", ".join(algorithms.names(None)))
    alg = algorithms.get(args.algorithm)
    if alg.kind == "matmul":
        return main_matmul(args)
    tiling = parse_tiling(args.tiling)
    Nq = args.Nq if args.Nq is not None else args.N
    Nkv = args.Nkv if args.Nkv is not None else args.N
    shape = (Nq, Nkv, args.d)
    err = None
    if args.count_only:
        res = run(alg.name, shape=shape, M=args.M, mode="count", causal=args.causal,
                  scale=args.scale, tiling=tiling)
    else:
        from ..algorithms.base import Shape

        Shape.coerce(shape)  # validate sizes before drawing inputs
        rng = np.random.default_rng(args.seed)
        Q = rng.standard_normal((Nq, args.d))
        K = rng.standard_normal((Nkv, args.d))
        V = rng.standard_normal((Nkv, args.d))
        res = run(alg.name, Q, K, V, M=args.M, causal=args.causal, scale=args.scale,
                  tiling=tiling)
        ref = reference.attention(Q, K, V, causal=args.causal, scale=args.scale)
        err = float(np.abs(res.output - ref).max())
    io = res.io
    if args.json:
        obj = {
            "algorithm": alg.name, "N": Nq, "Nq": Nq, "Nkv": Nkv, "d": args.d, "M": args.M,
            "causal": args.causal, "reads": io.reads, "writes": io.writes, "total": io.total,
            "peak": io.peak, "max_abs_err": err, "tiling": tiling_dict(res.tiling),
            "mode": res.mode,
        }
        print(json.dumps(obj, sort_keys=True))
        return 0
    size = f"N={Nq}" if Nq == Nkv else f"Nq={Nq} Nkv={Nkv}"
    print(f"{alg.name}  {size} d={args.d} M={args.M}{' causal' if args.causal else ''}"
          f"  ({res.mode} mode)")
    print(f"  tiling   {tiling_dict(res.tiling)}")
    print(f"  reads    {io.reads:,}")
    print(f"  writes   {io.writes:,}")
    print(f"  total    {io.total:,}")
    print(f"  peak     {io.peak:,} of M={args.M:,} words")
    if err is not None:
        print(f"  max |O - reference| = {err:.3e}")
    return 0
