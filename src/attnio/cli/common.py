"""The one vocabulary of flags every verb that takes a workload shares.

A verb calls :func:`add_workload_arguments` (and :func:`add_memory_arguments`,
:func:`add_output_arguments` where they apply), then :func:`workload_from_args` to build the
:class:`~attnio.core.workload.Shape`, the one place the workload is validated.  Errors the library
raises name API arguments (``kv_heads``); :func:`flag_message` rewrites them with the flags the
user typed (``--kv-heads``).

Flags: ``--N --Nq --Nkv --d --heads --kv-heads --batch --causal [bottom_right|top_left] --window
--dtype --device``, ``--tiling`` where an algorithm is named, ``--json`` and ``--quiet``
everywhere.
"""

from __future__ import annotations

import argparse
import re

from ..core.errors import ParameterError
from ..core.workload import ALIGNMENTS, Shape

__all__ = ["FLAGS", "add_memory_arguments", "add_output_arguments", "add_workload_arguments",
           "flag_message", "workload_from_args"]

#: API argument name -> the flag that sets it (for error messages in the user's words).
FLAGS = {
    "N": "--N", "Nq": "--Nq", "Nkv": "--Nkv", "d": "--d", "M": "--M", "heads": "--heads",
    "kv_heads": "--kv-heads", "batch": "--batch", "causal": "--causal",
    "causal_align": "--causal", "window": "--window", "dtype": "--dtype", "device": "--device",
    "dtype_bytes": "--dtype", "M_bytes": "--M-bytes", "tiling": "--tiling", "eps": "--eps",
    "approx_eps": "--eps", "entry_bound": "--entry-bound", "scale": "--scale",
    "seed": "--seed", "budget_s": "--budget", "backward": "--backward",
    "backward_tiling": "--tiling", "mode": "--count-only", "shape": "--N/--d",
}


def add_workload_arguments(p: argparse.ArgumentParser, *, N: int | None = None,
                           d: int | None = None) -> None:
    """The workload flags.  ``N``/``d``: defaults (None makes the flag required)."""
    g = p.add_argument_group("workload")
    g.add_argument("--N", type=int, default=N,
                   help="sequence length (Nq = Nkv = N)" + (f"; default {N}" if N else ""))
    g.add_argument("--Nq", type=int, default=None, help="queries per head (overrides --N)")
    g.add_argument("--Nkv", type=int, default=None, help="keys/values per head (overrides --N)")
    g.add_argument("--d", type=int, default=d,
                   help="head dimension" + (f"; default {d}" if d else ""))
    g.add_argument("--heads", type=int, default=1, help="query heads per batch element")
    g.add_argument("--kv-heads", dest="kv_heads", type=int, default=None,
                   help="key/value heads (default --heads; fewer: grouped-query attention)")
    g.add_argument("--batch", type=int, default=1, help="batch size")
    g.add_argument("--causal", nargs="?", const="bottom_right", default=None, choices=ALIGNMENTS,
                   help="causal mask, bottom-right aligned (default) or top_left")
    g.add_argument("--window", type=int, default=None,
                   help="sliding window: each query sees its W most recent keys (needs --causal)")


def add_memory_arguments(p: argparse.ArgumentParser, *, required: bool = True,
                         default_M: int | None = None) -> None:
    """``--M`` (words), ``--M-bytes`` (with ``--dtype``) or ``--device`` (a preset), and ``--dtype``."""
    g = p.add_mutually_exclusive_group(required=required and default_M is None)
    g.add_argument("--M", type=int, default=default_M,
                   help="fast-memory capacity in words" + (f" (default {default_M})"
                                                            if default_M else ""))
    g.add_argument("--M-bytes", type=int, dest="M_bytes",
                   help="fast-memory capacity in bytes (with --dtype)")
    g.add_argument("--device", help="a device preset (`attnio gpu devices` lists them)")
    p.add_argument("--dtype", default=None,
                   help="element type for --M-bytes/--device (float16, bfloat16, float32, fp8; "
                        "default float16 with --device)")


def add_output_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--quiet", action="store_true", help="no progress display")


def workload_from_args(args: argparse.Namespace) -> Shape:
    """The :class:`Shape` the workload flags describe (validated once, by Shape itself)."""
    if args.N is None and args.Nq is None:
        raise ParameterError("--N (or --Nq and --Nkv) is required", param="N")
    if args.d is None:
        raise ParameterError("--d is required", param="d")
    N = args.N if args.N is not None else args.Nq
    return Shape.make(N, args.d, Nq=args.Nq, Nkv=args.Nkv if args.Nkv is not None else None,
                      batch=args.batch, heads=args.heads, kv_heads=args.kv_heads,
                      causal=args.causal or False, window=args.window)


def flag_message(err: BaseException, flags: dict[str, str] | None = None) -> str:
    """The first line of ``err`` with API argument names replaced by the flags that set them.

    Only whole words followed by ``=``, `` must``, `` is``, `` needs``, `` conflicts``, ``:``,
    `` (`` or ``,`` are rewritten, so a ``d`` in prose is left alone.
    """
    msg = str(err).splitlines()[0] if str(err) else type(err).__name__
    table = FLAGS if flags is None else {**FLAGS, **flags}
    param = getattr(err, "param", None)

    def sub(m: re.Match[str]) -> str:
        name = m.group(1)
        return table.get(name, name) + m.group(2)

    names = "|".join(sorted((re.escape(k) for k in table), key=len, reverse=True))
    msg = msg.replace("pass causal=True", "pass --causal").replace("causal=True", "--causal")
    pattern = rf"(?<![\w.\-])({names})(=| must\b| is\b| needs\b| conflicts\b|:| \(|,)"
    out = re.sub(pattern, sub, msg)
    if param in table and table[param] not in out:
        out = f"{table[param]}: {out}"
    return out
