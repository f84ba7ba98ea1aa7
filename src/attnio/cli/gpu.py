"""``attnio gpu``: the GPU model: devices, flash-attn's kernel tables, score one config, tune.

    attnio gpu devices [--json]
    attnio gpu kernels [--device h100] [--kernel fa3] [--dtype bf16] [--json]
    attnio gpu score --N 8192 --d 128 --heads 16 --batch 2 --device h100 --kernel fa3 [--json]
    attnio gpu score --N 8192 --d 128 --config Br=128,Bc=176,stages=2,warps=12 [--json]
    attnio gpu tune  --Nq 1 --Nkv 65536 --d 128 --heads 32 --kv-heads 8 --top 5 [--json]
    attnio gpu validate --measurements FILE.csv [--json]
    attnio gpu calibrate --measurements FILE.csv --out calib.json
    attnio gpu score ... --device-file my_gpu.toml --calibration calib.json

``--device-file FILE.toml`` (every verb) describes a GPU outside the preset table
(:mod:`attnio.hardware.device_file`, docs/devices.md "Your own GPU"); ``--calibration FILE``
(``score``, ``tune``, ``validate``) uses the parameters ``gpu calibrate`` fitted to a user's
measurements.  A device whose generation has no fitted parameters gets one warning line naming
the generation whose fit it borrows.
"""

from __future__ import annotations

import json
import sys
import warnings

from ..core import AttnioError, ParameterError
from .common import (
    add_output_arguments,
    add_workload_arguments,
    check_input_file,
    flag_message,
    workload_from_args,
)

NAME = "gpu"
HELP = "the GPU model: devices, kernel tables, score a kernel config, tune tiles"
DESCRIPTION = ("A hardware-faithful model above the two-level simulator: registers, shared "
               "memory, a parallel L2 and the SMs (docs/hardware.md).")

#: API names -> the flags (and --config keys) that set them, for error messages.
GPU_FLAGS = {"config": "--config", "kernel": "--kernel", "top": "--top",
             "algorithm": "--algorithm", "Br": "--config Br", "Bc": "--config Bc",
             "warps": "--config warps", "stages": "--config stages", "q": "--config q",
             "p": "--config p", "o": "--config o", "pack_gqa": "--config pack",
             "splits": "--config splits", "overlap": "--config overlap", "ws": "--config ws",
             "page_size": "--config page",
             "max_replays": "--max-replays", "dtype": "--dtype", "fa1": "--config fa1",
             "backward": "--backward", "device_file": "--device-file",
             "calibration": "--calibration", "measurements": "--measurements", "out": "--out"}

_VALIDATE_HELP = (
    "rows: device, kernel, pass (fwd|bwd|fwd+bwd), dtype, d, causal (0/1), N, batch, heads, and "
    "tflops or time_s (the calibration set's format; other columns are ignored). Optional: Nq "
    "and Nkv (queries and keys per head, default N; decode: Nq=1), window (sliding window, "
    "causal rows), kv_heads (GQA/MQA K/V heads, default heads), page_size (paged K/V page, "
    "tokens, forward fa2/fa3 rows: flash-attn's paged config, paged K/V's HBM rate), config (the tile the row ran, e.g. "
    "\"Br=128,Bc=64,warps=4,stages=2\" quoted, or ';' between items; default: flash-attn's "
    "shipped config). A row's device may be the --device-file's name.")


def _device_arg(p, default: str | None = "h100") -> None:
    p.add_argument("--device", default=None,
                   help="a device preset (`attnio gpu devices`); default h100")
    _device_file_arg(p)
    p.add_argument("--dtype", default=None, help="element type: bf16 (default), fp16, fp8")


def _device_file_arg(p) -> None:
    p.add_argument("--device-file", default=None, dest="device_file", metavar="FILE.toml",
                   help="a GPU described in TOML (generation, SMs, clock, shared memory, L2, "
                        "bandwidth, tensor TFLOP/s: docs/devices.md, 'Your own GPU'); instead "
                        "of --device, or the device rows name in validate/calibrate")


def _calibration_arg(p) -> None:
    p.add_argument("--calibration", default=None, metavar="FILE.json",
                   help="time-model parameters fitted by `attnio gpu calibrate` (they replace "
                        "the stored fit of the generations the file holds)")


def _device_of(args):
    """The device of --device or --device-file (one of them; default h100)."""
    from .. import hardware

    if getattr(args, "device_file", None):
        if args.device is not None:
            raise ParameterError(f"give --device or --device-file, not both (got --device "
                                 f"{args.device} and --device-file {args.device_file})",
                                 param="device_file")
        return hardware.load_device_file(args.device_file)
    return hardware.get(args.device or "h100")


def _calibration(args, dev=None) -> dict:
    """The generations of --calibration (empty without it); with ``dev``, the file must hold
    its generation."""
    path = getattr(args, "calibration", None)
    if not path:
        return {}
    from ..hardware import generation, load_calibration

    gens = load_calibration(path)
    if dev is not None and generation(dev) not in gens:
        raise ParameterError(f"--calibration {path} holds the fit of {', '.join(gens)}, but "
                             f"device {dev.name} is {generation(dev)}: calibrate on its "
                             "measurements, or leave --calibration out", param="calibration")
    return gens


def _debug(p) -> None:
    import argparse

    p.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                   help="show tracebacks on errors")


def add_arguments(p) -> None:
    sub = p.add_subparsers(dest="action", metavar="ACTION")
    v = sub.add_parser("validate", help="the model against measured kernel times (CSV)")
    v.add_argument("--measurements", required=True, metavar="FILE.csv", help=_VALIDATE_HELP)
    _device_file_arg(v)
    _calibration_arg(v)
    v.add_argument("--json", action="store_true", help="print JSON")
    _debug(v)
    c = sub.add_parser("calibrate", help="fit the time model to your own measurements (CSV)")
    c.add_argument("--measurements", required=True, metavar="FILE.csv",
                   help="rows in validate's format (`attnio gpu validate --help`); each "
                        "generation the rows cover is fitted separately")
    c.add_argument("--out", required=True, metavar="FILE.json",
                   help="where to write the fit (for --calibration); never an input file")
    _device_file_arg(c)
    c.add_argument("--json", action="store_true", help="print JSON")
    _debug(c)
    d = sub.add_parser("devices", help="the device table with its sources")
    _device_file_arg(d)
    d.add_argument("--json", action="store_true", help="print JSON")
    _debug(d)
    k = sub.add_parser("kernels", help="flash-attn's named tile tables on a device")
    _device_arg(k)
    k.add_argument("--kernel", default=None, choices=["fa2", "fa3", "sdpa"],
                   help="one table (default: every table the device runs)")
    k.add_argument("--json", action="store_true", help="print JSON")
    _debug(k)
    s = sub.add_parser("score", help="score one kernel config on a workload")
    add_workload_arguments(s)
    _device_arg(s)
    g = s.add_mutually_exclusive_group()
    g.add_argument("--config", default=None,
                   help="Br=..,Bc=..,warps=..,stages=.. and optional algorithm=fa2|fa3|splitkv|"
                        "fa2_bwd|fa3_bwd, q=, p=, o= (regs|smem), pack=, splits=, overlap=0|1, "
                        "ws=0|1 (fa3: FA3's shipped overlap=1, ws=1 unless given), page=P "
                        "(K/V in pages of P rows)")
    g.add_argument("--kernel", default=None, choices=["fa2", "fa3", "sdpa"],
                   help="the config a named kernel runs (default fa3 on Hopper, else fa2)")
    _calibration_arg(s)
    s.add_argument("--backward", action="store_true",
                   help="score the named kernel's backward config instead (fa3: FA3's own "
                        "backward, Hopper only; fa2, sdpa: FA2's)")
    add_output_arguments(s)
    _debug(s)
    t = sub.add_parser("tune", help="search tile configs for the least predicted time")
    add_workload_arguments(t)
    _device_arg(t)
    t.add_argument("--top", type=int, default=5, help="how many configs to print (default 5)")
    t.add_argument("--algorithm", default=None,
                   choices=["fa3", "fa2", "splitkv", "fa2_bwd", "fa3_bwd"],
                   help="kernel family to search (default fa3 on Hopper, else fa2; fa2_bwd, "
                        "fa3_bwd: the backward, ranked against flash-attn's backward config)")
    t.add_argument("--kernel", default="auto", choices=["auto", "fa2", "fa3", "sdpa", "none"],
                   help="named kernel to rank against the oracle (default: the family's)")
    _calibration_arg(t)
    t.add_argument("--max-replays", type=int, default=6, dest="max_replays",
                   help="L2 replays the search (and the named kernel's rank) may spend "
                        "(default 6)")
    add_output_arguments(t)
    _debug(t)


def _fmt_bytes(b) -> str:
    if b is None:
        return "n/p"
    for unit, div in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= div:
            return f"{b / div:g} {unit}"
    return f"{b} B"


def _devices(args) -> int:
    from ..hardware import device_listing

    listed = device_listing(args.device_file)
    rows = [d.as_dict() for d in listed]
    if args.json:
        print(json.dumps(rows, sort_keys=True))
        return 0
    print(f"{'device':<11} {'SMs':>4} {'smem/block':>11} {'L2':>9} {'HBM GB/s':>9} "
          f"{'bf16 TFLOP/s':>12}  scorable")
    for d in listed:
        if d.kind != "gpu":
            print(f"{d.name:<11} {'':>4} {_fmt_bytes(d.fast_bytes):>11} {'':>9} {'':>9} "
                  f"{'':>12}  two-level only")
            continue
        bf = d.tensor_flops.get("bf16")
        miss = d.missing()
        print(f"{d.name:<11} {d.sm_count or 'n/p':>4} {_fmt_bytes(d.smem_per_block):>11} "
              f"{_fmt_bytes(d.l2_bytes):>9} {d.hbm_bw / 1e9 if d.hbm_bw else 0:>9.0f} "
              f"{bf / 1e12 if bf else 0:>12.1f}  {'yes' if not miss else 'no: ' + ', '.join(miss)}")
    print("Sources per figure: docs/devices.md (aliases: a100 -> a100-80gb, h100 -> h100-sxm).")
    return 0


def _kernels(args) -> int:
    from .. import hardware

    t = hardware.kernel_tables(_device_of(args), dtype=args.dtype, kernel=args.kernel)
    rows, dev, dtype = list(t.rows), t.device, t.dtype
    if args.json:
        print(json.dumps(rows, sort_keys=True))
        return 0
    print(f"{dev}: flash-attn tile tables (commit {hardware.FLASH_ATTN_COMMIT[:12]}), "
          f"{dtype}, no split (batch 4 x 32 heads, N = 8192)")
    for r in rows:
        state = "ok" if r["feasible"] else "INFEASIBLE: " + r["why"]
        print(f"  {r['kernel']:<4} d={r['d']:<3} {'causal' if r['causal'] else 'full  '} "
              f"{r['short']:<36} smem {r['smem_bytes']:>7,}/{r['smem_limit_bytes']:,} B  regs "
              f"{r['regs_per_thread']:>3}/{r['regs_limit']}  CTAs/SM {r['ctas_per_sm']}  "
              f"{state}")
    return 0


def _score(args) -> int:
    from .. import hardware

    shape = workload_from_args(args)
    s = hardware.score_workload(_device_of(args), shape, config=args.config, kernel=args.kernel,
                                backward=args.backward, dtype=args.dtype,
                                calibration=args.calibration or None)
    dtype = s.config.dtype
    if args.json:
        print(json.dumps(s.to_dict(), sort_keys=True))
        return 0 if s.feasible else 1
    print(f"{s.device}  {shape.describe()}  {dtype}")
    print(f"  config      {s.config.short()}  {s.config.label}")
    print(f"  resources   shared memory {s.smem_bytes:,} / {s.smem_limit_bytes:,} B, registers "
          f"{s.regs_per_thread} / {s.regs_limit} per thread, {s.ctas_per_sm} CTAs/SM")
    if not s.feasible:
        print(f"  INFEASIBLE  {s.why}")
        return 1
    hbm, l2, flops, time_s = s.hbm_bytes, s.l2_bytes, s.flops, s.time_s
    # a feasible config's score has them (as in Score.line)
    assert hbm is not None and l2 is not None and flops is not None and time_s is not None
    print(f"  traffic     HBM {s.hbm_read_bytes:,} B read + {s.hbm_write_bytes:,} B written "
          f"({hbm / s.compulsory_bytes:.2f}x the compulsory {s.compulsory_bytes:,} B); "
          f"L2 requests {l2:,} B (= the two-level count of these tiles, "
          f"{l2 / s.compulsory_bytes:.1f}x)" + (" [extrapolated]" if s.extrapolated else ""))
    if s.bound_by in ("hbm", "l2", "sm_port", "latency", "launch"):   # memory-bound: bandwidth
        rate = f"{hbm / time_s / 1e9:,.0f} GB/s of HBM traffic"
    else:
        rate = f"{flops / time_s / 1e12:,.0f} TFLOP/s executed"
    print(f"  time        {time_s * 1e6:,.1f} us over {s.waves} waves, bound by {s.bound_by}; "
          f"{rate}")
    split = ", ".join(f"{k} {v * 1e6:,.1f}" for k, v in s.breakdown.items() if abs(v) > 5e-8)
    print(f"  breakdown (us, sums to the time): {split}")
    alone = ", ".join(f"{k} {v * 1e6:,.1f}" for k, v in s.alone.items())
    print(f"  per resource alone (us): {alone}")
    return 0


def _tune(args) -> int:
    from ..hardware import TuneSearch, tune_report, using_calibration
    from .common import progress_from_args

    shape = workload_from_args(args)
    dev = _device_of(args)
    kernel = None if args.kernel == "none" else args.kernel
    with progress_from_args(args, "gpu tune: L2 replays", args.max_replays) as bar, \
            using_calibration(_calibration(args, dev)):
        r = tune_report(dev, shape, algorithm=args.algorithm,
                        dtype=args.dtype or "bf16", top=args.top, kernel=kernel,
                        search=TuneSearch(max_replays=args.max_replays), progress=bar)
    if args.json:
        print(json.dumps(r.json(), sort_keys=True))
        return 0
    print(r)
    return 0


def _validate(args) -> int:
    from ..hardware import validate_file

    check_input_file(args.measurements, "--measurements")  # a FIFO or a device: refused, unread
    res = validate_file(args.measurements, device_file=args.device_file,
                        calibration=args.calibration)
    if args.json:
        print(json.dumps(res, sort_keys=True, allow_nan=False))
        return 0
    print(f"{'line':>4}  {'row':<58} {'measured':>11} {'predicted':>11} {'error':>7}  config")
    for r in res["rows"]:
        n = f"N={r['Nq']}" if r["Nq"] == r["Nkv"] else f"Nq={r['Nq']} Nkv={r['Nkv']}"
        what = (f"{r['device']} {r['kernel']} {r['pass']} {r['dtype']} d={r['d']} "
                f"{'causal' if r['causal'] else 'full'} {n} b={r['batch']} "
                f"h={r['heads']}" + (f"/{r['kv_heads']}" if r["kv_heads"] != r["heads"] else "")
                + (f" w={r['window']}" if r["window"] else ""))
        print(f"{r['line']:>4}  {what:<58} {r['measured_s'] * 1e3:>8.3f} ms "
              f"{r['predicted_s'] * 1e3:>8.3f} ms {r['error']:>+7.1%}  {r['config']}")
    print(f"{len(res['rows'])} rows: |time error| mean {res['mean_abs_err']:.1%}, median "
          f"{res['median_abs_err']:.1%}, max {res['max_abs_err']:.1%}")
    return 0


def _calibrate(args) -> int:
    from .. import hardware

    check_input_file(args.measurements, "--measurements")
    table = hardware.fit_calibration_into(args.measurements, args.out,
                                          device_file=args.device_file)
    if args.json:
        print(json.dumps(table, sort_keys=True, allow_nan=False))
        return 0
    for gen, e in table["generations"].items():
        pv, b = e["provenance"], e["before"]
        print(f"{gen}: {pv['rows']} rows ({', '.join(pv['devices'])}); |time error| mean "
              f"{b['mean_abs_err']:.1%} -> {pv['mean_abs_err']:.1%}, max "
              f"{b['max_abs_err']:.1%} -> {pv['max_abs_err']:.1%}")
        print("  fitted: " + ", ".join(f"{k}={e['params'][k]:.4g}" for k in pv["fitted"]))
        if pv["kept"]:
            print(f"  kept (the rows do not depend on them): {', '.join(pv['kept'])}")
        if pv["underdetermined"]:
            print(f"  note: {pv['rows']} rows for {len(pv['fitted'])} parameters: the fit is "
                  "underdetermined (more rows, other shapes and kernels pin it down)")
    print(f"wrote {args.out} (use it with --calibration {args.out})")
    return 0


def _run(action, args) -> int:
    """Run ``action``; the time model's warnings (a borrowed fit) as one line each on stderr."""
    from ..hardware import FitWarning

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", FitWarning)
        rc = action(args)
    seen: list[str] = []
    for w in caught:
        if issubclass(w.category, FitWarning) and str(w.message) not in seen:
            seen.append(str(w.message))
        elif not issubclass(w.category, FitWarning):
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    for m in seen:
        print(f"attnio gpu {args.action}: warning: {m}", file=sys.stderr)
    return rc


def main(args) -> int:
    actions = {"devices": _devices, "kernels": _kernels, "score": _score, "tune": _tune,
               "validate": _validate, "calibrate": _calibrate}
    if not getattr(args, "action", None):
        print("attnio gpu: error: give an action: devices, kernels, score, tune, validate or "
              "calibrate", file=sys.stderr)
        return 2
    try:
        return _run(actions[args.action], args)
    except (AttnioError, MemoryError) as e:
        if getattr(args, "debug", False):
            raise
        msg = ("ran out of memory; give a smaller --N (--debug shows where)"
               if isinstance(e, MemoryError) else flag_message(e, GPU_FLAGS))
        if args.action in ("validate", "calibrate") and not isinstance(e, MemoryError) \
                and getattr(e, "param", None) == "measurements":
            msg = str(e).splitlines()[0]
        elif getattr(e, "param", None) == "pack_gqa" and getattr(args, "config", None) is None:
            # the kernel's own config packs the grouped heads: the workload is the cause
            msg = (f"--heads/--kv-heads: {str(e).removeprefix('pack_gqa: ')} (the kernel packs "
                   "the query heads of a KV head into its tiles); give fewer --heads per "
                   "--kv-heads")
        print(f"attnio gpu {args.action}: error: {msg}", file=sys.stderr)
        return 2
