"""``attnio trace ALGO``: record a schedule's element trace and write it (npz and/or Dinero din)."""

from __future__ import annotations

import json

from ..core import ParameterError, ResourceError, check_int, check_real
from . import common

NAME = "trace"
HELP = "record the element trace of a schedule (the addresses a cache would see) and write it"


def add_arguments(p) -> None:
    common.add_schedule_arguments(p, N=64, d=16, default_M=1024)
    p.add_argument("--out", default=None,
                   help="write the trace: FILE.npz (compressed; attnio.cachesim.tracing.load reads "
                        "it) or FILE.din (Dinero text: '0|1 hexaddr', byte addresses)")
    p.add_argument("--din", default=None, help="also write Dinero din text to this file")
    p.add_argument("--word-bytes", type=int, default=8,
                   help="bytes per word for din byte addresses (default 8)")
    p.add_argument("--max-products", type=float, default=2e8,
                   help="refuse traces whose score products Nq·Nkv·d (all heads) exceed this "
                        "(default 2e8; a trace has several events per product)")
    common.add_resource_arguments(p)
    common.add_output_arguments(p)


def check_out_path(flag: str, path: str | None, other: tuple[str, str | None] = ("", None)
                   ) -> None:
    """A file we are about to write, checked before the trace is recorded: a regular file or
    nothing yet (never a device, a named pipe, a socket or a folder), in a writable folder, and
    not the file the ``other`` output (flag, path) names."""

    if not path:
        return
    common.check_output_path(path, flag)
    oflag, opath = other
    if opath and _same_file(path, opath):
        raise ParameterError(f"{flag} {path} is the same file as {oflag} {opath}; give two "
                             "different files", param=flag[2:])


def _same_file(a: str, b: str) -> bool:
    import os

    try:
        if os.path.samefile(a, b):
            return True
    except OSError:
        pass
    return os.path.realpath(a) == os.path.realpath(b)


def flag_names(args) -> dict[str, str]:
    """The trace's size limit and its alternative, in flags."""
    return {"max_products": "--max-products", "count_mode": "`attnio run --count-only`"}


def main(args) -> int:
    from .. import algorithms
    from ..cachesim import record_trace

    alg = algorithms.get(args.algorithm)
    shape = common.workload_from_args(args)
    M = common.memory_from_args(args).M
    check_int("--word-bytes", args.word_bytes, minimum=1)
    check_real("--max-products", args.max_products, lo=1)
    check_out_path("--out", args.out)  # before the trace is recorded, not after
    check_out_path("--din", args.din, ("--out", args.out))
    if args.out and not args.out.endswith((".npz", ".din")):
        raise ParameterError(f"--out must end in .npz or .din, got {args.out!r}", param="out")
    limits = common.limits_from_args(args)
    tiling = common.schedule_tiling_from_args(args, alg)
    with common.progress_from_args(args, f"recording the trace of {alg.name} {shape.describe()}",
                            unit="tile steps") as bar:
        try:
            t = record_trace(alg.name, M, shape=shape, tiling=tiling, limits=limits,
                             max_products=args.max_products, progress=bar)
        except ResourceError as e:
            raise e.instead_of("count without a trace (`attnio run --count-only`) or use a "
                               "smaller --N") from None
        outs = []
        if args.out:
            outs.append(("din" if args.out.endswith(".din") else "npz", args.out, "--out"))
        if args.din:
            outs.append(("din", args.din, "--din"))
        for kind, path, flag in outs:
            bar.describe(f"writing {path}")
            with common.written_whole(flag, path) as tmp:
                if kind == "npz":
                    t.save(tmp)
                else:
                    t.write_din(tmp, word_bytes=args.word_bytes)
    ex = t.meta["explicit"]
    if args.json:
        print(json.dumps({"algorithm": t.meta["algorithm"], **{k: t.meta[k] for k in (
            "Nq", "Nkv", "d", "M", "causal", "window", "batch", "heads", "kv_heads", "tiling")},
            "events": len(t), "explicit": ex,
            "arrays": {a.name: {"size": a.size, "base": a.base} for a in t.arrays.values()},
            "written": [p for _, p, _ in outs]}, sort_keys=True))
        return 0
    print(f"{t.meta['algorithm']}  {shape.describe()} M={M}  tiling {t.meta['tiling']}")
    print(f"  events   {len(t):,}")
    print(f"  explicit reads {ex['reads']:,} writes {ex['writes']:,}")
    print("  arrays   " + ", ".join(f"{a.name}[{a.size}]@{a.base}" for a in t.arrays.values()))
    for kind, path, _ in outs:
        print(f"  wrote    {path} ({kind})")
    return 0
