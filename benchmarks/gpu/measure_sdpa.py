"""Measure PyTorch SDPA's flash backend (and cuDNN's, if time allows) on a GPU against the model.

One prepared script, one call (about 3-5 minutes on an H100/H200; limit 8 minutes):

    python benchmarks/gpu/measure_sdpa.py --out "$OUT/sdpa.json"

* 24 shapes: batch x heads in {16, 128} (batch 1 x 16 heads, batch 8 x 16 heads), N in {1k, 8k,
  32k}, d in {64, 128}, causal and not; bf16; forward only.
* Kernel time: CUDA events, median of 10 after 3 warm-ups (always).
* DRAM bytes and kernel time: ``ncu --metrics dram__bytes_read.sum,dram__bytes_write.sum,
  gpu__time_duration.sum`` on the flash kernels, the script re-running itself as the profiled
  worker (``--worker``).  ncu flushes the caches before each profiled kernel, as the model starts
  with an empty L2.  If ncu is missing or cannot read counters (ERR_NVGPUCTRPERM), the JSON says
  so and only the event times are compared.
* Prediction: ``attnio.hardware.score(device, shape, "sdpa")``: the model's prediction for the
  config SDPA's flash backend runs (flash-attn's FA2 table), on the preset matching the GPU's name,
  and on the same preset with the SM count and L2 size the driver reports.

Render the docs section afterwards (on any machine):

    python benchmarks/gpu/measure_sdpa.py --render sdpa.json --doc docs/hardware.md
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import io
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "src"))

METRICS = "dram__bytes_read.sum,dram__bytes_write.sum,gpu__time_duration.sum"
SHAPES = [(b, 16, N, d, c) for b in (1, 8) for N in (1024, 8192, 32768) for d in (64, 128)
          for c in (False, True)]
PRESETS = [("H200", "h200"), ("H100 PCIe", "h100-pcie"), ("H100", "h100-sxm"),
           ("A100-SXM4-40GB", "a100-40gb"), ("A100", "a100-80gb"), ("4090", "rtx4090")]


def preset_for(name: str) -> str | None:
    for key, preset in PRESETS:
        if key.lower() in name.lower():
            return preset
    return None


def _tensors(torch, b, h, N, d):
    g = torch.Generator(device="cuda").manual_seed(0)
    return [torch.randn(b, h, N, d, device="cuda", dtype=torch.bfloat16, generator=g)
            for _ in range(3)]


def _backend(torch, which):
    from torch.nn.attention import SDPBackend, sdpa_kernel

    return sdpa_kernel(SDPBackend.FLASH_ATTENTION if which == "flash"
                       else SDPBackend.CUDNN_ATTENTION)


def run_once(torch, which, q, k, v, causal):
    F = torch.nn.functional
    with _backend(torch, which):
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)


def event_time(torch, which, b, h, N, d, causal, repeat=10):
    q, k, v = _tensors(torch, b, h, N, d)
    for _ in range(3):
        run_once(torch, which, q, k, v, causal)
    torch.cuda.synchronize()
    ts = []
    for _ in range(repeat):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        run_once(torch, which, q, k, v, causal)
        e.record()
        torch.cuda.synchronize()
        ts.append(s.elapsed_time(e) / 1e3)
    del q, k, v
    torch.cuda.empty_cache()
    return statistics.median(ts)


def worker() -> None:
    """Under ncu: every shape once through the flash backend, in SHAPES order."""
    import torch

    for b, h, N, d, causal in SHAPES:
        q, k, v = _tensors(torch, b, h, N, d)
        run_once(torch, "flash", q, k, v, causal)
        torch.cuda.synchronize()
        del q, k, v
        torch.cuda.empty_cache()


def run_ncu(deadline: float) -> dict:
    ncu = shutil.which("ncu") or next((p for p in ("/usr/local/cuda/bin/ncu",
                                                   "/opt/nvidia/nsight-compute/ncu")
                                       if os.path.exists(p)), None)
    if ncu is None:
        return {"available": False, "error": "ncu not found"}
    cmd = [ncu, "--metrics", METRICS, "-k", "regex:flash", "--csv", "--page", "raw",
           "--cache-control", "all", sys.executable, os.path.abspath(__file__), "--worker"]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True,
                           timeout=max(30, deadline - time.time()))
    except subprocess.TimeoutExpired:
        return {"available": True, "error": "ncu timed out"}
    text = p.stdout
    if "ERR_NVGPUCTRPERM" in text + p.stderr:
        return {"available": True, "error": "ERR_NVGPUCTRPERM: no permission to read counters"}
    rows = [r for r in csv.reader(io.StringIO(text[text.find('"ID"'):])) if r]
    if len(rows) < 2:
        return {"available": True, "error": "no ncu rows", "stderr": p.stderr[-2000:]}
    head, units = rows[0], rows[1]
    out = []
    for r in rows[2:]:
        rec = dict(zip(head, r))
        scale = {}
        for m in METRICS.split(","):
            u = units[head.index(m)] if m in head else ""
            scale[m] = {"byte": 1, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9, "nsecond": 1e-9,
                        "usecond": 1e-6, "msecond": 1e-3, "second": 1}.get(u, 1)
        try:
            out.append({"kernel": rec.get("Kernel Name", ""),
                        "dram_read": float(rec[METRICS.split(",")[0]].replace(",", ""))
                        * scale[METRICS.split(",")[0]],
                        "dram_write": float(rec[METRICS.split(",")[1]].replace(",", ""))
                        * scale[METRICS.split(",")[1]],
                        "time_s": float(rec[METRICS.split(",")[2]].replace(",", ""))
                        * scale[METRICS.split(",")[2]]})
        except (KeyError, ValueError):
            continue
    return {"available": True, "kernels": out}


def predict(preset_name, props, shape, which="sdpa"):
    from attnio.hardware import devices
    from attnio.hardware.model import score

    dev = devices.get(preset_name)
    out = {}
    for label, d in (("preset", dev),
                     ("measured_sms_l2", dataclasses.replace(
                         dev, sm_count=props["sms"], l2_bytes=props["l2_bytes"]))):
        t0 = time.time()
        s = score(d, shape, which)
        out[label] = {"config": s.config.short(), "hbm_read": s.hbm_read_bytes,
                      "hbm_write": s.hbm_write_bytes, "time_s": s.time_s,
                      "bound_by": s.bound_by, "compulsory": s.compulsory_bytes,
                      "model_s": time.time() - t0}
    return out


def measure(args) -> dict:
    t_start = time.time()
    deadline = t_start + args.budget
    res = {"date": time.strftime("%Y-%m-%d %H:%M"), "shapes": [], "notes": []}
    try:
        import torch
    except ImportError:
        res["error"] = "torch is not installed"
        return res
    if not torch.cuda.is_available():
        res["error"] = "no CUDA device"
        return res
    p = torch.cuda.get_device_properties(0)
    props = {"name": p.name, "sms": p.multi_processor_count,
             "l2_bytes": getattr(p, "L2_cache_size", 0) or 0,
             "smem_per_block_optin": getattr(p, "shared_memory_per_block_optin", None),
             "capability": f"{p.major}.{p.minor}", "torch": torch.__version__,
             "cuda": torch.version.cuda}
    res["gpu"] = props
    preset = preset_for(p.name)
    res["preset"] = preset
    from attnio.core.workload import Shape

    ncu = run_ncu(t_start + min(args.budget * 0.5, 240)) if not args.no_ncu else {
        "available": False, "error": "--no-ncu"}
    res["ncu"] = {k: v for k, v in ncu.items() if k != "kernels"}
    kern = [k for k in ncu.get("kernels", []) if "combine" not in k["kernel"]]
    for i, (b, h, N, d, causal) in enumerate(SHAPES):
        if time.time() > deadline - 20:
            res["notes"].append(f"stopped at shape {i}: time budget")
            break
        row = {"batch": b, "heads": h, "N": N, "d": d, "causal": causal}
        try:
            row["flash_event_s"] = event_time(torch, "flash", b, h, N, d, causal)
        except Exception as e:  # noqa: BLE001 - report and go on
            row["flash_error"] = f"{type(e).__name__}: {e}"[:300]
        if args.cudnn and time.time() < deadline - 60:
            try:
                row["cudnn_event_s"] = event_time(torch, "cudnn", b, h, N, d, causal)
            except Exception as e:  # noqa: BLE001
                row["cudnn_error"] = f"{type(e).__name__}: {e}"[:300]
        if i < len(kern) and len(kern) == len(SHAPES):
            row["ncu"] = kern[i]
        if preset:
            shp = Shape(N, N, d, batch=b, heads=h, causal="top_left" if causal else False)
            row["model"] = predict(preset, props, shp)
        res["shapes"].append(row)
    if kern and len(kern) != len(SHAPES):
        res["notes"].append(f"ncu returned {len(kern)} flash kernels for {len(SHAPES)} shapes: "
                            "not matched")
    res["wall_s"] = time.time() - t_start
    return res


def summarize(res) -> dict:
    rel_b, rel_t = [], []
    for r in res.get("shapes", []):
        m = r.get("model", {}).get("preset")
        if not m:
            continue
        if "ncu" in r:
            meas = r["ncu"]["dram_read"] + r["ncu"]["dram_write"]
            rel_b.append(abs(m["hbm_read"] + m["hbm_write"] - meas) / meas)
        t = r.get("ncu", {}).get("time_s") or r.get("flash_event_s")
        if t:
            rel_t.append(abs(m["time_s"] - t) / t)
    return {"median_rel_err_hbm_bytes": statistics.median(rel_b) if rel_b else None,
            "median_rel_err_time": statistics.median(rel_t) if rel_t else None,
            "n_bytes": len(rel_b), "n_time": len(rel_t)}


def _pct(x):
    return "n/a" if x is None else f"{x:.1%}"


def render(res) -> str:
    if "error" in res:
        return f"GPU run of {res.get('date')}: {res['error']}.\n"
    g = res["gpu"]
    s = summarize(res)
    ncu = res["ncu"]
    ncu_state = "ok" if ncu.get("available") and "error" not in ncu else ncu.get("error", "n/a")
    L = [f"Measured on {res['date']}: {g['name']} ({g['sms']} SMs, L2 "
         f"{g['l2_bytes'] / 2**20:.0f} MiB reported by the driver; compute capability "
         f"{g['capability']}; torch {g['torch']}, CUDA {g['cuda']}); model preset "
         f"`{res['preset']}`.  ncu: {ncu_state}.", "",
         f"Median |predicted - measured| / measured: HBM bytes "
         f"{_pct(s['median_rel_err_hbm_bytes'])} over {s['n_bytes']} shapes; time "
         f"{_pct(s['median_rel_err_time'])} over {s['n_time']} shapes.", "",
         "| batch x heads | N | d | causal | config (model) | measured DRAM MB | predicted MB | "
         "measured us | predicted us | bound | cuDNN us |",
         "|---:|---:|---:|---|---|---:|---:|---:|---:|---|---:|"]
    for r in res["shapes"]:
        m = r.get("model", {}).get("preset", {})
        meas_b = (r["ncu"]["dram_read"] + r["ncu"]["dram_write"]) / 1e6 if "ncu" in r else None
        t = r.get("ncu", {}).get("time_s") or r.get("flash_event_s")
        pred_b = (m["hbm_read"] + m["hbm_write"]) / 1e6 if m else None
        cudnn = r.get("cudnn_event_s")
        L.append(f"| {r['batch'] * r['heads']} | {r['N']:,} | {r['d']} | "
                 f"{'yes' if r['causal'] else 'no'} | {m.get('config', '')} | "
                 f"{'n/a' if meas_b is None else f'{meas_b:,.1f}'} | "
                 f"{'n/a' if pred_b is None else f'{pred_b:,.1f}'} | "
                 f"{'n/a' if not t else f'{t * 1e6:,.1f}'} | "
                 f"{m.get('time_s', 0) * 1e6:,.1f} | {m.get('bound_by', '')} | "
                 f"{'n/a' if not cudnn else f'{cudnn * 1e6:,.1f}'} |")
    for n in res.get("notes", []):
        L.append(f"\nNote: {n}")
    return "\n".join(L) + "\n"


def write_doc(path, body):
    begin, end = "<!-- BEGIN gpu_measurements -->", "<!-- END gpu_measurements -->"
    with open(path) as f:
        text = f.read()
    a, b = text.index(begin) + len(begin), text.index(end)
    with open(path, "w") as f:
        f.write(text[:a] + "\n" + body + text[b:])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.join(os.environ.get("OUT", "."), "sdpa.json"))
    ap.add_argument("--budget", type=float, default=450, help="seconds for the whole run")
    ap.add_argument("--no-ncu", action="store_true", help="CUDA-event times only")
    ap.add_argument("--cudnn", action="store_true", help="also time SDPA's cuDNN backend")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--render", default=None, help="a JSON of a previous run: print/write docs")
    ap.add_argument("--doc", default=None, help="with --render: the docs page to fill")
    args = ap.parse_args(argv)
    if args.worker:
        worker()
        return
    if args.render:
        with open(args.render) as f:
            res = json.load(f)
        body = render(res)
        if args.doc:
            write_doc(args.doc, body)
        print(body)
        return
    res = measure(args)
    res["summary"] = summarize(res) if "error" not in res else None
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(res, f, indent=1, default=str)
    print(render(res))
    print("wrote", args.out)


if __name__ == "__main__":
    main()
