"""Benchmark of the polynomial method: error vs FAVOR+, I/O vs n, error vs degree, plots.

    python benchmarks/bench_approx.py [--threads 1]

Wall-clock against SDPA is ``benchmarks/bench_torch.py`` (SDPA's fused 4-D path; this file's
first wall-clock section timed SDPA on 3-D tensors, its unfused fallback, and is gone).

* error at equal feature dimension: max |O - O_exact| (float64 exact reference) of
  ``poly_attention`` and ``favor_attention(features=r)`` on the same float32 inputs.
* I/O (count mode, closed forms): approx_poly vs flash2 for n = 2^10 .. 2^20.
* error vs degree: proven bound, measured max relative error of P, measured attention error.

Writes benchmarks/results/approx.json and the plots docs/img/approx_error_vs_degree.png and
docs/img/approx_io_vs_n.png.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def _timed(fn):
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def favor_vs_poly(torch):
    from attnio import reference
    from attnio.torch_ops import favor_attention, poly_attention, poly_plan

    out = []
    g = torch.Generator().manual_seed(1)
    for d in (8, 16):
        for R in (0.5, 1.0, 2.0):
            n = 1024 if (d, R) == (16, 2.0) else 2048
            B = math.sqrt(R / math.sqrt(d))
            q = (torch.rand(1, n, d, generator=g) * 2 - 1) * B
            k = (torch.rand(1, n, d, generator=g) * 2 - 1) * B
            v = torch.randn(1, n, d, generator=g)
            ref = reference.attention(q[0].double().numpy(), k[0].double().numpy(), v[0].double().numpy())
            _, fm, _ = poly_plan(q, k, eps=1e-3, entry_bound=B)
            ep = float(np.abs(poly_attention(q, k, v, eps=1e-3, entry_bound=B)[0].double().numpy() - ref).max())
            ef = [float(np.abs(favor_attention(q, k, v, features=fm.r, seed=s)[0].double().numpy()
                               - ref).max()) for s in range(3)]
            vr = float((v.amax(-2) - v.amin(-2)).max())
            row = {"d": d, "R": R, "n": n, "features": fm.r, "poly_max_err": ep,
                   "guaranteed": 1e-3 / (1 - 1e-3) * vr, "favor_max_err_seeds": ef,
                   "favor_over_poly_median": float(np.median(ef)) / ep}
            print(row, flush=True)
            out.append(row)
    return out


def io_vs_n():
    import attnio

    ns = [2**k for k in range(10, 21)]
    res = []
    for M in (20_000, 3_000):
        for n in ns:
            a = attnio.run("approx_poly", shape=(n, 8), M=M, mode="count",
                           tiling={"eps": 1e-3, "entry_bound": 0.6})
            f = attnio.run("flash2", shape=(n, 8), M=M, mode="count")
            res.append({"M": M, "n": n, "d": 8, "approx_poly": a.io.total, "flash2": f.io.total,
                        "r": a.tiling.r, "r_blocks": a.tiling.r_blocks})
    return res


def error_vs_degree():
    import attnio
    from attnio import reference
    from attnio.approx.poly import _approx

    rng = np.random.default_rng(0)
    d, R = 4, 1.0
    B = math.sqrt(R / math.sqrt(d))
    Q, K, V = rng.uniform(-B, B, (300, d)), rng.uniform(-B, B, (300, d)), rng.standard_normal((300, d))
    ref = reference.attention(Q, K, V)
    x = np.linspace(-R, R, 20001)
    out = []
    for variant in ("chebyshev", "taylor"):
        for g in range(1, 11):
            p = _approx(g, R, variant)
            rel = float(np.max(np.abs(p(x) - np.exp(x)) / np.exp(x)))
            row = {"variant": variant, "degree": g, "bound": p.bound, "measured_rel": rel}
            if p.bound <= 0.5:
                r = attnio.run("approx_poly", Q, K, V, M=10**6,
                               tiling={"eps": 0.5, "entry_bound": B, "degree": g, "variant": variant})
                row["attention_err"] = float(np.abs(r.output - ref).max())
                row["attention_guarantee"] = r.tiling.error_bound_for(V)
            out.append(row)
    return out


def plots(data):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    img = ROOT / "docs" / "img"
    img.mkdir(parents=True, exist_ok=True)
    ed = data["error_vs_degree"]
    fig, ax = plt.subplots(figsize=(6, 4))
    for v, c in (("chebyshev", "C0"), ("taylor", "C1")):
        rs = [r for r in ed if r["variant"] == v]
        ax.semilogy([r["degree"] for r in rs], [r["bound"] for r in rs], "-o", color=c, label=f"{v}: proven bound")
        ax.semilogy([r["degree"] for r in rs], [r["measured_rel"] for r in rs], "--x", color=c, label=f"{v}: measured rel. error of P")
        rr = [r for r in rs if "attention_err" in r]
        ax.semilogy([r["degree"] for r in rr], [r["attention_err"] for r in rr], ":s", color=c, label=f"{v}: measured attention error")
    ax.set_xlabel("degree g"), ax.set_ylabel("error"), ax.set_title("R = 1 (d = 4, n = 300)")
    ax.legend(fontsize=7), fig.tight_layout(), fig.savefig(img / "approx_error_vs_degree.png", dpi=120)
    plt.close(fig)
    fig, ax = plt.subplots(figsize=(6, 4))
    for M, ls in ((20_000, "-"), (3_000, "--")):
        rs = [r for r in data["io_vs_n"] if r["M"] == M]
        ax.loglog([r["n"] for r in rs], [r["approx_poly"] for r in rs], ls + "o", color="C0", label=f"approx_poly, M={M:,}")
        ax.loglog([r["n"] for r in rs], [r["flash2"] for r in rs], ls + "x", color="C3", label=f"flash2, M={M:,}")
    ax.set_xlabel("n"), ax.set_ylabel("I/O (words)"), ax.set_title("d = 8, eps = 1e-3, B = 0.6 (R = 1.02)")
    ax.legend(fontsize=8), fig.tight_layout(), fig.savefig(img / "approx_io_vs_n.png", dpi=120)
    plt.close(fig)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    t0 = time.perf_counter()
    data = {"machine": {"platform": platform.platform(), "torch": torch.__version__,
                        "threads": args.threads},
            "io_vs_n": io_vs_n(), "error_vs_degree": error_vs_degree()}
    data["favor_vs_poly"] = favor_vs_poly(torch)
    data["elapsed_s"] = time.perf_counter() - t0
    out = ROOT / "benchmarks" / "results" / "approx.json"
    out.write_text(json.dumps(data, indent=1))
    plots(data)
    print(f"wrote {out} in {data['elapsed_s']:.0f} s")


if __name__ == "__main__":
    main()
