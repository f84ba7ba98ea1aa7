"""``attnio sweep``: run a grid of configurations into the results database; ``attnio sweep
export``: write the database as csv, json or parquet."""

from __future__ import annotations

import argparse
import os
import sys

from ..core import ParameterError

NAME = "sweep"
HELP = "run a grid of configurations into a SQLite results database (resumable)"
DESCRIPTION = (
    "Run every configuration of a grid that the results database does not hold yet. "
    "Value lists: START:STOP:xF (geometric), START:STOP:+S, or commas (e.g. --N 256:16384:x2 "
    "--d 16,64,128). The flags make one grid, the product of their values, with meaningful "
    "configurations only: a --window pairs with the causal masks of --causal (never with none), "
    "a --kv-heads value with the --heads it divides. Configurations an algorithm cannot run are "
    "stored as skipped rows with the reason; with --backward, an algorithm without a backward "
    "pass keeps its forward row, marked 'forward only'. "
    "`attnio sweep export --format csv|json|parquet|latex --out FILE` exports the database."
)
EPILOG = """\
several grids in one sweep: a TOML file of [[grid]] tables (--config FILE), each a grid with
the keys N Nq Nkv d M algo causal mode seed eps entry_bound batch heads kv_heads window verify
backward (values as on the command line, or TOML lists), e.g. unmasked attention and causal
attention with sliding windows and grouped-query heads:

  [[grid]]
  N = "1024:16384:x2"
  d = 64
  M = "4096,65536"
  causal = "none"

  [[grid]]
  N = "1024:16384:x2"
  d = 64
  M = "4096,65536"
  causal = "true"
  window = "none,512,4096"
  heads = 32
  kv_heads = "8,32"

  attnio sweep --config grids.toml --db results.sqlite
"""
#: Grid keys and the flags that set them (an error about a key names the flag the user typed).
FLAGS = {"N": "--N", "Nq": "--Nq", "Nkv": "--Nkv", "d": "--d", "M": "--M", "algo": "--algo",
         "causal": "--causal", "mode": "--mode", "seed": "--seed", "eps": "--eps",
         "entry_bound": "--entry-bound", "batch": "--batch", "heads": "--heads",
         "kv_heads": "--kv-heads", "window": "--window"}
#: Parameters that only ever come from a flag.
OWN_FLAGS = {"jobs": "--jobs", "max_configs": "--max-configs", "scheduler": "--scheduler",
             "config": "--config", "preset": "--preset", "db": "--db", "out": "--out",
             "where": "--where", "pivot": "--pivot", "caption": "--caption", "label": "--label",
             "value": "--value", "format": "--format"}
DEFAULT_DB = "attnio-results.sqlite"


def add_arguments(p) -> None:
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.epilog = EPILOG
    p.add_argument("--db", default=DEFAULT_DB, help=f"results database (default {DEFAULT_DB})")
    p.add_argument("--preset", default=None, help="a named sweep: paper (the reproduction sweep), smoke")
    p.add_argument("--config", default=None, metavar="TOML", help="grid(s) from a TOML file")
    p.add_argument("--N", default=None, help="sequence lengths (Nq = Nkv = N), e.g. 256:16384:x2")
    p.add_argument("--Nq", default=None, help="query counts (with --Nkv, instead of --N)")
    p.add_argument("--Nkv", default=None, help="key/value counts (with --Nq)")
    p.add_argument("--d", default=None, help="head dimensions, e.g. 16,64,128 (default 64)")
    p.add_argument("--M", default=None, help="fast-memory sizes in words, e.g. 256:1048576:x4")
    p.add_argument("--algo", default=None, help="'all' (default), names, or kind:KIND; "
                        "'plan' adds the planner's choice per configuration as a series")
    p.add_argument("--causal", default=None,
                   help="none/false (default), bottom_right/true, top_left, both (none + "
                        "bottom_right), all (none + bottom_right + top_left), or a comma list")
    p.add_argument("--batch", default=None, help="batch sizes (default 1), e.g. 1,4")
    p.add_argument("--heads", default=None, help="query heads per batch element (default 1)")
    p.add_argument("--kv-heads", dest="kv_heads", default=None,
                   help="key/value heads (grouped-query attention; default: as many as --heads)")
    p.add_argument("--window", default=None,
                   help="sliding windows, paired with the causal masks of --causal only, e.g. "
                        "none,64,256 (default none)")
    p.add_argument("--verify", action="store_true", default=None,
                   help="also replay each exact schedule's element trace through LRU and OPT at "
                        "M and 2M (count mode; traces of at most 2e6 events)")
    p.add_argument("--backward", action="store_true", default=None,
                   help="also count each algorithm's backward pass (the least-I/O backward "
                        "schedule) with its certificate: backward_* columns (an algorithm "
                        "without one keeps its forward row, marked 'forward only')")
    p.add_argument("--mode", default=None, choices=("count", "compute"),
                   help="count (shapes only, default) or compute (random data, max error)")
    p.add_argument("--seed", type=int, default=None, help="seed of the compute-mode inputs")
    p.add_argument("--eps", default=None, metavar="E[,E...]",
                   help="error target(s) for approximate algorithms, e.g. 1e-2 or "
                        "1e-1,1e-2,1e-3 (one row per target; else they are skipped)")
    p.add_argument("--entry-bound", dest="entry_bound", type=float, default=None,
                   help="approximate algorithms: entry bound B with |Q|, |K| <= B (default 1)")
    p.add_argument("--jobs", type=int, default=None,
                   help="local worker processes, 1 to 256 (default all cores; never more than "
                        "the grid has configurations)")
    p.add_argument("--scheduler", default=None, metavar="tcp://HOST:PORT",
                   help="run on this Dask distributed scheduler")
    p.add_argument("--dask", action="store_true", help="run on a local Dask distributed cluster")
    p.add_argument("--dry-run", action="store_true",
                   help="print what would run (counting what --db already holds); write nothing")
    p.add_argument("--max-configs", dest="max_configs", type=int, default=None,
                   help="refuse a grid of more configurations than this (default 1,000,000)")
    p.add_argument("--quiet", action="store_true", help="no progress bar and no summary")
    sub = p.add_subparsers(dest="action", metavar="ACTION")
    e = sub.add_parser("export", help="export the results database")
    e.add_argument("--db", default=argparse.SUPPRESS, help=f"results database (default {DEFAULT_DB})")
    e.add_argument("--format", dest="format", default=None,
                   choices=("csv", "json", "parquet", "latex"),
                   help="output format (default: from --out's extension; .tex is latex): csv "
                        "and parquet add a column per tiling parameter and per bound, latex "
                        "writes a booktabs table of the rows that ran")
    e.add_argument("--out", default=None, help="output file (default attnio-results.FORMAT)")
    e.add_argument("--where", default=None, metavar="FIELD=VALUE,...",
                   help="only the rows that match every condition, e.g. "
                        "'d=64,causal=true,algorithm=flash1|flash2' (| separates alternatives)")
    e.add_argument("--caption", default=None, help="latex: the table's caption (a table float)")
    e.add_argument("--label", default=None, help="latex: the table's \\label")
    e.add_argument("--pivot", default=None, metavar="ROW,COLUMN",
                   help="latex: one line per value of ROW, one column per value of COLUMN, each "
                        "cell the --value field (e.g. --pivot N,algorithm)")
    e.add_argument("--value", default=None, metavar="FIELD",
                   help="latex with --pivot: the field in each cell (default total)")
    e.add_argument("--longtable", action="store_true",
                   help="latex: a longtable (breaks across pages; \\usepackage{longtable})")
    e.add_argument("--quiet", action="store_true", default=argparse.SUPPRESS)


def _grids(args):
    from ..experiments import PRESETS, Grid, grid_from_mapping, grids_from_toml, override_grid

    flags = {k: getattr(args, k) for k in ("N", "Nq", "Nkv", "d", "M", "algo", "causal", "mode",
                                           "seed", "eps", "entry_bound", "batch", "heads",
                                           "kv_heads", "window", "verify", "backward")
             if getattr(args, k, None) is not None}
    if args.preset and args.config:
        raise ParameterError("give --preset or --config, not both", param="preset")
    if args.preset:
        if args.preset not in PRESETS:
            raise ParameterError(f"preset: unknown {args.preset!r} (known: {', '.join(PRESETS)})",
                                 param="preset")
        grids = PRESETS[args.preset]
        over = {k: v for k, v in flags.items()
                if k in ("algo", "mode", "seed", "eps", "entry_bound", "verify", "backward")}
        if set(flags) - set(over):
            raise ParameterError("--preset fixes the sizes; drop --N/--d/--M/--causal/--batch/"
                                 "--heads/--kv-heads/--window or use --config")
        return [override_grid(g, over) for g in grids]
    if args.config:
        grids = grids_from_toml(args.config)
        return [override_grid(g, flags) for g in grids] if flags else grids
    if "N" not in flags and "Nq" not in flags:
        raise ParameterError("give --N (or --Nq and --Nkv), a --config TOML or a --preset",
                             param="N")
    return [grid_from_mapping(flags, where="flags")] if flags else [Grid()]


def main(args) -> int:

    given = {k for k in FLAGS if getattr(args, k, None) is not None}
    try:
        if getattr(args, "action", None) == "export":
            return _export(args)
        return _sweep(args)
    except ParameterError as e:
        raise _flagged(e, given) from None
    except OSError as e:  # a disk or file error: one line naming the flag and the file
        path = e.filename if e.filename is not None else args.db
        flag = "--config" if path == getattr(args, "config", None) else (
            "--out" if path == getattr(args, "out", None) else "--db")
        raise ParameterError(f"{flag} {os.fspath(path)!r}: {e.strerror or e}",
                             param=flag[2:]) from None


def _flagged(e, given: set[str]):
    """The error in the flag the user typed, from the parameter it names (``e.param``): a grid
    key given as a flag, or a parameter only a flag sets; else the error as it is (a key of a
    --config file or a --preset)."""

    p = e.param
    flag = OWN_FLAGS.get(p) or (FLAGS.get(p) if p in given else None)
    if flag is None:
        return e
    msg = str(e)
    if msg.startswith(flag):  # worded with the flag already
        return e
    for head in (f"{p}:", f"{p} "):
        if msg.startswith(head):
            return ParameterError(flag + msg[len(p):], param=p)
    return ParameterError(f"{flag}: {msg}", param=p)


def _sweep(args) -> int:
    from ..experiments import DEFAULT_MAX_CONFIGS, SweepInterrupted, dry_run, run_sweep
    from .common import check_input_file, check_output_path

    if args.config:  # a named pipe or a device: refused, never read (it would block)
        check_input_file(args.config, "--config")
    if args.dry_run:  # read only (a missing file: an empty database)
        check_input_file(args.db, "--db", required=False)
    else:  # written in place (SQLite): a regular file or nothing yet, never the --config
        check_output_path(args.db, "--db", inputs=[("--config", args.config)])
    grids = _grids(args)
    limit = DEFAULT_MAX_CONFIGS if args.max_configs is None else args.max_configs
    if args.dry_run:
        plan = dry_run(grids, args.db, max_configs=limit)
        print(plan)
        if plan.reasons:
            print("  skipped, by reason (configurations  algorithm: reason):")
        for (alg, why), n in sorted(plan.reasons.items(), key=lambda kv: (-kv[1], kv[0])):
            print(f"  {n:>8,}  {alg}: {why}")
        return 0
    try:
        summary = run_sweep(grids, args.db, jobs=args.jobs, scheduler=args.scheduler,
                            dask=args.dask, progress=not args.quiet, max_configs=limit)
    except SweepInterrupted as e:
        import signal

        for sig in (signal.SIGINT, signal.SIGTERM):  # a second signal: the exit is under way
            signal.signal(sig, signal.SIG_IGN)
        print(f"attnio sweep: {e.line()}", file=sys.stderr)
        return 130
    if not args.quiet:
        print(summary)
    if summary.errors:  # exit 1 never silent: the count and where the messages are, on stderr
        print(f"attnio sweep: {summary.errors:,} configuration(s) failed; their rows in "
              f"{args.db} hold the error (status 'error'; a rerun retries them)", file=sys.stderr)
    return 1 if summary.errors else 0


def _export(args) -> int:
    from ..experiments import LatexOptions, ResultsStore, export_target
    from .common import check_input_file, check_output_path, written_whole

    latex = None
    if any(x is not None for x in (args.caption, args.label, args.pivot, args.value)) \
            or args.longtable:
        pivot = None
        if args.pivot is not None:
            parts = tuple(p.strip() for p in args.pivot.split(","))
            if len(parts) != 2:
                raise ParameterError(f"--pivot must be ROW,COLUMN (two fields), got "
                                     f"{args.pivot!r}", param="pivot")
            pivot = (parts[0], parts[1])
        if args.value is not None and pivot is None:
            raise ParameterError("--value goes with --pivot", param="value")
        latex = LatexOptions(args.caption, args.label, args.longtable, pivot,
                             args.value or "total")
    fmt, out = export_target(args.format, args.out, latex=latex is not None)
    if latex is not None and fmt != "latex":
        first = next(f for f, v in (("--caption", args.caption), ("--label", args.label),
                                    ("--pivot", args.pivot), ("--value", args.value),
                                    ("--longtable", args.longtable or None)) if v is not None)
        raise ParameterError(f"{first} is for a latex export: give --format latex or an "
                             "--out ending in .tex", param=first[2:])
    # the database (or a link to it) is never the output; a device, a FIFO, a directory neither
    check_input_file(args.db, "--db", required=False)
    check_output_path(out, "--out", inputs=[("--db", args.db)])
    with ResultsStore(args.db, readonly=True) as st:
        # written whole beside --out (the same extension: the format), then renamed over it; a
        # full disk or a read-only file system leaves nothing behind and the old file as it was
        with written_whole("--out", out) as tmp:
            n = st.export(tmp, fmt, where=args.where, latex=latex)
    if not getattr(args, "quiet", False):
        print(f"wrote {n} rows to {out}")
    return 0
