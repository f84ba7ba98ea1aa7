"""``attnio plan``: the least-I/O algorithm and tiling for given sizes, with its distance to the bound."""

from __future__ import annotations

import json

NAME = "plan"
HELP = "pick the least-I/O algorithm and tiling for (N, d, M) and report its distance to the bound"


def add_memory_arguments(p) -> None:
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--M", type=int, help="fast-memory capacity in words")
    g.add_argument("--M-bytes", type=int, dest="M_bytes",
                   help="fast-memory capacity in bytes (with --dtype)")
    g.add_argument("--device", help="a hardware preset: " + ", ".join(_device_names()))
    p.add_argument("--dtype", default=None,
                   help="element type for --M-bytes/--device (float16, bfloat16, float32, ...; "
                        "default float16 with --device)")


def _device_names():
    from ..hardware.devices import names

    return names()


def resolve_M(args) -> tuple[int, int | None, str | None]:
    """(M in words, bytes per word or None, device name or None) from the CLI arguments."""
    from ..core.errors import ParameterError
    from ..hardware import devices

    db = devices.dtype_bytes(args.dtype) if args.dtype is not None else None
    if args.device is not None:
        dev = devices.get(args.device)
        db = db or 2
        return dev.words(db), db, dev.name
    if args.M_bytes is not None:
        if db is None:
            raise ParameterError("--M-bytes needs --dtype (e.g. --dtype float16)")
        return devices.words_for(args.M_bytes, db), db, None
    return args.M, db, None


def add_arguments(p) -> None:
    p.add_argument("--N", type=int, required=True, help="sequence length (queries)")
    p.add_argument("--Nkv", type=int, default=None, help="keys/values (default N)")
    p.add_argument("--d", type=int, required=True, help="head dimension")
    add_memory_arguments(p)
    p.add_argument("--causal", nargs="?", const="bottom_right", default=None,
                   choices=["bottom_right", "top_left"],
                   help="causal mask, bottom-right aligned (default) or top_left")
    p.add_argument("--window", type=int, default=None, help="sliding window (needs --causal)")
    p.add_argument("--batch", type=int, default=1, help="batch size (counts multiply)")
    p.add_argument("--heads", type=int, default=1, help="query heads (counts multiply)")
    p.add_argument("--kv-heads", type=int, default=None, dest="kv_heads",
                   help="key/value heads (default --heads; fewer: grouped-query attention)")
    p.add_argument("--backward", action="store_true", help="plan forward + backward")
    p.add_argument("--eps", type=float, default=None,
                   help="also score approximate algorithms with this error target")
    p.add_argument("--entry-bound", type=float, default=None, dest="entry_bound",
                   help="with --eps: bound B on the entries of Q and K (|q|, |k| <= B)")
    p.add_argument("--json", action="store_true", help="print one JSON object")


def main(args) -> int:
    from .. import plan

    M, db, device = resolve_M(args)
    kw = dict(Nkv=args.Nkv, causal=args.causal or False, heads=args.heads, batch=args.batch,
              kv_heads=args.kv_heads, window=args.window, backward=args.backward,
              dtype_bytes=db, approx_eps=args.eps, entry_bound=args.entry_bound)
    if device is not None:
        p = plan(args.N, args.d, device=device, **kw)
    else:
        p = plan(args.N, args.d, M, **kw)
    if args.json:
        print(json.dumps(p.to_dict(), sort_keys=True, default=str))
    else:
        print(repr(p))
    return 0
