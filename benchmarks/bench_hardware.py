"""The GPU model's figures: speed of ``gpu score`` / ``gpu tune``, the L2 ratio against N, the
FA3 ranking, the tile_size.h limits, decoding and the split heuristic re-derived.

Run:  python benchmarks/bench_hardware.py  [--out benchmarks/results/hardware.json]
                                           [--doc docs/hardware.md] [--img docs/img]

Writes the JSON, the plot ``docs/img/hardware_l2_ratio.png`` and the tables between the
``<!-- BEGIN bench_hardware -->`` / ``<!-- END bench_hardware -->`` markers of docs/hardware.md.
Nothing is asserted.  Every number is a model prediction except the wall-clock timings of the
model itself (CPU seconds on the machine recorded in the JSON).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import statistics
import sys
import time

from attnio.core.workload import Shape
from attnio.hardware import devices, feasibility, kernels
from attnio.hardware.kernels import KernelConfig
from attnio.hardware.model import score
from attnio.hardware.oracle import tune, tune_report

H100 = devices.get("h100")
A100 = devices.get("a100")
MIB = 1 << 20


def timed(fn, repeat=3):
    """(result, best wall s, median wall s, median CPU s of this process)."""
    ts, cs = [], []
    out = None
    for _ in range(repeat):
        t0, c0 = time.perf_counter(), time.process_time()
        out = fn()
        ts.append(time.perf_counter() - t0)
        cs.append(time.process_time() - c0)
    return out, min(ts), statistics.median(ts), statistics.median(cs)


def bench_speed():
    rows = []
    for dev, kern, shp in ((H100, "fa3", Shape(131072, 131072, 128)),
                           (H100, "fa2", Shape(131072, 131072, 128)),
                           (A100, "fa2", Shape(131072, 131072, 128, causal=True)),
                           (H100, "fa3", Shape(131072, 131072, 128, causal=True))):
        s, best, med, cpu = timed(lambda dev=dev, kern=kern, shp=shp: score(dev, shp, kern))
        rows.append({"what": "score", "device": dev.name, "kernel": kern,
                     "workload": shp.describe(), "best_s": best, "median_s": med,
                     "cpu_s": cpu, "config": s.config.short(), "extrapolated": s.extrapolated})
    shapes = [Shape(8192, 8192, d, batch=2, heads=2048 // d, causal=c)
              for d in (64, 128, 256) for c in (False, True)]
    shapes += [Shape(1, 65536, 128, heads=32, kv_heads=8), Shape(32768, 32768, 128, heads=8)]
    for shp in shapes:
        for kernel in (None, "auto"):
            r, best, med, cpu = timed(lambda shp=shp, k=kernel: tune_report(H100, shp, top=5,
                                                                            kernel=k), repeat=5)
            rows.append({"what": "tune" if kernel is None else "tune + rank of fa3",
                         "device": "h100-sxm", "workload": shp.describe(), "best_s": best,
                         "median_s": med, "cpu_s": cpu, "feasible": r.feasible,
                         "searched": r.searched, "replays": r.replays,
                         "exhausted": r.exhausted, "rank": r.named_rank})
    return rows


def bench_l2_ratio():
    """H100, FA2's own config (128 x 64, 4 warps), bf16, batch x heads = 128, d = 128."""
    rows = []
    cfg = KernelConfig("fa2", 128, 64, 4)
    for N in (1024, 2048, 4096, 8192, 16384, 32768, 65536, 98304, 131072, 196608, 262144):
        shp = Shape(N, N, 128, batch=8, heads=16)
        t0 = time.perf_counter()
        s = score(H100, shp, cfg)
        rows.append({"N": N, "hbm_bytes": s.hbm_bytes, "compulsory_bytes": s.compulsory_bytes,
                     "two_level_bytes": s.l2_bytes, "hbm_ratio": s.hbm_bytes / s.compulsory_bytes,
                     "two_level_ratio": s.l2_bytes / s.compulsory_bytes, "time_s": s.time_s,
                     "bound_by": s.bound_by, "waves": s.waves, "extrapolated": s.extrapolated,
                     "kv_head_bytes": 2 * N * 128 * 2, "seconds": time.perf_counter() - t0})
    return rows


def bench_fa3_rank():
    rows = []
    for d in (64, 96, 128, 192, 256):
        for causal in (False, True):
            shp = Shape(8192, 8192, d, batch=2, heads=2048 // d, causal=causal)
            r = tune_report(H100, shp, top=3)
            n, b = r.named, r.best[0]
            rows.append({"d": d, "causal": causal, "named": n.config.short(),
                         "named_time_s": n.time_s, "named_bound_by": n.bound_by,
                         "rank": r.named_rank, "feasible": r.feasible,
                         "rank_frac": r.named_rank / r.feasible, "exact": r.exhausted,
                         "best": b.config.short(), "best_time_s": b.time_s,
                         "best_bound_by": b.bound_by, "why": r.why,
                         "named_tflops": n.flops / n.time_s / 1e12})
    return rows


def bench_tile_size_h():
    """The smem of each shipped FA3 tile and of the next multiple of 16 (bf16, H100)."""
    rows = []
    for d, Bc, rs, comment in ((256, 80, True, "128 x 80 hits the limit of smem"),
                               (192, 112, True, "128 x 112 hits the limit of smem"),
                               (128, 192, True, "128 x 192 hits the limit of smem if RS"),
                               (128, 144, False, "128 x 144 hits the limit if !RS"),
                               (128, 176, True, "(shipped, non-causal)"),
                               (96, 144, False, "(shipped 192 x 144)"),
                               (64, 192, False, "(shipped 192 x 192)")):
        Br = 192 if d <= 96 else 128
        shp = Shape(8192, 8192, d)
        c = KernelConfig("fa3", Br, Bc, 4 * (Br // 64 + 1), 2, p="regs" if rs else "smem",
                         overlap=True)
        nxt = dataclasses.replace(c, Bc=Bc + 16)
        f, g = feasibility.check(H100, c, shp), feasibility.check(H100, nxt, shp)
        rows.append({"d": d, "comment": comment, "tile": f"{Br}x{Bc}", "rs": rs,
                     "smem": f.smem_bytes, "regs": f.regs_per_thread, "feasible": f.feasible,
                     "next": f"{Br}x{Bc + 16}", "next_smem": g.smem_bytes,
                     "next_regs": g.regs_per_thread, "next_why": g.why,
                     "limit": H100.smem_per_block})
    return rows


def bench_decode():
    shp = Shape(1, 65536, 128, heads=32, kv_heads=8)
    out = {"workload": shp.describe()}
    for fam in ("fa3", "fa2"):
        best = tune(H100, shp, top=1, algorithm=fam)[0]
        unsplit = tune(H100, shp, top=1, algorithm=fam, where=lambda c: c.splits == 1)[0]
        nosplitpack = tune(H100, shp, top=1, algorithm=fam,
                           where=lambda c: c.splits > 1 and not c.pack_gqa)[0]
        named = score(H100, shp, fam)
        out[fam] = {"best": best.config.short(), "best_time_s": best.time_s,
                    "unsplit_latency_s": unsplit.alone["latency"],
                    "best_bound_by": best.bound_by, "unsplit": unsplit.config.short(),
                    "unsplit_time_s": unsplit.time_s, "unsplit_bound_by": unsplit.bound_by,
                    "unsplit_alone_s": unsplit.alone, "best_alone_s": best.alone,
                    "split_unpacked": nosplitpack.config.short(),
                    "split_unpacked_time_s": nosplitpack.time_s,
                    "speedup": unsplit.time_s / best.time_s, "named": named.config.short(),
                    "named_time_s": named.time_s}
    # what sets the ratio: one SM's L2 port, over the range the microbenchmarks allow and the
    # former assumption
    sens = []
    for port in (35.1, 39.2, 44.2, 64.0):
        dev = dataclasses.replace(H100, sm_l2_bytes_per_clk=port)
        best = tune(dev, shp, top=1, algorithm="fa3")[0]
        unsplit = tune(dev, shp, top=1, algorithm="fa3", where=lambda c: c.splits == 1)[0]
        sens.append({"port_b_per_clk": port, "best": best.config.short(),
                     "best_time_s": best.time_s, "best_bound_by": best.bound_by,
                     "unsplit": unsplit.config.short(), "unsplit_time_s": unsplit.time_s,
                     "unsplit_bound_by": unsplit.bound_by, "unsplit_alone_s": unsplit.alone,
                     "speedup": unsplit.time_s / best.time_s})
    out["port_sensitivity"] = sens
    return out


def bench_stages():
    """Stages at a fixed tile: the latency term (decode, H100, bf16)."""
    shp = Shape(1, 65536, 128, heads=32, kv_heads=8)
    rows = []
    for cfg in (KernelConfig("fa3", 64, 16, 8, 1, pack_gqa=True, splits=8, overlap=True),
                KernelConfig("fa3", 64, 64, 8, 1, pack_gqa=True, overlap=True),
                KernelConfig("splitkv", 16, 16, 1, 1, pack_gqa=True, splits=8),
                KernelConfig("fa2", 16, 16, 1, 1, pack_gqa=True)):
        for st in (1, 2, 3):
            s = score(H100, shp, dataclasses.replace(cfg, stages=st))
            rows.append({"config": s.config.short(), "stages": st, "time_s": s.time_s,
                         "bound_by": s.bound_by, "latency_s": s.alone["latency"],
                         "inflight_bytes": st * cfg.Bc * 2 * 128 * 2,
                         "ctas_per_sm": s.ctas_per_sm})
    return rows


def bench_splits():
    """The oracle's split count against flash-attn's heuristics, decode shapes (d = 128)."""
    rows = []
    for batch in (1, 4, 16):
        for Nkv in (2048, 8192, 32768, 131072):
            shp = Shape(1, Nkv, 128, batch=batch, heads=32, kv_heads=8)
            b = tune(H100, shp, top=1, algorithm="fa3", max_replays=12)[0]
            f3 = score(H100, shp, "fa3")
            f2 = score(H100, shp, "fa2")
            rows.append({"batch": batch, "Nkv": Nkv, "oracle": b.config.short(),
                         "oracle_splits": b.config.splits, "oracle_time_s": b.time_s,
                         "fa3_splits": f3.config.splits, "fa3_time_s": f3.time_s,
                         "fa2_splits": f2.config.splits, "fa2_time_s": f2.time_s,
                         "oracle_ctas": None})
    # prefill where one KV head exceeds the L2 (FA3's L2 rule splits it)
    for N in (65536, 131072, 262144):
        shp = Shape(N, N, 128)
        f3 = score(H100, shp, "fa3")
        one = score(H100, shp, dataclasses.replace(f3.config, splits=1, pack_gqa=False))
        b = tune(H100, shp, top=1, algorithm="fa3", max_replays=12)[0]
        rows.append({"prefill": True, "N": N, "fa3_splits": f3.config.splits,
                     "fa3_time_s": f3.time_s, "fa3_hbm": f3.hbm_bytes,
                     "fa3_unsplit_time_s": one.time_s, "fa3_unsplit_hbm": one.hbm_bytes,
                     "oracle": b.config.short(), "oracle_splits": b.config.splits,
                     "oracle_time_s": b.time_s, "compulsory": f3.compulsory_bytes})
    return rows


def plot(rows, path):
    from attnio.core.extras import figure

    fig = figure((6.4, 4.2), "the L2 ratio plot")
    ax = fig.add_subplot(1, 1, 1)
    N = [r["N"] for r in rows]
    ax.plot(N, [r["hbm_ratio"] for r in rows], "o-", label="HBM bytes / compulsory (L2 model)")
    ax.plot(N, [r["two_level_ratio"] for r in rows], "s--",
            label="two-level count of the same tiles / compulsory")
    knee = 50 * MIB / (2 * 128 * 2)
    ax.axvline(knee, color="grey", lw=0.8)
    ax.text(knee * 1.05, 1.3, "one head's K+V > 50 MiB L2", fontsize=8, color="grey")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("N (Nq = Nkv)")
    ax.set_ylabel("bytes / compulsory bytes")
    ax.set_title("H100, FA2 128x64, bf16, batch x heads = 128, d = 128 (model)")
    ax.legend(fontsize=8)
    ax.grid(True, which="both", lw=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def _us(t):
    return f"{t * 1e6:,.1f}"


def render(res) -> str:
    L = [f"Generated by `python benchmarks/bench_hardware.py` on {res['machine']['date']} "
         f"({res['machine']['platform']}, {res['machine']['cpus']} CPUs, load average "
         f"{res['machine']['load']} at the start, {res['machine']['load_end']} at the end: the "
         "machine is shared with other jobs, so wall-clock medians vary with their load; the "
         "CPU column is this process's own time).  All figures are model predictions; the "
         "seconds are the model's own run time.", ""]
    tunes = [r for r in res["speed"] if r["what"] != "score"]
    L += ["### Speed of the model", "",
          f"`gpu tune` (with or without the named kernel's rank), {len(tunes)} runs of 5: "
          f"median wall {statistics.median(r['median_s'] for r in tunes):.2f} s, slowest "
          f"median {max(r['median_s'] for r in tunes):.2f} s, slowest best "
          f"{max(r['best_s'] for r in tunes):.2f} s; CPU median "
          f"{statistics.median(r['cpu_s'] for r in tunes):.2f} s, slowest "
          f"{max(r['cpu_s'] for r in tunes):.2f} s.", "",
          "| call | device | workload | best s | median s | CPU s | notes |",
          "|---|---|---|---:|---:|---:|---|"]
    for r in res["speed"]:
        note = (f"{r['config']}{' (extrapolated)' if r.get('extrapolated') else ''}"
                if r["what"] == "score" else
                f"{r['feasible']:,} feasible / {r['searched']:,}, {r['replays']} replays"
                + ("" if r["exhausted"] else ", replay budget spent")
                + (f", rank {r['rank']:,}" if r.get("rank") else ""))
        L.append(f"| gpu {r['what']} | {r['device']} | {r['workload']} | {r['best_s']:.2f} | "
                 f"{r['median_s']:.2f} | {r['cpu_s']:.2f} | {note} |")
    L += ["", "### HBM bytes against N (the plot)", "",
          "![HBM/compulsory and two-level/compulsory against N](img/hardware_l2_ratio.png)", "",
          "| N | K+V of one head | HBM / compulsory | two-level / compulsory | time us | bound by |"
          " waves |", "|---:|---:|---:|---:|---:|---|---:|"]
    for r in res["l2_ratio"]:
        L.append(f"| {r['N']:,} | {r['kv_head_bytes'] / MIB:.0f} MiB | {r['hbm_ratio']:.2f}"
                 f"{' (extrapolated)' if r['extrapolated'] else ''} | {r['two_level_ratio']:.1f} | "
                 f"{_us(r['time_s'])} | {r['bound_by']} | {r['waves']:,} |")
    L += ["", "### FA3's shipped tiles against the oracle (H100, bf16, N = 8192, batch 2, "
          "heads = 2048/d)", "",
          "| d | causal | FA3 config | time us | bound | rank / feasible | oracle's best | time us |"
          " bound |", "|---:|---|---|---:|---|---:|---|---:|---|"]
    for r in res["fa3_rank"]:
        L.append(f"| {r['d']} | {'yes' if r['causal'] else 'no'} | {r['named']} | "
                 f"{_us(r['named_time_s'])} | {r['named_bound_by']} | {r['rank']:,} / "
                 f"{r['feasible']:,} ({r['rank_frac']:.1%}{'' if r['exact'] else ', by bound'}) | "
                 f"{r['best']} | {_us(r['best_time_s'])} | {r['best_bound_by']} |")
    L += ["", "### tile_size.h's limits re-derived (H100: 232,448 B per block)", "",
          "| d | comment | tile | smem B | regs | next tile | next smem B | next regs | verdict |",
          "|---:|---|---|---:|---:|---|---:|---:|---|"]
    for r in res["tile_size_h"]:
        verdict = r["next_why"] or "next tile fits"
        L.append(f"| {r['d']} | {r['comment']} | {r['tile']} {'RS' if r['rs'] else 'SS'} | "
                 f"{r['smem']:,} | {r['regs']} | {r['next']} | {r['next_smem']:,} | "
                 f"{r['next_regs']} | {verdict} |")
    dec = res["decode"]
    L += ["", f"### Decoding ({dec['workload']}, H100, bf16)", "",
          "| family | oracle's best | time us | bound | best unsplit | time us | bound | speedup |"
          " best split, unpacked | time us | named kernel | time us |",
          "|---|---|---:|---|---|---:|---|---:|---|---:|---|---:|"]
    for fam in ("fa3", "fa2"):
        x = dec[fam]
        L.append(f"| {fam} | {x['best']} | {_us(x['best_time_s'])} | {x['best_bound_by']} | "
                 f"{x['unsplit']} | {_us(x['unsplit_time_s'])} | {x['unsplit_bound_by']} | "
                 f"{x['speedup']:.2f}x | {x['split_unpacked']} | "
                 f"{_us(x['split_unpacked_time_s'])} | {x['named']} | {_us(x['named_time_s'])} |")
    L += ["", "The best unsplit FA3 config, resource by resource (us, each alone): " + ", ".join(
        f"{k} {v * 1e6:,.1f}" for k, v in dec["fa3"]["unsplit_alone_s"].items()) + ".", "",
        "What sets the ratio: the same search with one SM's L2 port at the ends of what the "
        "microbenchmarks allow (35.1 and 44.2 B/clk), the model's figure (39.2) and the former "
        "assumption (64):", "",
        "| port B/clk | oracle's best | time us | bound | best unsplit | time us | bound | "
        "speedup |", "|---:|---|---:|---|---|---:|---|---:|"]
    for x in dec["port_sensitivity"]:
        L.append(f"| {x['port_b_per_clk']:g} | {x['best']} | {_us(x['best_time_s'])} | "
                 f"{x['best_bound_by']} | {x['unsplit']} | {_us(x['unsplit_time_s'])} | "
                 f"{x['unsplit_bound_by']} | {x['speedup']:.2f}x |")
    L += ["", "### Stages at a fixed tile: the latency term (same decode, H100)", "",
          "| config | stages | bytes in flight per CTA | time us | latency alone us | bound |",
          "|---|---:|---:|---:|---:|---|"]
    for r in res["stages"]:
        L.append(f"| {r['config']} | {r['stages']} | {r['inflight_bytes']:,} | "
                 f"{_us(r['time_s'])} | {_us(r['latency_s'])} | {r['bound_by']} |")
    L += ["", "### KV splits: the oracle's count next to flash-attn's heuristics (H100, d = 128, "
          "32 query heads on 8 KV heads, Nq = 1)", "",
          "| batch | Nkv | oracle | oracle us | FA3 splits | FA3 us | FA2 splits | FA2 us |",
          "|---:|---:|---|---:|---:|---:|---:|---:|"]
    for r in res["splits"]:
        if r.get("prefill"):
            continue
        L.append(f"| {r['batch']} | {r['Nkv']:,} | {r['oracle']} | {_us(r['oracle_time_s'])} | "
                 f"{r['fa3_splits']} | {_us(r['fa3_time_s'])} | {r['fa2_splits']} | "
                 f"{_us(r['fa2_time_s'])} |")
    L += ["", "Prefill with one head whose K and V exceed the L2 (FA3's L2 rule):", "",
          "| N | FA3 splits | FA3 us | FA3 HBM / compulsory | FA3 unsplit us | unsplit HBM / "
          "compulsory | oracle | oracle us |", "|---:|---:|---:|---:|---:|---:|---|---:|"]
    for r in res["splits"]:
        if not r.get("prefill"):
            continue
        L.append(f"| {r['N']:,} | {r['fa3_splits']} | {_us(r['fa3_time_s'])} | "
                 f"{r['fa3_hbm'] / r['compulsory']:.2f} | {_us(r['fa3_unsplit_time_s'])} | "
                 f"{r['fa3_unsplit_hbm'] / r['compulsory']:.2f} | {r['oracle']} | "
                 f"{_us(r['oracle_time_s'])} |")
    return "\n".join(L) + "\n"


def write_doc(path, body):
    begin, end = "<!-- BEGIN bench_hardware -->", "<!-- END bench_hardware -->"
    with open(path) as f:
        text = f.read()
    a, b = text.index(begin) + len(begin), text.index(end)
    with open(path, "w") as f:
        f.write(text[:a] + "\n" + body + text[b:])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="benchmarks/results/hardware.json")
    ap.add_argument("--doc", default="docs/hardware.md")
    ap.add_argument("--img", default="docs/img")
    args = ap.parse_args(argv)
    t0 = time.time()
    res = {"machine": {"python": sys.version.split()[0], "platform": platform.platform(),
                       "cpus": os.cpu_count(), "date": time.strftime("%Y-%m-%d"),
                       "load": " ".join(f"{x:.1f}" for x in os.getloadavg())},
           "flash_attn_commit": kernels.FLASH_ATTN_COMMIT}
    for name, fn in (("speed", bench_speed), ("l2_ratio", bench_l2_ratio),
                     ("fa3_rank", bench_fa3_rank), ("tile_size_h", bench_tile_size_h),
                     ("decode", bench_decode), ("stages", bench_stages),
                     ("splits", bench_splits)):
        t = time.time()
        res[name] = fn()
        print(f"{name}: {time.time() - t:.1f} s", flush=True)
    res["wall_s"] = time.time() - t0
    res["machine"]["load_end"] = " ".join(f"{x:.1f}" for x in os.getloadavg())
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(res, f, indent=1, sort_keys=True, default=str)
    plot(res["l2_ratio"], os.path.join(args.img, "hardware_l2_ratio.png"))
    if args.doc:
        write_doc(args.doc, render(res))
    print(f"wrote {args.out} in {res['wall_s']:.0f} s")


if __name__ == "__main__":
    main()
