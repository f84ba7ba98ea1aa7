"""``attnio trace ALGO``: record a schedule's element trace and write it (npz and/or Dinero din)."""

from __future__ import annotations

NAME = "trace"
HELP = "record the element trace of a schedule (the addresses a cache would see) and write it"


def add_arguments(p) -> None:
    p.add_argument("algorithm", help="a registered attention algorithm")
    p.add_argument("--N", type=int, default=64, help="sequence length (Nq = Nkv = N)")
    p.add_argument("--d", type=int, default=16, help="head dimension")
    p.add_argument("--M", type=int, default=1024, help="fast-memory words of the explicit schedule")
    p.add_argument("--causal", action="store_true", help="causal (bottom-right aligned) mask")
    p.add_argument("--out", default=None,
                   help="write the trace: FILE.npz (compressed; from attnio.trace import load) or "
                        "FILE.din (Dinero text: '0|1 hexaddr', byte addresses)")
    p.add_argument("--din", default=None, help="also write Dinero din text to this file")
    p.add_argument("--word-bytes", type=int, default=8,
                   help="bytes per word for din byte addresses (default 8)")
    p.add_argument("--max-products", type=float, default=2e8,
                   help="refuse traces whose score products Nq·Nkv·d exceed this (default 2e8; "
                        "a trace has several events per product)")


def main(args) -> int:
    import os

    from ..cachesim.tracing import trace
    from ..core.checks import check_int
    from ..core.errors import ParameterError

    check_int("--N", args.N, minimum=1)
    check_int("--d", args.d, minimum=1)
    check_int("--M", args.M, minimum=1)
    check_int("--word-bytes", args.word_bytes, minimum=1)
    for flag, path in (("--out", args.out), ("--din", args.din)):
        if path:  # checked before the trace is recorded, not after
            folder = os.path.dirname(os.path.abspath(path))
            if not os.path.isdir(folder) or not os.access(folder, os.W_OK):
                raise ParameterError(f"{flag} {path}: its folder {folder} does not exist or is "
                                     "not writable")
    if args.out and not args.out.endswith((".npz", ".din")):
        raise ParameterError(f"--out must end in .npz or .din, got {args.out!r}")
    products = args.N * args.N * args.d
    if products > args.max_products:
        raise ParameterError(
            f"--N {args.N} --d {args.d}: the trace would hold more than {products:,} events "
            f"(N²·d > --max-products {args.max_products:g}); use `attnio run --count-only` for "
            "counts, or raise --max-products"
        )
    t = trace(args.algorithm, args.N, args.d, args.M, causal=args.causal)
    print(f"{t.meta['algorithm']}  N={args.N} d={args.d} M={args.M}"
          f"{' causal' if args.causal else ''}  tiling {t.meta['tiling']}")
    print(f"  events   {len(t):,}")
    ex = t.meta["explicit"]
    print(f"  explicit reads {ex['reads']:,} writes {ex['writes']:,}")
    print("  arrays   " + ", ".join(f"{a.name}[{a.size}]@{a.base}" for a in t.arrays.values()))
    outs = []
    if args.out:
        if args.out.endswith(".din"):
            outs.append(("din", args.out))
        else:
            outs.append(("npz", args.out))
    if args.din:
        outs.append(("din", args.din))
    for kind, path in outs:
        if kind == "npz":
            t.save(path)
        else:
            t.write_din(path, word_bytes=args.word_bytes)
        print(f"  wrote    {path} ({kind})")
    return 0
