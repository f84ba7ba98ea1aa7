"""Write docs/devices.md from the device table (attnio.hardware.devices): every figure with its
sources.  Run: ``python docs/gen_devices.py`` (from the repository root)."""

from __future__ import annotations

import sys

from attnio.hardware import devices

KiB, MiB = 1024, 1 << 20


def _b(x):
    if x is None:
        return "not public"
    if x >= MiB and x % MiB == 0:
        return f"{x // MiB} MiB"
    if x >= KiB and x % KiB == 0:
        return f"{x // KiB} KiB"
    return f"{x:,} B"


ROWS = [
    ("SMs (CUs)", "sm_count", lambda v: str(v) if v is not None else "not public"),
    ("32-bit registers per SM", "regs_per_sm", lambda v: f"{v:,}" if v else "not public"),
    ("max registers per thread", "max_regs_per_thread", lambda v: str(v) if v else "n/p"),
    ("max threads per SM", "max_threads_per_sm", lambda v: str(v) if v else "not found"),
    ("max CTAs per SM", "max_ctas_per_sm", lambda v: str(v) if v else "not found"),
    ("shared memory per SM", "smem_per_sm", _b),
    ("shared memory per block (opt-in)", "smem_per_block", _b),
    ("reserved per resident block", "smem_reserved_per_block", _b),
    ("L2", "l2_bytes", _b),
    ("L2 line / sector", "l2_sector_bytes", None),
    ("DRAM", "hbm_bytes", lambda v: f"{v / 1e9:g} GB" if v else "n/p"),
    ("DRAM bandwidth", "hbm_bw", lambda v: f"{v / 1e12:g} TB/s" if v else "n/p"),
    ("dense fp16 / bf16 / fp8 / tf32 tensor TFLOP/s", "tensor_flops", None),
    ("clock used for per-clock figures", "clock_hz", lambda v: f"{v / 1e6:g} MHz" if v
     else "not public"),
    ("shared-memory bytes per clock per SM", "smem_bytes_per_clk", lambda v: str(v) if v
     else "not found"),
    ("exp2 per clock per SM (SFU)", "sfu_per_clk", lambda v: str(v) if v else "not found"),
    ("one SM's L2 port (its share of the measured L2 bandwidth), bytes/clock",
     "sm_l2_bytes_per_clk", lambda v: f"{v:g}" if v else "not found"),
    ("L2 hit latency (near/far mean), SM clocks", "l2_hit_latency_clk",
     lambda v: f"{v:g}" if v else "not found"),
    ("L2 miss (DRAM) latency, SM clocks", "dram_latency_clk",
     lambda v: f"{v:g}" if v else "not found"),
    ("extra latency of a TMA load, SM clocks", "tma_latency_clk",
     lambda v: f"{v:g}" if v else "—"),
]


def cell(dev, field, fmt):
    if field == "l2_sector_bytes":
        v = f"{dev.l2_line_bytes or 'n/p'} / {dev.l2_sector_bytes or 'n/a'} B"
    elif field == "tensor_flops":
        t = dev.tensor_flops
        v = " / ".join("—" if t.get(k) is None else f"{t[k] / 1e12:g}"
                       for k in ("fp16", "bf16", "fp8", "tf32"))
    else:
        v = fmt(getattr(dev, field))
    src = dev.cite(field)
    return f"{v} [{src}]" if src else v


def sustained() -> list[str]:
    """The "Sustained rates" section: each unit's peak from the table times the calibrated
    efficiency of the device's generation (attnio/hardware/calibration.json)."""
    from attnio.hardware.timing import generation, load_params

    pick = [devices.get("a100"), devices.get("h100")]
    L = ["", "## Sustained rates (the calibrated time model)", "",
         "What each unit sustains in the time model (docs/hardware.md, section 6): the peak of "
         "the table above times an efficiency of the device's generation from "
         "`src/attnio/hardware/calibration.json`, each generation fitted separately by "
         "`benchmarks/calibrate_gpu.py` to its own rows of the calibration set (sm90: the 91 "
         "H100 rows, 10 parameters; sm80: the 33 A100 rows of the FA2 paper, 8 parameters; "
         "`timing.FITTED`).  The microbenchmark papers (luo2024, luo2025) report that Hopper "
         "reaches its tensor rate only through the asynchronous warp-group `wgmma`, the "
         "synchronous `mma.sync` of Ampere-style kernels (FA2) staying well below, and that a "
         "`wgmma`'s throughput rises with its N dimension: the fit puts the two families apart in "
         "that direction, and the model charges an m64nNk16 `N/(N + 8)` of the large-N rate "
         "(`WGMMA_N0` = 8 columns, about 4 clocks per instruction; held, not fitted: the free "
         "fit went to the lower bound of its physical range [8, 64]); their exact figures were "
         "not re-read here, so none is copied.", "",
         "Per-step and per-access-pattern costs (docs/hardware.md, section 6): the online "
         "softmax's O rescale (Br x dv FP32 multiplies per K/V step) and the causal mask (2 "
         "FP32 instructions per score on the steps that straddle the diagonal) on the FP32 "
         "pipes; `step_cycles` of synchronisation per step (barriers, warp-group waits; two "
         "rounds without warp specialization, one more with P in shared memory); HBM: flash "
         "kernels stream contiguous K/V at 0.90 of the data sheet (STREAM-like copies reach "
         "about 90% on A100 and H100; `STREAM_HBM_EFF`, an assumption), a paged cache loses "
         "256 B per page run (`PAGE_OVERHEAD_BYTES`, an assumption), and unfused attention's "
         "S and P kernels run at the fitted `hbm_eff`.  The FA2 paper (arXiv 2307.08691) "
         "motivates the per-step terms (its section 3.1: fewer non-matmul FLOPs, the rescale "
         "deferred to the end for the output but still applied to O per block); the FA3 paper "
         "(arXiv 2407.08608) the three mechanisms of its section 3 (warp specialization, "
         "ping-pong, intra-warp-group overlap), whose ablation (Table 2: 661 / 582 / 570 "
         "TFLOP/s) is validation, never fitted.", "",
         "| unit | " + " | ".join(f"{d.name} ({generation(d)})" for d in pick) + " | source |",
         "|---|" + "---|" * len(pick) + "---|"]

    def row(label, fn, src):
        L.append(f"| {label} | " + " | ".join(fn(d, load_params(d)) for d in pick)
                 + f" | {src} |")

    row("tensor, mma.sync (FA1, FA2, split-KV; cuBLAS on sm80), bf16",
        lambda d, p: f"{d.flops('bf16') * p.mma_sync_eff / 1e12:,.0f} TFLOP/s "
                     f"({p.mma_sync_eff:.3f} x peak)", "fitted per generation")
    row("tensor, wgmma (FA3; cuBLAS on sm90), bf16",
        lambda d, p: (f"{d.flops('bf16') * p.wgmma_eff / 1e12:,.0f} TFLOP/s "
                      f"({p.wgmma_eff:.3f} x peak)") if d.wgmma else "no wgmma",
        "fitted (sm90)")
    row("tensor, wgmma, fp8",
        lambda d, p: (f"{d.flops('fp8') * p.wgmma_eff / 1e12:,.0f} TFLOP/s") if d.wgmma
        else "no fp8", "fitted efficiency x the fp8 peak [h100_wp]")
    row("exp2 on the SFUs", lambda d, p: f"{d.sfu_per_clk * d.sm_count * d.clock_hz / 1e12:.2f}"
        " T/s (16 per clock per SM)", "cuda_arith")
    row("softmax's other instructions (FP32 pipes)",
        lambda d, p: f"{p.softmax_ops:.2f} per exponential at "
                     f"{64 if d.compute_capability == '8.0' else 128} lanes/clock/SM",
        "fitted; lanes: cuda_arith")
    row("shared memory", lambda d, p: f"{d.smem_bytes_per_clk * d.sm_count * d.clock_hz / 1e12:.1f}"
        " TB/s (128 B/clock/SM)", "cuda_smem_banks")
    row("L2 (all SMs' ports)", lambda d, p: f"{d.l2_bandwidth / 1e12:.1f} TB/s "
        f"({d.sm_l2_bytes_per_clk} B/clock/SM)", "gpu_benches, luo2025 (derived)")
    row("HBM", lambda d, p: f"{d.hbm_bw * p.hbm_eff / 1e12:.2f} TB/s ({p.hbm_eff:.3f} x "
        f"{d.hbm_bw / 1e12:.2f})", "fitted per generation (unfused attention's S/P pattern)")
    row("HBM, flash kernels' streaming K/V", lambda d, p: f"{d.hbm_bw * 0.9 / 1e12:.2f} TB/s "
        f"(0.90 x {d.hbm_bw / 1e12:.2f})", "assumed (STREAM-like copies)")
    row("per K/V step", lambda d, p: f"{p.step_cycles:,.0f} clocks", "fitted per generation")
    row("per CTA, per launch, per framework call",
        lambda d, p: f"{p.cta_cycles:,.0f} clocks; {p.launch_us:.1f} us; {p.call_us:.1f} us",
        "fitted per generation")
    return L


def render() -> str:
    gpus = [d for d in devices.all_devices() if d.kind == "gpu"]
    L = ["# Devices", "",
         "The GPU model's device table (`attnio.hardware.devices`, `attnio gpu devices`), every "
         "figure with its source keys in brackets; the keys are listed below.  Generated by "
         "`python docs/gen_devices.py` from the table itself, so the page and the code cannot "
         "drift.  `assumed` marks a modelling assumption (no vendor publishes it; see "
         "docs/hardware.md, \"Assumptions\"), `inferred` a figure taken from a sibling part with "
         "the same die, `derived` arithmetic on cited figures (shown in the device's notes).  "
         "The memory system's last four rows come from microbenchmarks, not from NVIDIA "
         "(docs/hardware.md, \"Memory latency and each SM's L2 port\"): latencies in SM clocks "
         "as the papers report them, converted to seconds at the clock row.", "",
         "Conventions: on-chip sizes are binary (NVIDIA's tables print the A100's 40 MB L2 as "
         "\"40960 KB\"); DRAM capacity and bandwidth are the decimal figures of the data sheets; "
         "tensor FLOP/s are dense (data sheets print 2:4-sparse figures, halved here), fp16/bf16 "
         "with FP32 accumulation (what attention kernels use).  A device missing a figure the "
         "model needs is listed but not scorable (`attnio gpu score` says which figure).", "",
         "The two-level planner's presets (`attnio plan --device`) come from the same table: "
         "M = one CTA's usable shared memory (the per-block figure), in words of the dtype; "
         "`a100` and `h100` are aliases of `a100-80gb` and `h100-sxm`.  Two CPU presets exist "
         "for the two-level model only: `cpu-l1d` 48 KiB and `cpu-l2` 2 MiB [intel_orm].", ""]
    for part in (gpus[:5], gpus[5:]):
        L.append("| figure | " + " | ".join(d.name for d in part) + " |")
        L.append("|---|" + "---|" * len(part))
        for label, field, fmt in ROWS:
            L.append(f"| {label} | " + " | ".join(cell(d, field, fmt) for d in part) + " |")
        L.append("")
    L += ["## Notes per device", ""]
    for d in gpus:
        L.append(f"- **{d.name}** ({d.description}; compute capability {d.compute_capability})"
                 + (": " + " ".join(d.notes) if d.notes else "") +
                 (" Inferred: " + ", ".join(d.inferred) + "." if d.inferred else "") +
                 (" Not scorable: " + ", ".join(d.missing()) + " not public."
                  if d.missing() else ""))
    L += sustained()
    L += ["", "## Sources", "",
          "`read` = the text was read during the research behind this table (directly or "
          "through a verbatim public copy); `not re-read` = taken from the named official "
          "document, whose text could not be retrieved here: re-check before relying on it.", "",
          "| key | document | read |", "|---|---|---|"]
    for k, (title, url, read) in devices.SOURCES.items():
        doc = f"[{title}]({url})" if url else title
        L.append(f"| {k} | {doc} | {'read' if read else 'not re-read'} |")
    return "\n".join(L) + "\n"


if __name__ == "__main__":
    out = sys.argv[1] if len(sys.argv) > 1 else "docs/devices.md"
    with open(out, "w") as f:
        f.write(render())
    print("wrote", out)
