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


def main(args) -> int:
    from ..errors import ParameterError
    from ..trace import trace

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
        elif args.out.endswith(".npz"):
            outs.append(("npz", args.out))
        else:
            raise ParameterError(f"--out must end in .npz or .din, got {args.out!r}")
    if args.din:
        outs.append(("din", args.din))
    for kind, path in outs:
        if kind == "npz":
            t.save(path)
        else:
            t.write_din(path, word_bytes=args.word_bytes)
        print(f"  wrote    {path} ({kind})")
    return 0
