"""A validation case outside the calibration set: FA3's decode step over a paged KV cache on an
H100, as measured in flash-attn issue #1572 (TheRainstorm, 2025-04-11: flash-attn's
``hopper/benchmark`` script, CUDA graphs, ``num_splits=0``, batch 16, one query row, 32 query and
32 KV heads, d = 128, fp16, ``page_size=8``).  Nothing here is fitted: the calibration
(benchmarks/calibrate_gpu.py) reads only ../shared/data/gpu-published/train.csv.

Run:  python benchmarks/bench_gpu_paged_decode.py [--out benchmarks/results/gpu_paged_decode.json]

Prints the markdown table docs/hardware.md quotes.  Nothing is asserted.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from attnio.core.workload import Shape  # noqa: E402
from attnio.hardware.model import score  # noqa: E402

URL = "https://github.com/Dao-AILab/flash-attention/issues/1572"
#: (KV length, measured FA3 time in us) on an H100, from the issue thread.
MEASURED = ((128, 27.6), (2000, 292.0), (4000, 567.2))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" /
                                         "gpu_paged_decode.json"))
    a = ap.parse_args(argv)
    rows = []
    for n, meas in MEASURED:
        shape = Shape(1, n, 128, batch=16, heads=32, kv_heads=32, causal=True)
        # flash-attn's FA3 config for the shape, reading K/V from its 8-row pages (page_size=8:
        # the model's paged efficiency, docs/hardware.md section 6)
        base = score("h100", shape, "fa3", dtype="fp16").config
        s = score("h100", shape, dataclasses.replace(base, page_size=8), dtype="fp16")
        t = s.time_s * 1e6
        kv = 16 * n * 32 * 128 * 2 * 2
        rows.append({"Nkv": n, "measured_us": meas, "predicted_us": t, "error": t / meas - 1,
                     "config": s.config.short(), "bound_by": s.bound_by,
                     "kv_bytes": kv, "measured_TBps": kv / (meas * 1e-6) / 1e12,
                     "predicted_TBps": kv / (t * 1e-6) / 1e12})
    Path(a.out).write_text(json.dumps({"source": URL, "rows": rows}, indent=1) + "\n")
    print("| KV length | measured (us) | predicted (us) | error | K+V read at (TB/s): "
          "measured / predicted | config, bound |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['Nkv']:,} | {r['measured_us']:.1f} | {r['predicted_us']:.1f} | "
              f"{r['error']:+.1%} | {r['measured_TBps']:.2f} / {r['predicted_TBps']:.2f} | "
              f"{r['config']}, {r['bound_by']} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
