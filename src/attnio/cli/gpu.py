"""``attnio gpu``: the GPU model: devices, flash-attn's kernel tables, score one config, tune.

    attnio gpu devices [--json]
    attnio gpu kernels [--device h100] [--kernel fa3] [--dtype bf16] [--json]
    attnio gpu score --N 8192 --d 128 --heads 16 --batch 2 --device h100 --kernel fa3 [--json]
    attnio gpu score --N 8192 --d 128 --config Br=128,Bc=176,stages=2,warps=12 [--json]
    attnio gpu tune  --Nq 1 --Nkv 65536 --d 128 --heads 32 --kv-heads 8 --top 5 [--json]
    attnio gpu validate --measurements FILE.csv [--json]
"""

from __future__ import annotations

import json
import sys
from typing import Any

from ..core.errors import AttnioError, ParameterError
from .common import add_output_arguments, add_workload_arguments, flag_message, workload_from_args

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
             "backward": "--backward"}


def _device_arg(p, default: str | None = "h100") -> None:
    p.add_argument("--device", default=default,
                   help="a device preset (`attnio gpu devices`); default h100")
    p.add_argument("--dtype", default=None, help="element type: bf16 (default), fp16, fp8")


def _debug(p) -> None:
    import argparse

    p.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                   help="show tracebacks on errors")


def add_arguments(p) -> None:
    sub = p.add_subparsers(dest="action", metavar="ACTION")
    v = sub.add_parser("validate", help="the model against measured kernel times (CSV)")
    v.add_argument("--measurements", required=True, metavar="FILE.csv",
                   help="rows: device, kernel, pass, dtype, d, causal, N, batch, heads and "
                        "tflops or time_s (the calibration set's format)")
    v.add_argument("--json", action="store_true", help="print JSON")
    _debug(v)
    d = sub.add_parser("devices", help="the device table with its sources")
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
    from ..hardware import devices

    rows = [d.as_dict() for d in devices.all_devices()]
    if args.json:
        print(json.dumps(rows, sort_keys=True))
        return 0
    print(f"{'device':<11} {'SMs':>4} {'smem/block':>11} {'L2':>9} {'HBM GB/s':>9} "
          f"{'bf16 TFLOP/s':>12}  scorable")
    for d in devices.all_devices():
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
    from ..hardware import devices, feasibility, kernels

    dev = devices.get(args.device).require_model()
    dtype = devices.dtype_name(args.dtype or "bf16")
    if args.kernel:
        names = [args.kernel]
    elif devices.dtype_bytes(dtype) == 1:   # only FA3 ships fp8 kernels
        names = ["fa3"] if dev.wgmma else []
    else:
        names = ["fa3", "fa2"] if dev.wgmma else ["fa2"]
    if not names:
        from ..core.errors import ParameterError

        raise ParameterError(f"dtype={dtype}: no flash-attn fp8 kernel runs on {dev.name} (FA3's "
                             "fp8 kernels need Hopper)", param="dtype")
    rows = []
    for name in names:
        for r in kernels.kernel_table(name, dev, dtype):
            shp, cfg = r["shape"], r["config"]
            f = feasibility.check(dev, cfg, shp)
            rows.append({"kernel": name, "d": r["d"], "causal": r["causal"],
                         "config": cfg.as_dict(), "short": cfg.short(), "feasible": f.feasible,
                         "why": f.why, "smem_bytes": f.smem_bytes,
                         "smem_limit_bytes": f.smem_limit_bytes,
                         "regs_per_thread": f.regs_per_thread, "regs_limit": f.regs_limit,
                         "ctas_per_sm": f.ctas_per_sm})
    if args.json:
        print(json.dumps(rows, sort_keys=True))
        return 0
    print(f"{dev.name}: flash-attn tile tables (commit {kernels.FLASH_ATTN_COMMIT[:12]}), "
          f"{dtype}, no split (batch 4 x 32 heads, N = 8192)")
    for r in rows:
        state = "ok" if r["feasible"] else "INFEASIBLE: " + r["why"]
        print(f"  {r['kernel']:<4} d={r['d']:<3} {'causal' if r['causal'] else 'full  '} "
              f"{r['short']:<36} smem {r['smem_bytes']:>7,}/{r['smem_limit_bytes']:,} B  regs "
              f"{r['regs_per_thread']:>3}/{r['regs_limit']}  CTAs/SM {r['ctas_per_sm']}  "
              f"{state}")
    return 0


def _score(args) -> int:
    from ..hardware import devices
    from ..hardware.model import score

    shape = workload_from_args(args)
    dev = devices.get(args.device)
    config: Any = args.config if args.config is not None else (
        args.kernel or ("fa3" if dev.wgmma else "fa2"))
    if args.backward:
        if args.config is not None:
            raise ParameterError("--backward scores a named --kernel's backward; with --config "
                                 "give algorithm=fa2_bwd or algorithm=fa3_bwd instead",
                                 param="backward")
        from ..hardware.kernels import backward_config

        config = backward_config(config, dev.require_model(), shape,
                                 devices.dtype_name(args.dtype or "bf16"))
    s = score(dev, shape, config, dtype=args.dtype)
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
    from ..hardware.oracle import tune_report
    from .common import progress_from_args

    shape = workload_from_args(args)
    kernel = None if args.kernel == "none" else args.kernel
    with progress_from_args(args, "gpu tune: L2 replays", args.max_replays) as bar:
        r = tune_report(args.device, shape, algorithm=args.algorithm,
                        dtype=args.dtype or "bf16", top=args.top, kernel=kernel,
                        max_replays=args.max_replays, progress=bar)
    if args.json:
        print(json.dumps(r.json(), sort_keys=True))
        return 0
    print(r)
    return 0


def _validate(args) -> int:
    from ..hardware.validate import validate

    res = validate(args.measurements)
    if args.json:
        print(json.dumps(res, sort_keys=True))
        return 0
    print(f"{'line':>4}  {'row':<58} {'measured':>11} {'predicted':>11} {'error':>7}")
    for r in res["rows"]:
        what = (f"{r['device']} {r['kernel']} {r['pass']} {r['dtype']} d={r['d']} "
                f"{'causal' if r['causal'] else 'full'} N={r['N']} b={r['batch']} "
                f"h={r['heads']}")
        print(f"{r['line']:>4}  {what:<58} {r['measured_s'] * 1e3:>8.3f} ms "
              f"{r['predicted_s'] * 1e3:>8.3f} ms {r['error']:>+7.1%}")
    print(f"{len(res['rows'])} rows: |time error| mean {res['mean_abs_err']:.1%}, median "
          f"{res['median_abs_err']:.1%}, max {res['max_abs_err']:.1%}")
    return 0


def main(args) -> int:
    actions = {"devices": _devices, "kernels": _kernels, "score": _score, "tune": _tune,
               "validate": _validate}
    if not getattr(args, "action", None):
        print("attnio gpu: error: give an action: devices, kernels, score, tune or validate",
              file=sys.stderr)
        return 2
    try:
        return actions[args.action](args)
    except (AttnioError, MemoryError) as e:
        if getattr(args, "debug", False):
            raise
        msg = ("ran out of memory; give a smaller --N (--debug shows where)"
               if isinstance(e, MemoryError) else flag_message(e, GPU_FLAGS))
        if args.action == "validate" and not isinstance(e, MemoryError):
            msg = str(e).splitlines()[0]
        print(f"attnio gpu {args.action}: error: {msg}", file=sys.stderr)
        return 2
