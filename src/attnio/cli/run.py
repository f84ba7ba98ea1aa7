"""``attnio run ALGO``: run one algorithm on the simulator and print its counts.

Before anything is drawn or loaded, the memory and time of the run (and of the float64
reference it is checked against) are estimated and refused in one line beyond the machine
(``--max-memory``) or ``--budget``.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from ..core import ParameterError, ResourceError, check_int, check_real
from .common import (
    add_backward_arguments,
    add_output_arguments,
    add_resource_arguments,
    add_sparse_workload_arguments,
    add_tiling_argument,
    backward_from_args,
    block_mask_from_args,
    limits_from_args,
    memory_from_args,
    parse_tiling,
    progress_from_args,
    workload_from_args,
)

NAME = "run"
HELP = "run an algorithm on the simulated two-level memory and print its I/O"

DEFAULT_N, DEFAULT_D, DEFAULT_M = 1024, 64, 16384


def add_arguments(p) -> None:
    p.add_argument("algorithm", help="a registered algorithm (see `attnio run --list`)", nargs="?")
    p.add_argument("--list", action="store_true", help="list the registered algorithms and exit")
    add_sparse_workload_arguments(p, N=DEFAULT_N, d=DEFAULT_D, default_M=DEFAULT_M)
    add_tiling_argument(p)
    p.add_argument("--count-only", action="store_true", help="count mode: shapes only, no arithmetic")
    add_backward_arguments(p, what="run the backward pass and count it separately")
    p.add_argument("--scale", type=float, default=None, help="softmax scale (default 1/sqrt(d))")
    p.add_argument("--seed", type=int, default=0, help="seed of the random inputs")
    p.add_argument("--inputs", default=None, metavar="FILE.npz",
                   help="take Q, K, V (and dO) from an .npz file instead of random inputs")
    p.add_argument("--allow-nonfinite", action="store_true",
                   help="accept NaN/inf inputs and propagate them as the reference does")
    a = p.add_argument_group("approximate algorithms (approx_poly)")
    a.add_argument("--eps", type=float, default=None,
                   help="relative error of the polynomial approximation of exp (default 1e-3)")
    a.add_argument("--entry-bound", type=float, default=None, metavar="B",
                   help="bound on |Q|, |K| entries (random inputs are drawn in [-B, B]; "
                        "default for drawing: 1)")
    a.add_argument("--allow-unbounded", action="store_true",
                   help="run on entries beyond --entry-bound (the error guarantee is lost; a "
                        "warning says so)")
    m = p.add_argument_group("the matmul building block (attnio run matmul)")
    m.add_argument("--m", type=int, default=None, help="rows of A and C")
    m.add_argument("--k", type=int, default=None, help="columns of A, rows of B")
    m.add_argument("--n", type=int, default=None, help="columns of B and C")
    add_resource_arguments(p)
    add_output_arguments(p)


def tiling_dict(t: Any) -> dict:
    if dataclasses.is_dataclass(t) and not isinstance(t, type):  # an instance: a tiling
        return dataclasses.asdict(t)
    return dict(t or {})


# ---------------------------------------------------------------------- --inputs
def shape_of_inputs(source, args) -> Any:
    """The Shape an --inputs file's arrays give (read from their headers), with the mask flags;
    a typed size flag that disagrees with the file is refused (the file decides the sizes)."""
    import dataclasses as dc


    sizes = source.shape(source.header(args.backward))
    have = {"Nq": sizes.Nq, "Nkv": sizes.Nkv, "d": sizes.d, "batch": sizes.batch,
            "heads": sizes.heads, "kv_heads": sizes.kv_heads}
    typed = {"N": args.N, "Nq": args.Nq, "Nkv": args.Nkv, "d": args.d, "batch": args.batch,
             "heads": args.heads, "kv_heads": args.kv_heads}
    for flag, value in typed.items():
        if value is None:
            continue
        got = have["Nq"] if flag == "N" else have[flag]
        if flag == "N" and have["Nkv"] != value:
            got = have["Nkv"] if have["Nq"] == value else got
        if value != got:
            name = "--" + flag.replace("_", "-")
            raise ParameterError(f"{name} {value} conflicts with --inputs {source.path}, whose "
                                 f"arrays give {flag} = {got}: drop {name} (the file sets the "
                                 "sizes)", param="inputs")
    return dc.replace(sizes, causal=args.causal or False, window=args.window)


# ---------------------------------------------------------------------- matmul
def main_matmul(args) -> int:
    """``attnio run matmul --m --k --n --M``: C = A·B on the simulator, with the COSMA ratio."""
    from ..blocks import MatmulShape, matmul_check

    missing = [f"--{x}" for x in ("m", "k", "n") if getattr(args, x) is None]
    if missing:
        raise ParameterError(f"matmul needs {', '.join(missing)} (C = A·B with A m×k, B k×n)",
                             param=missing[0][2:])
    mem = memory_from_args(args)
    M = mem.M
    tiling = parse_tiling(args.tiling)
    shape = MatmulShape(args.m, args.k, args.n)
    limits = limits_from_args(args)
    mode = "count" if args.count_only else "compute"
    try:
        with progress_from_args(args, f"matmul m={args.m} k={args.k} n={args.n}",
                                unit="tile steps") as bar:
            chk = matmul_check(shape, M, tiling=tiling, mode=mode, seed=args.seed,
                               limits=limits, progress=bar)
    except ResourceError as e:  # the alternatives, in flags
        raise e.instead_of("use --count-only (same counts), or smaller --m, --k and --n") \
            from None
    res, err = chk.result, chk.max_abs_err
    io = res.io
    if args.json:
        obj = {"algorithm": "matmul", "m": args.m, "k": args.k, "n": args.n, "M": M,
               "reads": io.reads, "writes": io.writes, "total": io.total, "peak": io.peak,
               "bound": res.bound, "ratio": res.ratio, "max_abs_err": err,
               "tiling": tiling_dict(res.tiling), "mode": res.mode,
               "per_array": _per_array(io)}
        obj.update(_bytes(io, mem))
        print(json.dumps(obj, sort_keys=True))
        return 0
    print(f"matmul  m={args.m} k={args.k} n={args.n} M={M}  ({res.mode} mode)")
    print(f"  tiling   {tiling_dict(res.tiling)}")
    _print_counts(io, M, mem)
    print(f"  bound    {res.bound:,.0f}  (COSMA Thm 1: 2mnk/sqrt(M) + mn); ratio {res.ratio:.3f}")
    if err is not None:
        print(f"  max |C - A@B| = {err:.3e}")
    return 0


def _per_array(io) -> dict:
    return {k: {"reads": v.reads, "writes": v.writes} for k, v in io.per_array.items()}


def _bytes(io, mem) -> dict:
    """Byte counts when --dtype or --device says how wide a word is."""
    if mem.dtype_bytes is None:
        return {}
    b = mem.dtype_bytes
    return {"dtype_bytes": b, "device": mem.device, "M_bytes": mem.M * b,
            "bytes": {"reads": io.reads * b, "writes": io.writes * b, "total": io.total * b}}


def _print_counts(io, M: int, mem) -> None:
    b = mem.dtype_bytes
    print(f"  reads    {io.reads:,}" + (f"  ({io.reads * b:,} bytes)" if b else ""))
    print(f"  writes   {io.writes:,}" + (f"  ({io.writes * b:,} bytes)" if b else ""))
    print(f"  total    {io.total:,}" + (f"  ({io.total * b:,} bytes)" if b else ""))
    print(f"  peak     {io.peak:,} of M={M:,} words")


# ---------------------------------------------------------------------- attention
def flag_names(args) -> dict[str, str] | None:
    """With --density, the layout the library calls ``block_mask`` came from --density."""
    return {"block_mask": "--density"} if args.density is not None else None


def main(args) -> int:
    """Parse the flags into one :func:`attnio.run` call (which validates, estimates, refuses,
    runs, checks against the reference and certifies) and print its Result."""
    from .. import algorithms, run
    from ..blocks import MATMUL
    from ..runner import BackwardPass, NpzInputs, RandomInputs

    if args.list:
        for name in algorithms.names():
            print(f"{name:16s} {algorithms.get(name).summary}")
        print(f"{MATMUL.name:16s} {MATMUL.summary} (a building block, not attention)")
        return 0
    if not args.algorithm:
        raise ParameterError("name an algorithm: " + ", ".join(algorithms.names() + ["matmul"]),
                             param="algorithm")
    if args.algorithm == "matmul":
        return main_matmul(args)
    alg = algorithms.get(args.algorithm)
    tiling = _tiling_from_args(args, alg)
    mem = memory_from_args(args)
    source: Any = None
    if not args.count_only:
        source = (NpzInputs(args.inputs) if args.inputs else
                  RandomInputs(args.seed, args.entry_bound if not alg.exact else None))
    shape = (shape_of_inputs(source, args) if isinstance(source, NpzInputs)
             else workload_from_args(args))
    bwd_name = backward_from_args(args)
    shape = block_mask_from_args(args, shape, mem.M)
    mode = "count" if args.count_only else "compute"
    try:
        with progress_from_args(args, f"{alg.name} {shape.describe()}", unit="tile steps") as bar:
            res = run(alg.name, shape=shape, M=mem.M, mode=mode, scale=args.scale, tiling=tiling,
                      backward=BackwardPass(bwd_name) if args.backward else False,
                      inputs=source, check=source is not None, limits=limits_from_args(args),
                      progress=bar, allow_nonfinite=args.allow_nonfinite)
    except ResourceError as e:  # the run's alternatives, in flags
        raise e.instead_of(
            "use --count-only (same counts) or a smaller --N" if mode == "compute"
            else "use `attnio plan` (closed forms) or a smaller --N") from None
    return _report(args, alg, res, mem)


def _tiling_from_args(args, alg) -> Any:
    """--tiling, with --eps/--entry-bound/--allow-unbounded for an approximate algorithm; the
    flags that do not apply to this algorithm or mode refused."""

    for flag in ("m", "k", "n"):
        if getattr(args, flag) is not None:
            raise ParameterError(f"--{flag} is for `attnio run matmul`; attention takes --N/--d",
                                 param=flag)
    check_int("seed", args.seed, minimum=0)
    if args.count_only and args.inputs:
        raise ParameterError("--inputs gives data: drop --count-only to run on it",
                             param="inputs")
    if args.count_only and args.allow_nonfinite:
        raise ParameterError("--allow-nonfinite is about input data: drop it with --count-only",
                             param="allow_nonfinite")
    tiling = parse_tiling(args.tiling)
    if args.entry_bound is not None:
        check_real("entry_bound", args.entry_bound, lo=0, lo_open=True)
    if alg.exact:
        if args.eps is not None or args.entry_bound is not None or args.allow_unbounded:
            raise ParameterError(f"--eps/--entry-bound/--allow-unbounded apply to approximate "
                                 f"algorithms; {alg.name} is exact", param="eps")
        return tiling
    approx_opts: dict[str, Any] = {k: v for k, v in (("eps", args.eps),
                                                     ("entry_bound", args.entry_bound))
                                   if v is not None}
    if args.allow_unbounded:
        approx_opts["allow_unbounded"] = True
    if tiling is None or isinstance(tiling, dict):
        tiling = {**(tiling or {}), **approx_opts}
    if args.count_only and args.entry_bound is None and alg.count_needs(tiling) == "entry_bound":
        raise ParameterError(f"{alg.name} in count mode needs --entry-bound B (|Q|, |K| entries "
                             "<= B; there are no inputs to measure), e.g. --entry-bound 1",
                             param="entry_bound")
    return tiling


def _certificate(res) -> dict[str, Any]:
    """The run's certificates (:func:`attnio.runner.certificate`, attached by the run) as the
    flat keys the output prints: ``bound``, ``bound_name``, ``ratio`` and ``backward_*``."""
    out = res.certificate.to_dict()
    if res.backward_certificate is not None:
        out.update(res.backward_certificate.to_dict("backward_"))
    return out


def _report(args, alg, res, mem) -> int:
    shape, io, M = res.shape, res.io, res.M
    err, grad_err = res.max_abs_err, res.max_abs_grad_err
    cert = _certificate(res)
    if args.json:
        obj = {
            "algorithm": alg.name, "N": shape.Nq, "Nq": shape.Nq, "Nkv": shape.Nkv,
            "d": shape.d, "M": M, "causal": shape.causal,
            "causal_align": shape.causal_align if shape.causal else None,
            "window": shape.window, "batch": shape.batch, "heads": shape.heads,
            "kv_heads": shape.kv_heads, "reads": io.reads, "writes": io.writes,
            "total": io.total, "peak": io.peak, "max_abs_err": err,
            "tiling": tiling_dict(res.tiling), "mode": res.mode, "per_array": _per_array(io),
        }
        obj.update(_bytes(io, mem))
        obj.update(cert)
        if shape.block_mask is not None:
            obj["block_mask"] = shape.block_mask.describe()
            obj["density"] = shape.block_mask.density
        if res.error_bound is not None:
            obj["guaranteed_error"] = res.error_bound
        if args.backward:
            b = res.backward_io
            obj["backward_algorithm"] = res.backward_algorithm
            obj["backward"] = {"algorithm": res.backward_algorithm,
                               "reads": b.reads, "writes": b.writes, "total": b.total,
                               "peak": b.peak, "tiling": tiling_dict(res.backward_tiling),
                               "max_abs_grad_err": grad_err, "per_array": _per_array(b)}
            obj["backward"].update(_bytes(b, mem))
        print(json.dumps(obj, sort_keys=True))
        return 0
    print(f"{alg.name}  {shape.describe()} M={M}  ({res.mode} mode)")
    print(f"  tiling   {tiling_dict(res.tiling)}")
    _print_counts(io, M, mem)
    ratio = f"{cert['ratio']:.3f}" if cert["ratio"] is not None else "n/a (approximate)"
    print(f"  bound    {cert['bound']:,.0f}  ({cert['bound_name']}, the best explicit); "
          f"ratio {ratio}")
    if err is not None:
        print(f"  max |O - reference| = {err:.3e}")
    if not alg.exact:
        line = f"  approx   {res.tiling.describe()}"
        if res.error_bound is not None:
            line += f"; guaranteed max |O - reference| <= {res.error_bound:.3e}"
        print(line)
    if args.backward:
        b = res.backward_io
        print(f"  backward {res.backward_algorithm}  tiling {tiling_dict(res.backward_tiling)}")
        print(f"  backward reads {b.reads:,}  writes {b.writes:,}  total {b.total:,}  "
              f"peak {b.peak:,}  (forward + backward {io.total + b.total:,})")
        br = cert["backward_ratio"]
        print(f"  backward bound {cert['backward_bound']:,.0f}  ({cert['backward_bound_name']}); "
              f"ratio {'n/a' if br is None else f'{br:.3f}'}")
        if grad_err is not None:
            print(f"  max |grad - reference| = {grad_err:.3e}")
    return 0
