"""The calibrated GPU model against the calibration set, its trends, flash-attn's shipped configs
against the oracle, and the model's own speed.

Run:  python benchmarks/bench_gpu_model.py [--train PATH] [--out benchmarks/results/gpu_model.json]
                                          [--doc docs/hardware.md] [--img docs/img]
      python benchmarks/bench_gpu_model.py --fa3-bwd-only   (only the FA3 backward table)

Writes the JSON, the scatter ``docs/img/gpu_validation.png`` (predicted against measured time,
log axes, the y = x line, one colour per kernel) and the tables between the ``<!-- BEGIN
bench_gpu_model -->`` / ``<!-- END bench_gpu_model -->`` markers of docs/hardware.md.  Nothing
is asserted.  Every number is a model prediction or a published measurement, except the CPU
seconds of the model itself (on the machine recorded in the JSON).  The FA3 backward table
(predicted, not validated: no FA3 backward row in the calibration set) goes between the
``<!-- BEGIN bench_gpu_model fa3_bwd -->`` / ``<!-- END bench_gpu_model fa3_bwd -->`` markers
and into ``benchmarks/results/gpu_model_fa3_bwd.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from attnio.core.workload import Shape  # noqa: E402
from attnio.hardware import devices  # noqa: E402
from attnio.hardware.oracle import tune_report  # noqa: E402
from attnio.hardware.predict import flash_flops, predict  # noqa: E402
from attnio.hardware.timing import BOUNDS, PARAMS, _table, load_params  # noqa: E402
from attnio.hardware.validate import validate  # noqa: E402

DEFAULT_TRAIN = ROOT.parent / "shared" / "data" / "gpu-published" / "train.csv"
COLORS = {"fa1": "tab:orange", "fa2": "tab:blue", "fa3": "tab:green", "standard": "tab:red"}


def cpu(fn):
    c0 = time.process_time()
    out = fn()
    return out, time.process_time() - c0


def bench(N, d, causal=False):
    return Shape(N, N, d, causal=causal, batch=16384 // N, heads=2048 // d)


def tflops(dev, kernel, shape, pass_="fwd", dtype="bf16"):
    return flash_flops(shape, pass_) / predict(dev, shape, kernel, pass_, dtype) / 1e12


def trends():
    h = devices.get("h100")
    out = {}
    for N in (2048, 16384):
        out[f"fa3/fa2 H100 d=128 N={N}"] = (tflops(h, "fa3", bench(N, 128))
                                            / tflops(h, "fa2", bench(N, 128)))
    for k in ("fa2", "fa3"):
        out[f"{k} causal/non-causal H100 d=128 N=16k"] = (
            tflops(h, k, bench(16384, 128, True)) / tflops(h, k, bench(16384, 128)))
        for d in (64, 128, 256):
            out[f"{k} TFLOPs H100 d={d} N=16k"] = tflops(h, k, bench(16384, d))
    for d in (64, 128, 256):
        out[f"fa3 fp8/fp16 H100 d={d} N=16k"] = (tflops(h, "fa3", bench(16384, d), dtype="fp8")
                                                 / tflops(h, "fa3", bench(16384, d),
                                                          dtype="fp16"))
    for dev in ("h100", "a100"):
        for N in (1024, 8192):
            out[f"fa2/standard {dev} d=64 N={N}"] = (tflops(dev, "fa2", bench(N, 64))
                                                     / tflops(dev, "standard", bench(N, 64)))
    from attnio.hardware.model import score

    cfg = "algorithm=fa2_bwd,Br=64,Bc=128,warps=8,stages=2"
    full = score(h, Shape(8192, 8192, 128, batch=2, heads=16), cfg).time_s
    causal = score(h, Shape(8192, 8192, 128, batch=2, heads=16, causal=True), cfg).time_s
    out["FA2 backward causal/non-causal time H100 d=128 N=8k"] = causal / full
    return out


def fa3_backward():
    """Predicted FA3 and FA2 backward TFLOPs on H100 at N = 16k (flash-attn's benchmark
    setting, bf16): FA3's own backward (fa3_bwd + its dQ convert) against FA2's."""
    from attnio.hardware.kernels import backward_config

    h = devices.get("h100")
    rows = []
    for d in (64, 128):
        for causal in (False, True):
            shape = bench(16384, d, causal)
            f2, f3 = tflops(h, "fa2", shape, "bwd"), tflops(h, "fa3", shape, "bwd")
            rows.append({"d": d, "causal": causal, "N": 16384,
                         "fa2_config": backward_config("fa2", h, shape).short(),
                         "fa3_config": backward_config("fa3", h, shape).short(),
                         "fa2_bwd_tflops": f2, "fa3_bwd_tflops": f3, "ratio": f3 / f2})
    return rows


def fa3_backward_markdown(rows) -> str:
    L = ["| d | mask | FA2 bwd config | FA2 bwd TFLOPs | FA3 bwd config | FA3 bwd TFLOPs | "
         "FA3/FA2 |", "|---:|---|---|---:|---|---:|---:|"]
    for r in rows:
        L.append(f"| {r['d']} | {'causal' if r['causal'] else 'full'} | {r['fa2_config']} | "
                 f"{r['fa2_bwd_tflops']:.0f} | {r['fa3_config']} | {r['fa3_bwd_tflops']:.0f} | "
                 f"{r['ratio']:.2f}x |")
    return "\n".join(L)


def _replace_block(doc: Path, tag: str, md: str) -> None:
    text = doc.read_text()
    b, e = f"<!-- BEGIN {tag} -->", f"<!-- END {tag} -->"
    if b in text and e in text:
        text = text[:text.index(b) + len(b)] + "\n" + md + "\n" + text[text.index(e):]
        doc.write_text(text)


def shipped_vs_oracle():
    rows = []
    for dev, kernel, dims in (("h100", "fa3", (64, 96, 128, 192, 256)),
                              ("a100", "fa2", (32, 64, 96, 128, 192, 256))):
        for d in dims:
            for causal in (False, True):
                shape = Shape(8192, 8192, d, causal=causal, batch=2, heads=2048 // d)
                r, c = cpu(lambda: tune_report(dev, shape, top=1, kernel=kernel))
                n, b = r.named, r.best[0]
                rows.append({"device": dev, "kernel": kernel, "d": d, "causal": causal,
                             "named": n.config.short(), "named_us": n.time_s * 1e6,
                             "best": b.config.short(), "best_us": b.time_s * 1e6,
                             "gap": n.time_s / b.time_s - 1, "rank": r.named_rank,
                             "feasible": r.feasible, "why": r.why, "cpu_s": c})
    return rows


def speed():
    shapes = [("a100", Shape(16384, 16384, 128, heads=16, causal=True), None,
               "A100 causal N=16k d=128 heads=16"),
              ("a100", Shape(8192, 8192, 128, batch=2, heads=16, causal=True), "fa2_bwd",
               "A100 FA2 backward N=8k d=128 causal"),
              ("h100", Shape(1, 65536, 128, heads=32, kv_heads=8), None,
               "H100 decode Nkv=64k GQA 32/8"),
              ("a100", Shape(1, 65536, 128, heads=32, kv_heads=8), None,
               "A100 decode Nkv=64k GQA 32/8"),
              ("h100", Shape(32768, 32768, 128, heads=32, kv_heads=8, causal=True), None,
               "H100 causal GQA prefill N=32k")]
    out = []
    for dev, shape, alg, what in shapes:
        r, c = cpu(lambda: tune_report(dev, shape, algorithm=alg))
        out.append({"shape": what, "cpu_s": c, "replays": r.replays, "feasible": r.feasible,
                    "best": r.best[0].config.short()})
    return out


def scatter(res, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 5))
    for k, col in COLORS.items():
        rs = [r for r in res["rows"] if r["kernel"] == k]
        if rs:
            ax.scatter([r["measured_s"] * 1e3 for r in rs], [r["predicted_s"] * 1e3 for r in rs],
                       s=14, color=col, label=k)
    lo = min(min(r["measured_s"], r["predicted_s"]) for r in res["rows"]) * 1e3 / 1.5
    hi = max(max(r["measured_s"], r["predicted_s"]) for r in res["rows"]) * 1e3 * 1.5
    ax.plot([lo, hi], [lo, hi], color="black", lw=0.8, label="y = x")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    ax.set_xlabel("measured time (ms)")
    ax.set_ylabel("predicted time (ms)")
    ax.set_title(f"H100 calibration set: {len(res['rows'])} rows, mean |err| "
                 f"{res['mean_abs_err']:.1%}, max {res['max_abs_err']:.1%}", fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def markdown(res, val_cpu, tr, ship, sp) -> str:
    from attnio.hardware.timing import FITTED

    L = ["### Calibration: the fitted parameters (`src/attnio/hardware/calibration.json`)",
         "", "Each generation fitted to its own rows only (sm90: the H100 rows; sm80: the A100 "
         "rows); `-` marks a parameter the generation does not fit (it does not enter its "
         "kernels: Ampere has no wgmma and no FA3; `wgmma_n0` is held at 8).", "",
         "| parameter | sm90 | sm80 | bounds | unit | meaning |", "|---|---:|---:|---|---|---|"]
    p90, p80 = load_params("sm90"), load_params("sm80")
    for k in PARAMS:
        lo, hi, unit, what = BOUNDS[k]
        a = f"{getattr(p90, k):.4g}" if k in FITTED["sm90"] else "-"
        b = f"{getattr(p80, k):.4g}" if k in FITTED["sm80"] else "-"
        L.append(f"| `{k}` | {a} | {b} | [{lo:g}, {hi:g}] | {unit} | {what} |")
    gens = _table()["generations"]
    L += [""] + [f"{g}: {gens[g]['provenance']['rows']} rows "
                 f"({', '.join(gens[g]['provenance']['devices'])}), |time error| mean "
                 f"{gens[g]['provenance']['mean_abs_err']:.1%}, max "
                 f"{gens[g]['provenance']['max_abs_err']:.1%}." for g in ("sm90", "sm80")] + [""]
    L += ["### The calibration set: predicted against measured",
          "", "attnio gpu validate with --measurements ../shared/data/gpu-published/train.csv: "
          f"{len(res['rows'])} rows, |time error| mean **{res['mean_abs_err']:.1%}**, median "
          f"{res['median_abs_err']:.1%}, max **{res['max_abs_err']:.1%}** ({val_cpu:.1f} s CPU "
          "for the whole command's work).", "",
          "![predicted vs measured](img/gpu_validation.png)", "",
          "| device | kernel | pass | d | mask | error at N = 512, 1k, 2k, 4k, 8k, 16k |",
          "|---|---|---|---:|---|---|"]
    groups: dict[tuple, list] = {}
    for r in res["rows"]:
        groups.setdefault((r["device"], r["kernel"], r["pass"], r["d"], r["causal"]),
                          []).append(r)
    for (dv, k, ps, d, c), rs in groups.items():
        errs = ", ".join(f"{r['error']:+.0%}" for r in sorted(rs, key=lambda r: r["N"]))
        L.append(f"| {dv} | {k} | {ps} | {d} | {'causal' if c else 'full'} | {errs} |")
    L += ["", "### Trends (model predictions; TFLOPs as flash-attn counts them)", "",
          "| figure | value |", "|---|---:|"]
    for k, v in tr.items():
        L.append(f"| {k} | {v:.3g} |")
    L += ["", "### flash-attn's shipped configs against the oracle (N = 8192, batch 2, "
          "heads = 2048/d, bf16)", "",
          "| device | kernel | d | mask | shipped | us | oracle's best | us | gap | rank |",
          "|---|---|---:|---|---|---:|---|---:|---:|---:|"]
    for r in ship:
        L.append(f"| {r['device']} | {r['kernel']} | {r['d']} | "
                 f"{'causal' if r['causal'] else 'full'} | {r['named']} | {r['named_us']:.1f} | "
                 f"{r['best']} | {r['best_us']:.1f} | {r['gap']:+.1%} | {r['rank']} of "
                 f"{r['feasible']} |")
    over = [r for r in ship if r["gap"] > 0.05]
    if over:
        L += ["", "Shipped configs more than 5% from the oracle's best, resource by resource:",
              ""]
        for r in over:
            L.append(f"* {r['device']} {r['kernel']} d={r['d']} "
                     f"{'causal' if r['causal'] else 'full'}: {r['why']}")
    L += ["", "### Speed of the model (CPU seconds, this machine)", "",
          "| `gpu tune` shape | CPU s | L2 replays | feasible configs | best |",
          "|---|---:|---:|---:|---|"]
    for r in sp:
        L.append(f"| {r['shape']} | {r['cpu_s']:.2f} | {r['replays']} | {r['feasible']:,} | "
                 f"{r['best']} |")
    L.append(f"| `gpu validate` over the {len(res['rows'])} calibration rows | {val_cpu:.2f} "
             "| | | |")
    return "\n".join(L)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--train", default=str(DEFAULT_TRAIN))
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "gpu_model.json"))
    ap.add_argument("--doc", default=str(ROOT / "docs" / "hardware.md"))
    ap.add_argument("--img", default=str(ROOT / "docs" / "img"))
    ap.add_argument("--fa3-bwd-only", action="store_true", dest="fa3_bwd_only",
                    help="compute and write only the FA3 backward table")
    a = ap.parse_args(argv)
    fb = fa3_backward()
    fb_md = fa3_backward_markdown(fb)
    Path(a.out).with_name("gpu_model_fa3_bwd.json").write_text(json.dumps(
        {"note": "model predictions (H100, bf16, batch = 16384/N, heads = 2048/d); not "
                 "validated: the calibration set has no FA3 backward rows", "rows": fb},
        indent=1, default=float) + "\n")
    _replace_block(Path(a.doc), "bench_gpu_model fa3_bwd", fb_md)
    print(fb_md)
    if a.fa3_bwd_only:
        return 0
    if not Path(a.train).is_file():
        print(f"bench_gpu_model: error: --train {a.train}: no such file", file=sys.stderr)
        return 2
    res, val_cpu = cpu(lambda: validate(a.train))
    tr = trends()
    ship = shipped_vs_oracle()
    sp = speed()
    Path(a.img).mkdir(parents=True, exist_ok=True)
    scatter(res, Path(a.img) / "gpu_validation.png")
    md = markdown(res, val_cpu, tr, ship, sp)
    Path(a.out).write_text(json.dumps({
        "machine": {"platform": platform.platform(), "python": platform.python_version(),
                    "cpus": os.cpu_count()},
        "validate": {k: v for k, v in res.items() if k != "rows"}, "validate_cpu_s": val_cpu,
        "rows": res["rows"], "trends": tr, "shipped_vs_oracle": ship, "speed": sp},
        indent=1, default=float) + "\n")
    doc = Path(a.doc)
    text = doc.read_text()
    b, e = "<!-- BEGIN bench_gpu_model -->", "<!-- END bench_gpu_model -->"
    if b in text and e in text:
        text = text[:text.index(b) + len(b)] + "\n" + md + "\n" + text[text.index(e):]
        doc.write_text(text)
    print(md)
    print(f"mean |err| {res['mean_abs_err']:.3f}  max {res['max_abs_err']:.3f}  "
          f"median {np.median([abs(r['error']) for r in res['rows']]):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
