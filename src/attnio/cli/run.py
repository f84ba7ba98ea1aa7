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
    p.add_argument("--causal", nargs="?", const="bottom_right", default=None,
                   choices=["bottom_right", "top_left"],
                   help="causal mask, bottom-right aligned (default) or top_left")
    p.add_argument("--window", type=int, default=None,
                   help="sliding window: each query sees its W most recent keys (needs --causal)")
    p.add_argument("--batch", type=int, default=1, help="batch size")
    p.add_argument("--heads", type=int, default=1, help="query heads")
    p.add_argument("--kv-heads", type=int, default=None,
                   help="key/value heads (default: --heads; fewer = grouped-query attention)")
    p.add_argument("--inputs", default=None, metavar="FILE.npz",
                   help="take Q, K, V (and dO) from an .npz file instead of random inputs")
    p.add_argument("--allow-nonfinite", action="store_true",
                   help="accept NaN/inf inputs and propagate them as the reference does")
    p.add_argument("--budget", type=float, default=None, metavar="SECONDS",
                   help="refuse compute-mode runs estimated to take longer (default 300)")
    p.add_argument("--force", action="store_true", help="run even beyond --budget")
    p.add_argument("--backward", action="store_true",
                   help="also run the backward pass (flash2) and count it separately")
    p.add_argument("--scale", type=float, default=None, help="softmax scale (default 1/sqrt(d))")
    p.add_argument("--count-only", action="store_true", help="count mode: shapes only, no arithmetic")
    p.add_argument("--seed", type=int, default=0, help="seed of the random inputs")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--tiling", default=None,
                   help="tiling: JSON fields of the algorithm's tiling, e.g. '{\"Br\": 64, \"Bc\": 8}' "
                        "(flash2); square_tiling and matmul also take a rule name (auto, paper, "
                        "square, outer) or a side B")
    p.add_argument("--eps", type=float, default=None,
                   help="approximate algorithms (approx_poly): relative error of the polynomial "
                        "approximation of exp (default 1e-3)")
    p.add_argument("--entry-bound", type=float, default=None, metavar="B",
                   help="approx_poly: bound on |Q|, |K| entries (random inputs are drawn in "
                        "[-B, B]; default for drawing: 1)")
    p.add_argument("--allow-unbounded", action="store_true",
                   help="approx_poly: run on entries beyond --entry-bound (the error guarantee "
                        "is lost; a warning says so)")
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
            from ..core.errors import ParameterError

            raise ParameterError(f"--tiling is not valid JSON ({e.msg}): {text!r}") from None
        return obj
    return t


def load_inputs(path: str, need_grad: bool):
    """Q, K, V (and dO) from an .npz file; clear errors for a missing file or array."""
    from ..core.errors import ParameterError

    try:
        with np.load(path) as f:
            missing = [k for k in ("Q", "K", "V") + (("dO",) if need_grad else ()) if k not in f]
            if missing:
                raise ParameterError(
                    f"--inputs {path}: missing array(s) {missing}; it holds {sorted(f.files)}"
                )
            return f["Q"], f["K"], f["V"], (f["dO"] if need_grad else None)
    except OSError as e:
        raise ParameterError(f"--inputs {path}: cannot read it ({e.strerror or e})") from None
    except (ValueError, EOFError) as e:
        if isinstance(e, ParameterError):
            raise
        raise ParameterError(f"--inputs {path}: not an .npz file ({e or 'empty file'})") from None


def main_matmul(args) -> int:
    """``attnio run matmul --m --k --n --M``: C = A·B on the simulator, with the COSMA ratio."""
    from ..blocks.matmul import run_matmul
    from ..core.errors import ParameterError

    missing = [f"--{x}" for x in ("m", "k", "n") if getattr(args, x) is None]
    if missing:
        raise ParameterError(f"matmul needs {', '.join(missing)} (C = A·B with A m×k, B k×n)")
    tiling = parse_tiling(args.tiling)
    if args.count_only:
        res = run_matmul(shape=(args.m, args.k, args.n), M=args.M, tiling=tiling)
        err = None
    else:
        from ..blocks.matmul import MatmulShape

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
    from .. import algorithms, run
    from ..blocks.matmul import ALGORITHM as MATMUL
    from ..core import reference
    from ..core.errors import ParameterError

    if args.list:
        for name in algorithms.names():
            print(f"{name:16s} {algorithms.get(name).summary}")
        print(f"{MATMUL.name:16s} {MATMUL.summary} (a building block, not attention)")
        return 0
    if not args.algorithm:
        raise ParameterError("algorithm: name one of " + ", ".join(algorithms.names() + ["matmul"]))
    if args.algorithm == "matmul":
        return main_matmul(args)
    alg = algorithms.get(args.algorithm)
    tiling = parse_tiling(args.tiling)
    approx_opts = {}
    if args.entry_bound is not None and not (args.entry_bound > 0 and np.isfinite(args.entry_bound)):
        raise ParameterError(f"--entry-bound must be a finite real number > 0, got {args.entry_bound}")
    if not alg.exact:  # approx_poly: --eps, --entry-bound, --allow-unbounded go into its tiling
        approx_opts = {k: v for k, v in (("eps", args.eps), ("entry_bound", args.entry_bound))
                       if v is not None}
        if args.allow_unbounded:
            approx_opts["allow_unbounded"] = True
        if tiling is None or isinstance(tiling, dict):
            tiling = {**(tiling or {}), **approx_opts}
    elif args.eps is not None or args.entry_bound is not None or args.allow_unbounded:
        raise ParameterError(f"--eps/--entry-bound/--allow-unbounded apply to approximate "
                             f"algorithms; {alg.name} is exact")
    from ..core.checks import check_int
    from ..core.workload import Shape
    from ..runner import DEFAULT_BUDGET_S

    for flag in ("N", "Nq", "Nkv", "d", "M", "batch", "heads", "kv_heads"):
        if getattr(args, flag) is not None:
            check_int("--" + flag.replace("_", "-"), getattr(args, flag), minimum=1)
    check_int("--seed", args.seed, minimum=0)
    Nq = args.Nq if args.Nq is not None else args.N
    Nkv = args.Nkv if args.Nkv is not None else args.N
    kvh = args.kv_heads if args.kv_heads is not None else args.heads
    shape = Shape(Nq, Nkv, args.d, batch=args.batch, heads=args.heads, kv_heads=kvh)
    causal = args.causal or False
    budget = DEFAULT_BUDGET_S if args.budget is None else args.budget
    opts = dict(M=args.M, causal=causal, window=args.window, scale=args.scale, tiling=tiling,
                backward=args.backward, allow_nonfinite=args.allow_nonfinite, budget_s=budget,
                force=args.force)
    err = grad_err = None
    if args.count_only:
        if args.inputs:
            raise ParameterError("--inputs gives data: drop --count-only to run on it")
        opts = {k: v for k, v in opts.items() if k not in ("allow_nonfinite",)}
        res = run(alg.name, shape=shape, mode="count", **opts)
    else:
        if args.inputs:
            Q, K, V, dO = load_inputs(args.inputs, args.backward)
        else:
            rng = np.random.default_rng(args.seed)
            four = shape.n_heads > 1
            qs = (args.batch, args.heads, Nq, args.d) if four else (Nq, args.d)
            ks = (args.batch, kvh, Nkv, args.d) if four else (Nkv, args.d)
            Q, K, V = rng.standard_normal(qs), rng.standard_normal(ks), rng.standard_normal(ks)
            if not alg.exact:  # inputs inside the method's precondition |Q|, |K| <= B
                eb = args.entry_bound if args.entry_bound is not None else 1.0
                Q, K = rng.uniform(-eb, eb, qs), rng.uniform(-eb, eb, ks)
            dO = rng.standard_normal(qs) if args.backward else None
        res = run(alg.name, Q, K, V, grad_output=dO, **opts)
        shape = res.shape
        Nq, Nkv = shape.Nq, shape.Nkv
        args.d, args.batch, args.heads, kvh = shape.d, shape.batch, shape.heads, shape.kv_heads
        ref = reference.attention(Q, K, V, causal=causal, scale=args.scale, window=args.window)
        with np.errstate(invalid="ignore"):
            diff = np.abs(res.output - ref)
        err = float(np.nanmax(diff)) if np.isfinite(diff).any() else float("nan")
        if args.backward:
            refg = reference.attention_backward(Q, K, V, dO, causal=causal, scale=args.scale,
                                                window=args.window)
            grad_err = max(float(np.abs(res.grads[k] - g).max())
                           for k, g in zip(("dQ", "dK", "dV"), refg))
    io = res.io
    if args.json:
        obj = {
            "algorithm": alg.name, "N": Nq, "Nq": Nq, "Nkv": Nkv, "d": args.d, "M": args.M,
            "causal": bool(causal), "causal_align": res.shape.causal_align if causal else None,
            "window": args.window, "batch": args.batch, "heads": args.heads, "kv_heads": kvh,
            "reads": io.reads, "writes": io.writes, "total": io.total,
            "peak": io.peak, "max_abs_err": err, "tiling": tiling_dict(res.tiling),
            "mode": res.mode,
        }
        if not alg.exact and err is not None:
            obj["guaranteed_error"] = res.tiling.error_bound_for(V)
        if args.backward:
            b = res.backward_io
            obj["backward"] = {"reads": b.reads, "writes": b.writes, "total": b.total,
                               "peak": b.peak, "tiling": tiling_dict(res.backward_tiling),
                               "max_abs_grad_err": grad_err}
        print(json.dumps(obj, sort_keys=True))
        return 0
    size = f"N={Nq}" if Nq == Nkv else f"Nq={Nq} Nkv={Nkv}"
    heads = ""
    if shape.n_heads > 1:
        heads = f" batch={args.batch} heads={args.heads} kv_heads={kvh}"
    mask = f" causal={causal}" if causal else ""
    mask += f" window={args.window}" if args.window else ""
    print(f"{alg.name}  {size} d={args.d}{heads} M={args.M}{mask}  ({res.mode} mode)")
    print(f"  tiling   {tiling_dict(res.tiling)}")
    print(f"  reads    {io.reads:,}")
    print(f"  writes   {io.writes:,}")
    print(f"  total    {io.total:,}")
    print(f"  peak     {io.peak:,} of M={args.M:,} words")
    if err is not None:
        print(f"  max |O - reference| = {err:.3e}")
    if not alg.exact:
        t = res.tiling
        line = (f"  approx   degree {t.degree} ({t.variant}), r = {t.r:,}, R = {t.radius:.4g}, "
                f"kernel error <= {t.kernel_error:.3g}")
        if err is not None:
            line += f"; guaranteed max |O - reference| <= {t.error_bound_for(V):.3e}"
        print(line)
    if args.backward:
        b = res.backward_io
        print(f"  backward tiling {tiling_dict(res.backward_tiling)}")
        print(f"  backward reads {b.reads:,}  writes {b.writes:,}  total {b.total:,}  "
              f"peak {b.peak:,}  (forward + backward {io.total + b.total:,})")
        if grad_err is not None:
            print(f"  max |grad - reference| = {grad_err:.3e}")
    return 0
