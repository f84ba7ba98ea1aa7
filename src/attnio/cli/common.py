"""The one vocabulary of flags every verb that takes a workload shares.

A verb calls :func:`add_workload_arguments` (and :func:`add_memory_arguments`,
:func:`add_resource_arguments`, :func:`add_output_arguments` where they apply), then
:func:`workload_from_args` to build the :class:`~attnio.core.workload.Shape`, the one place the
workload is validated, and :func:`memory_from_args` for the fast-memory size.  Errors the library
raises carry the API name of the parameter they concern (``ParameterError.param``);
:func:`flag_message` prints them with the flag that sets it (:data:`FLAGS`), never by reading
the message's wording.

Flags: ``--N --Nq --Nkv --d --heads --kv-heads --batch --causal [bottom_right|top_left] --window``
(workload), ``--block-mask FILE.npy | --density S`` with ``--block-size B --layout-seed N``
(block-sparse attention, :func:`add_sparsity_arguments`), ``--backward`` and
``--backward-algorithm NAME`` (:func:`add_backward_arguments`), ``--M | --M-bytes | --device`` and
``--dtype`` (fast memory), ``--tiling`` where an algorithm is named, ``--budget --force
--max-memory`` where work is allocated, ``--json`` and ``--quiet`` everywhere.

>>> from attnio.core import ParameterError
>>> flag_message(ParameterError("kv_heads must be an integer >= 1, got 0", param="kv_heads"))
'--kv-heads must be an integer >= 1, got 0'
>>> flag_message(ParameterError("heads must be a multiple of kv_heads, got heads=3 and "
...                             "kv_heads=2", param="kv_heads"))
'--kv-heads: heads must be a multiple of kv_heads, got heads=3 and kv_heads=2'
"""

from __future__ import annotations

import argparse
from typing import TypedDict

from ..core import (
    ALIGNMENTS,
    DEFAULT_BUDGET_S,
    AttnioError,
    FastMemory,
    LayoutRequest,
    Limits,
    ParameterError,
    Progress,
    ResourceError,
    Shape,
    check_input_file,
    check_output_path,
    check_real,
    parse_bytes,
    written_whole,
)

__all__ = ["FLAGS", "add_backward_arguments",
           "add_memory_arguments", "add_output_arguments", "add_resource_arguments",
           "add_sparse_workload_arguments", "add_sparsity_arguments", "add_tiling_argument",
           "add_workload_arguments",
           "backward_from_args", "block_mask_from_args", "flag_message",
           "check_input_file", "check_output_path", "limits_from_args", "memory_from_args",
           "memory_note",
           "parse_tiling", "progress_from_args", "resources_from_args",
           "schedule_tiling_from_args", "workload_from_args", "written_whole"]

#: API argument name -> the flag that sets it (for error messages in the user's words).
FLAGS = {
    "N": "--N", "Nq": "--Nq", "Nkv": "--Nkv", "d": "--d", "M": "--M", "heads": "--heads",
    "kv_heads": "--kv-heads", "batch": "--batch", "causal": "--causal",
    "causal_align": "--causal", "window": "--window", "dtype": "--dtype", "device": "--device",
    "dtype_bytes": "--dtype", "M_bytes": "--M-bytes", "tiling": "--tiling", "eps": "--eps",
    "approx_eps": "--eps", "entry_bound": "--entry-bound", "scale": "--scale",
    "seed": "--seed", "budget_s": "--budget", "backward": "--backward",
    "backward_tiling": "--tiling", "shape": "--N/--d",
    "max_memory": "--max-memory", "time_limit": "--time-limit", "policies": "--policies",
    "m": "--m", "k": "--k", "n": "--n", "q": "--q", "binary": "--binary",
    "block_mask": "--block-mask", "density": "--density", "block_size": "--block-size",
    "block_mask.bq": "--block-size", "block_mask.bk": "--block-size",
    "layout_seed": "--layout-seed", "backward_algorithm": "--backward-algorithm",
    "out": "--out", "din": "--din", "plan": "`attnio plan`",
    "inputs": "--inputs", "allow_nonfinite": "--allow-nonfinite", "force": "--force",
    "allow_unbounded": "--allow-unbounded", "radius": "--entry-bound",
    "db": "--db", "config": "--config", "formats": "--formats", "dpi": "--dpi",
    "figs_per_axis": "--figs-per-axis", "max_figures": "--max-figures",
    "measurements": "--measurements", "where": "--where", "pivot": "--pivot",
    "caption": "--caption", "label": "--label", "value": "--value", "format": "--format",
}

_DEFAULTS = "_workload_defaults"


def add_workload_arguments(p: argparse.ArgumentParser, *, N: int | None = None,
                           d: int | None = None, heads: bool = True, mask: bool = True,
                           Nq: bool = True) -> None:
    """The workload flags.  ``N``/``d``: defaults (None: the flag is required).

    ``heads=False`` leaves out ``--heads --kv-heads --batch``, ``mask=False`` ``--causal
    --window``, ``Nq=False`` ``--Nq`` (for verbs whose solver is limited to what is left).  A flag
    the user did not type reads None in the namespace; :func:`workload_from_args` fills in the
    defaults, so a verb can tell what was typed.
    """
    g = p.add_argument_group("workload")
    g.add_argument("--N", type=int, default=None,
                   help="sequence length (Nq = Nkv = N)" + (f"; default {N}" if N else ""))
    if Nq:
        g.add_argument("--Nq", type=int, default=None, help="queries per head (instead of --N)")
    g.add_argument("--Nkv", type=int, default=None, help="keys/values per head (default: as --N)")
    g.add_argument("--d", type=int, default=None,
                   help="head dimension" + (f"; default {d}" if d else ""))
    if heads:
        g.add_argument("--heads", type=int, default=None, help="query heads (default 1)")
        g.add_argument("--kv-heads", dest="kv_heads", type=int, default=None,
                       help="key/value heads (default --heads; fewer: grouped-query attention)")
        g.add_argument("--batch", type=int, default=None, help="batch size (default 1)")
    if mask:
        g.add_argument("--causal", nargs="?", const="bottom_right", default=None,
                       choices=ALIGNMENTS,
                       help="causal mask, bottom-right aligned (default) or top_left")
        g.add_argument("--window", type=int, default=None,
                       help="sliding window: each query sees its W most recent keys (needs "
                            "--causal)")
    p.set_defaults(**{_DEFAULTS: {"N": N, "d": d}})


def add_sparsity_arguments(p: argparse.ArgumentParser) -> None:
    """Block-sparse attention: ``--block-mask FILE.npy`` (a boolean layout of query blocks x key
    blocks saved with ``numpy.save``) or ``--density S`` (a random layout keeping a fraction S in
    (0, 1] of the blocks, drawn with ``--layout-seed``), blocks of ``--block-size B`` (default:
    :func:`default_block_size`, the flash2 tile side for M; for a file, N / its rows)."""
    g = p.add_argument_group("block-sparse attention")
    g.add_argument("--block-mask", dest="block_mask", default=None, metavar="FILE.npy",
                   help="a boolean block layout (query blocks x key blocks, numpy.save); "
                        "block sizes N/rows and Nkv/columns unless --block-size")
    g.add_argument("--density", type=float, default=None, metavar="S",
                   help="a random block layout keeping a fraction S in (0, 1] of the blocks")
    g.add_argument("--block-size", dest="block_size", type=int, default=None, metavar="B",
                   help="blocks of B queries x B keys (default with --density: the largest "
                        "power of two <= M/(4d), at most N: flash2's tile side)")
    g.add_argument("--layout-seed", dest="layout_seed", type=int, default=None, metavar="N",
                   help="seed of the --density layout (default 0)")


def add_sparse_workload_arguments(p: argparse.ArgumentParser, *, N: int | None = None,
                                  d: int | None = None, default_M: int | None = None) -> None:
    """The flags of a verb that takes a (possibly block-sparse) workload and a fast memory: the
    workload flags, the block-sparse ones (whose default block size depends on M) and the memory
    flags; :func:`workload_from_args`, :func:`memory_from_args` and
    :func:`block_mask_from_args` read them."""
    add_workload_arguments(p, N=N, d=d)
    add_sparsity_arguments(p)
    add_memory_arguments(p, default_M=default_M)


def add_backward_arguments(p: argparse.ArgumentParser, *, what: str = "the backward pass"
                           ) -> None:
    """``--backward`` and ``--backward-algorithm NAME`` (a registered backward schedule; default:
    the least-I/O one for the workload and M)."""
    from ..algorithms import backward_names

    p.add_argument("--backward", action="store_true", help=f"also {what}")
    p.add_argument("--backward-algorithm", dest="backward_algorithm", default=None,
                   metavar="NAME",
                   help="the backward schedule (with --backward): " + ", ".join(backward_names())
                        + " (default: the one of least I/O)")


def backward_from_args(args: argparse.Namespace) -> str | None:
    """The ``--backward-algorithm`` name, checked: a registered schedule, and only with
    ``--backward``."""
    from ..algorithms import get_backward

    name = getattr(args, "backward_algorithm", None)
    if name is None:
        return None
    if not getattr(args, "backward", False):
        raise ParameterError("--backward-algorithm applies to the backward pass: add --backward",
                             param="backward_algorithm")
    return get_backward(name).name


def block_mask_from_args(args: argparse.Namespace, shape: Shape, M: int) -> Shape:
    """``shape`` with the layout of ``--block-mask`` or ``--density`` (unchanged without them):
    the rules are :class:`attnio.core.LayoutRequest`'s, its errors worded in flags."""
    request = LayoutRequest(path=getattr(args, "block_mask", None),
                            density=getattr(args, "density", None),
                            block_size=getattr(args, "block_size", None),
                            layout_seed=getattr(args, "layout_seed", None))
    bm = request.block_mask(shape.Nq, shape.Nkv, d=shape.d, M=M,
                            masked=shape.causal or shape.window is not None)
    return shape if bm is None else shape.with_mask(block_mask=bm)


def add_memory_arguments(p: argparse.ArgumentParser, *, required: bool = True,
                         default_M: int | None = None) -> None:
    """``--M`` (words), ``--M-bytes`` (with ``--dtype``) or ``--device`` (a preset), and ``--dtype``."""
    from ..hardware import names

    g = p.add_mutually_exclusive_group(required=required and default_M is None)
    g.add_argument("--M", type=int, default=default_M,
                   help="fast-memory capacity in words" + (f" (default {default_M})"
                                                            if default_M else ""))
    g.add_argument("--M-bytes", type=int, dest="M_bytes",
                   help="fast-memory capacity in bytes (with --dtype)")
    g.add_argument("--device", help="a device preset: " + ", ".join(names()))
    p.add_argument("--dtype", default=None,
                   help="element type: bytes per word for --M-bytes, --device and byte counts "
                        "(float16, bfloat16, float32, float64, fp8; default float16 with --device)")


def add_tiling_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("--tiling", default=None,
                   help="the algorithm's tiling: a JSON object of its fields, e.g. "
                        "'{\"Br\": 64, \"Bc\": 8}' (flash2); square_tiling and matmul also take a "
                        "rule name (auto, paper, square, outer) or a side B")


def add_schedule_arguments(p: argparse.ArgumentParser, *, N: int, d: int, default_M: int) -> None:
    """The arguments of a verb that runs one schedule: ``ALGO``, the workload flags (defaults
    ``--N N --d d``), ``--M`` (default ``default_M``) and ``--tiling``."""
    p.add_argument("algorithm", help="a registered attention algorithm")
    add_workload_arguments(p, N=N, d=d)
    add_memory_arguments(p, default_M=default_M)
    add_tiling_argument(p)
    p.add_argument("--entry-bound", dest="entry_bound", type=float, default=None, metavar="B",
                   help="approximate algorithms (approx_poly): the bound B on |Q|, |K| entries "
                        "their polynomial is built for (there are no inputs to measure)")


def schedule_tiling_from_args(args: argparse.Namespace, alg: object) -> object:
    """``--tiling`` with ``--entry-bound`` merged in (approximate algorithms only)."""

    tiling = parse_tiling(args.tiling)
    eb = getattr(args, "entry_bound", None)
    if eb is None:
        return tiling
    eb = check_real("entry_bound", eb, lo=0, lo_open=True)
    if getattr(alg, "exact", True):
        raise ParameterError(f"--entry-bound applies to approximate algorithms; "
                             f"{getattr(alg, 'name', alg)} is exact", param="entry_bound")
    if tiling is not None and not isinstance(tiling, dict):
        raise ParameterError("--entry-bound goes into a JSON --tiling (or none), not a rule name",
                             param="entry_bound")
    return {**(tiling or {}), "entry_bound": eb}


def add_resource_arguments(p: argparse.ArgumentParser, *, budget: bool = True) -> None:
    """``--budget SECONDS``, ``--force`` and ``--max-memory SIZE``."""
    if budget:
        p.add_argument("--budget", type=float, default=None, metavar="SECONDS",
                       help="refuse work estimated to take longer (default 300)")
        p.add_argument("--force", action="store_true", help="run even beyond --budget")
    p.add_argument("--max-memory", dest="max_memory", default=None, metavar="SIZE",
                   help="refuse work estimated to need more memory, e.g. 8G (default: what the "
                        "machine has available)")


def add_output_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--quiet", action="store_true", help="no progress display")


def workload_from_args(args: argparse.Namespace) -> Shape:
    """The :class:`Shape` the workload flags describe (validated once, by Shape itself)."""
    defaults = getattr(args, _DEFAULTS, {}) or {}
    N = args.N if args.N is not None else defaults.get("N")
    Nq = getattr(args, "Nq", None)
    d = args.d if args.d is not None else defaults.get("d")
    if N is None and Nq is None:
        raise ParameterError("--N (or --Nq and --Nkv) is required", param="N")
    if d is None:
        raise ParameterError("--d is required", param="d")
    if Nq is not None and args.N is not None and args.Nkv is not None:
        raise ParameterError("give --N, or --Nq and --Nkv, not all three", param="Nq")
    causal = getattr(args, "causal", None)
    return Shape.make(N if Nq is None else None, d, Nq=Nq, Nkv=args.Nkv,
                      batch=_or(getattr(args, "batch", None), 1),
                      heads=_or(getattr(args, "heads", None), 1),
                      kv_heads=getattr(args, "kv_heads", None), causal=causal or False,
                      window=getattr(args, "window", None))


def _or(x: int | None, default: int) -> int:
    return default if x is None else x


def memory_from_args(args: argparse.Namespace) -> FastMemory:
    """``--M``, ``--M-bytes --dtype`` or ``--device [--dtype]`` as words of fast memory
    (:func:`attnio.planner.fast_memory`, the one place that turns them into words)."""
    from ..planner import fast_memory

    device, M_bytes = getattr(args, "device", None), getattr(args, "M_bytes", None)
    M = args.M if device is None and M_bytes is None else None  # --M may carry a verb's default
    return fast_memory(M, M_bytes=M_bytes, dtype_bytes=getattr(args, "dtype", None), device=device)


def memory_note(args: argparse.Namespace) -> str | None:
    """Where ``--M`` came from when ``--device`` or ``--M-bytes`` gave it (None otherwise, or
    when those flags are themselves wrong): added to an error that names ``--M``."""
    if not hasattr(args, "M_bytes"):  # a verb without the memory flags
        return None
    device, M_bytes = args.device, args.M_bytes
    if device is None and M_bytes is None:
        return None
    try:
        mem = memory_from_args(args)
    except (AttnioError, ValueError):  # the flags are wrong themselves: that error was printed
        return None
    if device is not None:
        return f"--M here: {mem.M:,} words from --device {mem.device}"
    return f"--M here: {mem.M:,} words from --M-bytes {M_bytes}"


def limits_from_args(args: argparse.Namespace):
    """The :class:`~attnio.core.resources.Limits` of ``--budget``, ``--force`` and
    ``--max-memory``."""

    return Limits(**resources_from_args(args))


class Resources(TypedDict, total=False):
    """The keyword arguments :func:`resources_from_args` gives (budget_s and force only where
    the command has --budget)."""

    budget_s: float
    force: bool
    max_memory: int | None


def resources_from_args(args: argparse.Namespace) -> Resources:
    """``budget_s``, ``force``, ``max_memory`` keyword arguments from the resource flags."""

    out: Resources = {}
    if hasattr(args, "budget"):
        budget = DEFAULT_BUDGET_S if args.budget is None else args.budget
        out["budget_s"] = check_real("budget_s", budget, lo=0, what="seconds")
        out["force"] = bool(args.force)
    mm = getattr(args, "max_memory", None)
    out["max_memory"] = None if mm is None else parse_bytes(mm, "max_memory")
    return out


def progress_from_args(args: argparse.Namespace, description: str, total: float | None = None,
                       **kw: object):
    """A :class:`~attnio.core.progress.Progress` (off with ``--quiet`` or ``--json``)."""

    quiet = getattr(args, "quiet", False) or getattr(args, "json", False)
    return Progress(description, total, enabled=False if quiet else None, **kw)  # type: ignore[arg-type]


#: The longest --tiling accepted (a tiling is a few fields; a longer text is a mistake).
MAX_TILING_CHARS = 10_000


def _clip(text: str, most: int = 60) -> str:
    """``text`` quoted, cut to ``most`` characters (an error line stays one short line)."""
    return repr(text) if len(text) <= most else repr(text[:most]) + f"... ({len(text):,} characters)"


def parse_tiling(text: str | None) -> object:
    """--tiling: None, a rule name, an int side, or a JSON object of tiling fields."""
    import json

    if text is None:
        return None
    t = text.strip()
    if t.lstrip("-").isdigit():
        return int(t)
    if t[:1] in ("{", "[", '"'):
        if len(t) > MAX_TILING_CHARS:
            raise ParameterError(f"--tiling is {len(t):,} characters long, more than "
                                 f"{MAX_TILING_CHARS:,}; a tiling is a few fields",
                                 param="tiling")
        try:
            obj = json.loads(t)
        except json.JSONDecodeError as e:
            raise ParameterError(f"--tiling is not valid JSON ({e.msg}): {_clip(text)}",
                                 param="tiling") from None
        except RecursionError:  # [[[[...]]]] nested thousands deep
            raise ParameterError("--tiling is nested too deeply; a tiling is a JSON object of "
                                 "numbers and names, e.g. '{\"Br\": 64, \"Bc\": 8}'",
                                 param="tiling") from None
        if not isinstance(obj, dict):
            raise ParameterError(f"--tiling must be a JSON object, got {_clip(text)}",
                                 param="tiling")
        return obj
    return t


def flag_message(err: BaseException, flags: dict[str, str] | None = None) -> str:
    """The first line of ``err``, naming the flag of the parameter it concerns.

    The flag comes from ``err.param`` (:data:`FLAGS`, with ``flags`` added), never from the
    message's wording: a message whose subject is the parameter (``"kv_heads must be ..."``, as
    every check of :mod:`attnio.core.checks` words it) gets the flag as its subject; any other
    message is prefixed with the flag, unless it names the flag already (an error the command
    line raised itself).  A refusal for resources (:class:`~attnio.core.resources.ResourceError`)
    is reworded with the limit's flag and ``--force``.
    """

    table = FLAGS if flags is None else {**FLAGS, **flags}
    param = getattr(err, "param", None)
    flag = _flag(table, param)
    if isinstance(err, ResourceError) and flag is not None:
        return err.limit_message(flag, "--force")
    if getattr(err, "template", None) is not None:  # other parameters named in it: their flags
        msg = err.render(lambda k: _flag(table, k))  # type: ignore[attr-defined]
    else:
        msg = str(err)
    msg = msg.splitlines()[0] if msg else type(err).__name__
    if flag is None or msg.startswith(flag):
        return msg
    assert isinstance(param, str)
    if msg.startswith(param) and msg[len(param):len(param) + 1] in (" ", "=", ":"):
        return flag + msg[len(param):]
    return f"{flag}: {msg}"


def _flag(table: dict[str, str], param: object) -> str | None:
    """The flag of ``param``; a field of a structured flag (``tiling.Br``) reads ``--tiling's
    Br``."""
    if not isinstance(param, str):
        return None
    if param in table:
        return table[param]
    head, _, field = param.partition(".")
    return f"{table[head]}'s {field}" if field and head in table else None
