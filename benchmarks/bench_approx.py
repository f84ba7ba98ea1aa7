"""Benchmark of the polynomial method: wall-clock vs SDPA, error vs FAVOR+, I/O vs n, plots.

    python benchmarks/bench_approx.py [--threads 1] [--max-sdpa-n 16384] [--budget 30]

* wall-clock: ``poly_attention`` vs ``torch.nn.functional.scaled_dot_product_attention`` on CPU,
  float32, the same inputs, one timed run each after a warm-up on a small input, with
  ``torch.set_num_threads(threads)`` for both; n = 2^10 .. 2^16, d in {8, 16}, entry bounds
  B = sqrt(R / sqrt(d)) giving R in {0.5, 1, 2}, guaranteed eps = 1e-3.  SDPA beyond
  ``--max-sdpa-n`` is *not measured* but extrapolated as c n^2 from the largest measured n (marked
  ``"sdpa_extrapolated": true``); a poly case whose time predicted from the previous n (x2.2)
  exceeds ``--budget`` seconds is skipped and recorded as such.
* error at equal feature dimension: max |O - O_exact| (float64 exact reference) of
  ``poly_attention`` and ``favor_attention(features=r)`` on the same float32 inputs.
* I/O (count mode, closed forms): approx_poly vs flash2 for n = 2^10 .. 2^20.
* error vs degree: proven bound, measured max relative error of P, measured attention error.

Writes benchmarks/results/approx.json and the plots docs/img/approx_*.png.
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


def wallclock(torch, args):
    from attnio.torch_ops import poly_attention, poly_plan

    sdpa = torch.nn.functional.scaled_dot_product_attention
    ns = [2**k for k in range(10, 17)]
    rows = []
    g = torch.Generator().manual_seed(0)
    for d in (8, 16):
        base = {n: ((torch.rand(1, n, d, generator=g) * 2 - 1), (torch.rand(1, n, d, generator=g) * 2 - 1),
                    torch.randn(1, n, d, generator=g)) for n in ns}
        sdpa_t = {}
        w = base[ns[0]]
        sdpa(*w)  # warm-up
        for n in ns:
            if n <= args.max_sdpa_n:
                q, k, v = base[n]
                sdpa_t[n] = (_timed(lambda: sdpa(q, k, v)), False)
            else:
                m = max(sdpa_t)
                sdpa_t[n] = (sdpa_t[m][0] * (n / m) ** 2, True)
            print(f"d={d} n={n}: sdpa {sdpa_t[n][0]:.3f} s{' (extrapolated)' if sdpa_t[n][1] else ''}",
                  flush=True)
        for R in (0.5, 1.0, 2.0):
            B = math.sqrt(R / math.sqrt(d))
            q0, k0, _ = base[ns[0]]
            p, fm, _ = poly_plan(q0 * B, k0 * B, eps=1e-3, entry_bound=B)
            poly_attention(q0[:, :64] * B, k0[:, :64] * B, base[ns[0]][2][:, :64], eps=1e-3,
                           entry_bound=B)  # warm-up (monomial tables)
            prev = None
            for n in ns:
                q, k, v = base[n]
                q, k = q * B, k * B
                row = {"d": d, "R": R, "entry_bound": B, "n": n, "degree": p.degree, "r": fm.r,
                       "sdpa_s": sdpa_t[n][0], "sdpa_extrapolated": sdpa_t[n][1]}
                if prev is not None and prev * 2.2 > args.budget:
                    row.update(poly_s=None, skipped=f"predicted {prev * 2.2:.0f} s > budget {args.budget:g} s")
                else:
                    prev = _timed(lambda: poly_attention(q, k, v, eps=1e-3, entry_bound=B))
                    row.update(poly_s=prev, speedup=sdpa_t[n][0] / prev)
                rows.append(row)
                print(f"d={d} R={R} n={n} r={fm.r}: poly {row['poly_s']} "
                      f"speedup {row.get('speedup')}", flush=True)
    summary = summarize(rows)
    return rows, summary


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
    fig, axes = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
    for ax, d in zip(axes, (8, 16)):
        rs = [r for r in data["wallclock"] if r["d"] == d]
        ns = sorted({r["n"] for r in rs})
        s = {r["n"]: r for r in rs}
        meas = [n for n in ns if not s[n]["sdpa_extrapolated"]]
        ext = [n for n in ns if s[n]["sdpa_extrapolated"]]
        ax.loglog(meas, [s[n]["sdpa_s"] for n in meas], "-k", marker="o", label="SDPA (measured)")
        if ext:
            ax.loglog([meas[-1]] + ext, [s[meas[-1]]["sdpa_s"]] + [s[n]["sdpa_s"] for n in ext], ":k",
                      label="SDPA (extrapolated n^2)")
        for R, c in ((0.5, "C0"), (1.0, "C1"), (2.0, "C2")):
            rr = [r for r in rs if r["R"] == R and r["poly_s"] is not None]
            if rr:
                ax.loglog([r["n"] for r in rr], [r["poly_s"] for r in rr], "-", color=c, marker="x",
                          label=f"poly, R={R} (r={rr[0]['r']:,})")
        ax.set_title(f"d = {d}, float32 CPU, eps = 1e-3"), ax.set_xlabel("n")
        ax.legend(fontsize=7)
    axes[0].set_ylabel("seconds")
    fig.tight_layout(), fig.savefig(img / "approx_wallclock.png", dpi=120)
    plt.close(fig)


def summarize(rows):
    summary = []
    for d in (8, 16):
        for R in (0.5, 1.0, 2.0):
            rs = [r for r in rows if r["d"] == d and r["R"] == R]
            cross = next((r for r in rs if r["poly_s"] is not None and r["poly_s"] < r["sdpa_s"]),
                         None)
            last = rs[-1]
            summary.append({"d": d, "R": R, "r": rs[0]["r"], "degree": rs[0]["degree"],
                            "crossover_n": cross and cross["n"],
                            "crossover_uses_extrapolated_sdpa": bool(cross and cross["sdpa_extrapolated"]),
                            "speedup_at_65536": last.get("speedup"),
                            "speedup_at_65536_sdpa_extrapolated": last["sdpa_extrapolated"]})
    return summary


def remeasure(torch, args, ns):
    """SDPA for d = 8 at large n on the same inputs as the wall-clock run (same generator)."""
    out = ROOT / "benchmarks" / "results" / "approx.json"
    data = json.loads(out.read_text())
    g = torch.Generator().manual_seed(0)
    allns = [2**k for k in range(10, 17)]
    base = {n: ((torch.rand(1, n, 8, generator=g) * 2 - 1), (torch.rand(1, n, 8, generator=g) * 2 - 1),
                torch.randn(1, n, 8, generator=g)) for n in allns}
    sdpa = torch.nn.functional.scaled_dot_product_attention
    sdpa(*base[1024])
    for n in ns:
        q, k, v = base[n]
        t = _timed(lambda: sdpa(q, k, v))
        print(f"d=8 n={n}: sdpa measured {t:.1f} s", flush=True)
        for r in data["wallclock"]:
            if r["d"] == 8 and r["n"] == n:
                r["sdpa_s"], r["sdpa_extrapolated"] = t, False
                if r.get("poly_s"):
                    r["speedup"] = t / r["poly_s"]
    data["summary"] = summarize(data["wallclock"])
    data["machine"]["remeasured_sdpa_d8"] = ns
    out.write_text(json.dumps(data, indent=1))
    plots(data)
    for s in data["summary"]:
        print(s)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--max-sdpa-n", type=int, default=16384)
    ap.add_argument("--budget", type=float, default=30.0)
    ap.add_argument("--skip-wallclock", action="store_true")
    ap.add_argument("--measure-sdpa-d8", default=None, metavar="N1,N2",
                    help="only: measure SDPA for d=8 at these n (replacing the extrapolated "
                         "values in results/approx.json) and redo the summary and plots")
    args = ap.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    if args.measure_sdpa_d8:
        return remeasure(torch, args, [int(x) for x in args.measure_sdpa_d8.split(",")])
    t0 = time.perf_counter()
    data = {"machine": {"platform": platform.platform(), "torch": torch.__version__,
                        "threads": args.threads, "max_sdpa_n": args.max_sdpa_n,
                        "budget_s": args.budget},
            "io_vs_n": io_vs_n(), "error_vs_degree": error_vs_degree()}
    data["favor_vs_poly"] = favor_vs_poly(torch)
    if not args.skip_wallclock:
        data["wallclock"], data["summary"] = wallclock(torch, args)
    data["elapsed_s"] = time.perf_counter() - t0
    out = ROOT / "benchmarks" / "results" / "approx.json"
    out.write_text(json.dumps(data, indent=1))
    if "wallclock" in data:
        plots(data)
        for s in data["summary"]:
            print(s)
    print(f"wrote {out} in {data['elapsed_s']:.0f} s")


if __name__ == "__main__":
    main()
