"""Write docs/devices.md from the device table (attnio.hardware.devices): every figure with its
sources.  Run: ``python docs/gen_devices.py`` (from the repository root); ``--check`` writes
nothing and exits 1 where the page differs from what it would write.

Every section of the page is written here, the prose included (the mechanisms that decide
between tiles, the shared-memory floor of SS ``wgmma``): edit this file, not docs/devices.md.
``tests/hardware/test_hardware_devices_doc.py`` checks the page against :func:`render`."""

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
         "not re-read here, so none is copied."
         '  Beneath that overhead, an fa3 GEMM whose A and B operands both come from shared '
         "memory (SS: FA3's QKᵀ always, PV with `p = smem`) cannot run faster than its "
         "operands' reads at the SM's 128 B per clock: `(64 + N)·32` bytes per m64nNk16, `(64 + "
         'N)/(2N)` of its tensor time on H100 (binding for N < 64; `timing.ss_operand_floor`, '
         'derived from the PTX operand shapes and the shared-memory bandwidth, nothing fitted; '
         'docs/hardware.md, section 6).', "",
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
         'Mechanisms that decide between tiles (issue 32; docs/hardware.md, sections 3, 6 and '
         "9a, each with what it says at the issue's shapes):", "",
         '* **Register budget** (section 3): an FA3 consumer thread holds O (`64·dv/128` fp32), '
         'S (`64·Bc/128`) and, with P in registers and the intra-warp-group overlap, P '
         '(`Bc/4`), plus 24 (two consumer groups) or 32 (three) registers of overhead, against '
         "the consumer's `setmaxnreg` budget, 240 or 160 (`hopper/flash_fwd_kernel_sm90.h` "
         'register requirements; `AI/SM90_BLOCK_SIZE_TUNING.md`, "Register Accounting"; P\'s '
         'live range from `fwd_step` in `hopper/mainloop_fwd_sm90_tma_gmma_ws.hpp`).  FA2: O, S '
         "(and Q in registers) over the CTA's threads plus 32, against 255.  Every shipped tile "
         'fits; over the budget a config is infeasible, not charged a spill: the one published '
         'spill (FA2\'s 256x64 at d = 64, "85% slower ... because of register spilling", '
         '`flash_fwd_launch_template.h`) is far beyond what its local-memory traffic would '
         'cost.',
         "* **Ping-pong partners** (section 6, `timing.pingpong_partners`): FA3's scheduler "
         'barrier is a round robin over the consumer groups (`warp_scheduler_barrier_arrive`), '
         'so a softmax of ρ GEMM batches needs `ceil(ρ)` of the other groups; further groups '
         'add no hiding.  ρ counts all a group does between its batches: the softmax and, with '
         "P in shared memory, P's stores (`write_P_to_smem` before the group's next GEMMs in "
         '`fwd_step`; `timing.p_store_s`, at 128 B per clock).',
         '* **Instruction shape and operand reads** (section 6): `wgmma` N/(N + 8) of the '
         'large-N rate (luo2024, luo2025: throughput rises with N; the tables were not re-read '
         'here: the stored copies hold the abstracts only, docs/hardware.md section 9a) and the '
         'SS operand floor `(64 + N)/(2N)` (PTX ISA operand shapes, 128 B per clock of shared '
         'memory; `AI/SM90_BLOCK_SIZE_TUNING.md`, "SMEM Traffic"); `mma.sync`\'s per-warp '
         'ldmatrix traffic (every warp reads all of K and V each step: '
         '`csrc/flash_attn/src/flash_fwd_kernel.h`, FA2 paper section 3.3) in the shared-memory '
         'unit.',
         '* **Per-step costs**: the O rescale (FA2 paper section 3.1.1), the causal mask on the '
         "diagonal steps, synchronisation (`step_cycles`, fitted to 0 on sm90: FA3's groups "
         "arrive on the next group's barrier before they wait).",
         '* **Stages** (section 6): a load is issued `stages - 1 + lead` steps before its use; '
         'at d = 256 shared memory allows 2 stages up to Bc = 80, 3 at 48, 1 from 96 '
         '(`hopper/tile_size.h`: "128 x 80 hits the limit of smem", reproduced).  `gpu tune` '
         "searches FA3's forward at the 2 stages flash-attn builds it with (`kStages = Arch >= "
         '90 ? 2 : ...`, `hopper/flash_fwd_launch_template.h`); `gpu score` takes others.',
         '* **Occupancy and waves**: CTAs per SM from shared memory, registers, threads and the '
         'CTA limit (FA2\'s "2 CTAs per SM", `flash_fwd_launch_template.h`, reproduced); CTAs '
         "dispatched greedily to the `SMs x CTAs per SM` slots in the kernel's launch order "
         '(FA2: `(m, b, h)`, m fastest and not reversed, `flash_fwd_kernel.h`; FA3 causal: '
         'longest first within L2 sections of heads, `hopper/tile_scheduler.hpp`), so a last '
         "partial wave (FA2's 128x64 at d = 128, N = 8192, batch 2, 16 heads: 9.48 waves on "
         'A100) costs its `tail`.', "",
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


def generations() -> list[str]:
    """The "Generations" section: each generation's limits, wgmma, and whose fit it uses."""
    from attnio.hardware import fits
    from attnio.hardware.timing import _table

    stored = _table()["generations"]
    L = ["", "## Generations and their fits", "",
         "A device's generation (its compute capability) sets its per-SM limits (cuda_cc), "
         "whether FA3-style kernels run on it (`wgmma` exists on sm90 only: FA3, flash-attn's "
         "`hopper/`, does not run on Blackwell, whose `tcgen05` kernels are not modelled) and "
         "the time model's fitted parameters (`src/attnio/hardware/calibration.json`).  A "
         "generation without a fit of its own borrows the one below, and **says so**: "
         "every `attnio gpu` verb prints one warning line (`attnio gpu score: warning: device "
         "rtx4090 (sm89) has no fitted time-model parameters: it borrows sm80's fit, so its "
         "times are uncalibrated (fit your own: attnio gpu calibrate)`), and the Python API "
         "issues an `attnio.hardware.fits.FitWarning`.  A fit of your own (`attnio gpu "
         "calibrate`, below) replaces it.", "",
         "| generation | compute capability | parts | FA3 (wgmma) | time-model parameters |",
         "|---|---|---|---|---|"]
    for gen, (cc, parts) in devices.GENERATIONS.items():
        fit = ("its own (calibration.json)" if gen in stored
               else f"none: borrows {fits.borrowed(gen, stored)}'s, with a warning")
        L.append(f"| {gen} | {cc} | {parts} | {'yes' if cc == '9.0' else 'no'} | {fit} |")
    L += ["", "The sm89 and sm100 presets come from vendor tables, each figure cited above: "
          "**rtx4090** from the Ada whitepaper's Appendix A [ada_wp] (128 SMs, 2,520 MHz boost, "
          "73,728 KB L2, 1,008 GB/s, 165.2 dense FP16/BF16 TFLOPS with FP32 accumulate); "
          "**l40s** from its data sheet [l40s_ds] (18,176 CUDA cores = 142 SMs, 864 GB/s, "
          "362.05 dense BF16 TFLOPS), its L2 the full AD102's 98,304 KB [ada_wp, inferred] and "
          "its clock derived from the peak (362.05e12 / (142 x 1,024) = 2.49 GHz); **b200** "
          "from the DGX B200 data sheet [dgx_b200] (64 TB/s and 1,440 GB over 8 GPUs), the HGX "
          "page [hgx_page] (36 PFLOPS FP16/BF16 with sparsity over 8 GPUs: 2,250 dense TFLOPS "
          "each), Chips and Cheese's measurements [cc_b200] (148 SMs, a 126 MB L2; NVIDIA "
          "publishes neither) and cuda_cc's compute capability 10.0 (228 KB shared memory per "
          "SM); its clock is derived from the peak assuming 8,192 dense FP16 FLOP per clock per "
          "SM (twice Hopper's; `assumed`), and its memory-system latencies are GH100's "
          "(`assumed`: no B200 microbenchmark was read)."]
    return L


def device_file_section() -> list[str]:
    """The "Your own GPU" section: the device file's keys and the two shipped examples."""
    from pathlib import Path

    from attnio.hardware import device_file

    here = Path(__file__).resolve().parent / "devices"
    L = ["", "## Your own GPU: `--device-file` and `gpu calibrate`", "",
         "Every `attnio gpu` verb (`devices`, `kernels`, `score`, `tune`, `validate`, "
         "`calibrate`) takes `--device-file FILE.toml`, a GPU described in TOML, instead of "
         "`--device` (in `validate` and `calibrate`, the rows name it by its `name`).  The file "
         "is read with `tomllib` (`tomli` on Python 3.10) and checked once: a missing or "
         "unknown key, a wrong type, a value out of range, an unknown generation, a binary or "
         "non-UTF-8 file, a file that is not TOML or is missing is refused in one line naming "
         "the file, the key and the allowed range (exit 2), e.g.", "",
         "    attnio gpu score: error: --device-file my.toml: key 'sm_count': must be an "
         "integer in [1, 1024], got 0", "",
         "| key | required | allowed | meaning |", "|---|---|---|---|"]
    for k, (kind, lo, hi, req, meaning) in device_file.KEYS.items():
        allowed = {"str": "text", "table": "a table: fp16, bf16 (one at least), fp8, tf32, "
                                            "each in [0.1, 100000]"}.get(
            kind, f"integer in [{int(lo):,}, {int(hi):,}]" if kind == "int"
            else f"number in [{lo:g}, {hi:g}]")
        if k == "generation":
            allowed = ", ".join(devices.GENERATIONS)
        if k == "name":
            allowed = "1-40 letters, digits, `.`, `_`, `-`; not a preset's name"
        L.append(f"| `{k}` | {'yes' if req else 'no'} | {allowed} | {meaning} |")
    L += ["", "Left out, the per-SM limits are the generation's (cuda_cc), and the memory "
          "system's microbenchmark figures (`sm_l2_bytes_per_clk`, `l2_hit_latency_clk`, "
          "`dram_latency_clk`, `tma_latency_clk`) those of the generation's preset die "
          "(a100-80gb, rtx4090, h100-sxm, b200), listed as `assumed` in the device's "
          "`attnio gpu devices --device-file FILE --json` entry.  Two examples ship with the "
          "project and are tested to load and to give the same predictions as the presets "
          "they describe:", ""]
    for name, what in (("rtx4090.toml", "an RTX 4090 (sm89)"), ("b200.toml", "a B200 (sm100)")):
        L += [f"`docs/devices/{name}`, {what}:", "", "```toml",
              (here / name).read_text().rstrip(), "```", ""]
    L += ["From the repository root:", "", "```",
          "python -m attnio gpu score --N 8192 --d 128 --heads 16 --batch 2 --device-file "
          "docs/devices/rtx4090.toml   # and the one warning line: sm89 borrows sm80's fit",
          "python -m attnio gpu tune --N 8192 --d 128 --heads 16 --device-file "
          "docs/devices/b200.toml --top 3   # FA2-style tiles: no FA3 on sm100",
          "python -m attnio gpu calibrate --measurements my_runs.csv --device-file "
          "docs/devices/rtx4090.toml --out my_fit.json",
          "python -m attnio gpu score --N 8192 --d 128 --device-file docs/devices/rtx4090.toml "
          "--calibration my_fit.json   # no warning: your fit",
          "```", "",
          "`gpu calibrate --measurements FILE.csv --out FILE.json` fits the time model's "
          "parameters to your rows (the format of `gpu validate`: `attnio gpu validate --help`), "
          "each generation the rows cover separately, starting from that generation's stored "
          "(or borrowed) fit and fitting only the parameters the rows depend on (the others "
          "keep their values; the output says which), with scipy's bounded least squares on "
          "the log of predicted over measured time (`pip install 'attnio[calibrate]'`).  It "
          "prints the error before and after; the file holds the parameters and their "
          "provenance (the CSV's SHA-256, the rows, the devices, the date).  `--calibration "
          "FILE.json` on `score`, `tune` and `validate` uses it in place of the stored fit of "
          "the generations it holds (`score` and `tune` refuse a file that holds none for the "
          "device).  `--out` is refused, before anything is written, when it is an input file "
          "(or a link to one), a device, a FIFO or a folder; it is written whole, through a "
          "temporary file in the same folder."]
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
    L += generations()
    L += device_file_section()
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


def main(argv: list[str] | None = None) -> int:
    """Write docs/devices.md, or with ``--check`` compare it (exit 1 where it differs)."""
    import argparse
    from pathlib import Path

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true",
                    help="write nothing; exit 1 where docs/devices.md differs from the table")
    args = ap.parse_args(argv)
    page = Path(__file__).resolve().parent / "devices.md"
    text = render()
    if args.check:
        same = page.read_text(encoding="utf-8") == text
        print("docs/devices.md matches the generator" if same
              else "docs/devices.md differs: run python docs/gen_devices.py")
        return 0 if same else 1
    page.write_text(text, encoding="utf-8")
    print("wrote", page)
    return 0


if __name__ == "__main__":
    sys.exit(main())
