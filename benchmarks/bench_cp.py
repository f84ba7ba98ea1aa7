"""Context parallelism: ``cp plan`` latency and closed-form counts at N = 10^9, P = 1024.

Run:  python benchmarks/bench_cp.py  [--out benchmarks/results/cp.json]
      [--figure docs/img/cp_words_vs_P.png]

Targets (issue 34): ``attnio.parallel.planner.plan`` <= 10 ms; every scheme's count (its best
candidate) at N = 10^9 (rounded to a multiple of 2P), P = 1024 in milliseconds (closed forms:
O(P) each), forward and backward, with its footprint; the bounds with a local memory.  CPU time (time.process_time), best of ``--repeat`` after one warm call, and cold
(every lru_cache of attnio cleared first).  Also the figure's data: words per device of every
scheme's best candidate and the bound for P = 1 .. 1024 at N = 2^20, d = 128, H = 32 and
H = 1, with the log-log slopes of the last octaves (the grid's about -1/2).
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import time

from _cold import clear_attnio_caches

import attnio.parallel as cp
from attnio.core.workload import Shape
from attnio.parallel import backward, bounds
from attnio.parallel.planner import plan


def best_of(fn, repeat):
    fn()
    ts = []
    for _ in range(repeat):
        t = time.process_time()
        fn()
        ts.append(time.process_time() - t)
    return min(ts)


def cold(fn, repeat=3):
    ts = []
    for _ in range(repeat):
        clear_attnio_caches()
        t = time.process_time()
        fn()
        ts.append(time.process_time() - t)
    return min(ts)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--out", default=None)
    ap.add_argument("--figure", default=None, help="write the words-per-device figure (PNG)")
    ap.add_argument("--grid", action="store_true",
                    help="also the certificate grid: the planner's ratio to the bound over N, "
                         "d, heads/kv_heads, P and the mask (a markdown table)")
    a = ap.parse_args()
    P = 1024
    N = 10**9 // (2 * P) * (2 * P)
    out: dict = {"python": platform.python_version(), "N": N, "P": P, "plan_ms": {},
                 "count_ms": {}, "figure": {}}
    for label, kw in (("H32 kv8 causal", dict(heads=32, kv_heads=8, causal=True)),
                      ("H32", dict(heads=32)), ("H1", dict(heads=1))):
        s = Shape(N, N, 128, **kw)
        warm = best_of(lambda s=s: plan(s, P), a.repeat)
        c = cold(lambda s=s: plan(s, P))
        out["plan_ms"][label] = {"warm": 1e3 * warm, "cold": 1e3 * c}
        print(f"cp plan N={N} P={P} {label}: {1e3 * warm:.2f} ms warm, {1e3 * c:.2f} ms cold "
              f"(target <= 10 ms)")
    s = Shape(N, N, 128, heads=32, kv_heads=8, causal=True)
    for name in cp.names():
        ms = cp.mapspace(name, s, P)
        if not ms.supported:
            continue
        params = plan(s, P, name).params
        t = best_of(lambda n=name, p=params: cp.cost(n, s, P, p, work=True), 5)
        out["count_ms"][name] = 1e3 * t
        print(f"count {name} {params}: {1e3 * t:.2f} ms (with the work of all {P} processors)")
        tb = best_of(lambda n=name, p=params: backward.cost_backward(n, s, P, p).words, 5)
        tf = best_of(lambda n=name, p=params: cp.footprint(n, s, P, p, backward=True), 5)
        out.setdefault("backward_ms", {})[name] = 1e3 * tb
        out.setdefault("footprint_ms", {})[name] = 1e3 * tf
        print(f"  backward count {1e3 * tb:.2f} ms (every processor's words), footprint "
              f"{1e3 * tf:.2f} ms")
    L = 4 * bounds.initial_words(s, P)
    for bw in (False, True):
        t = best_of(lambda bw=bw: cp.bound(s, P, memory=L, backward=bw), 5)
        out.setdefault("bound_ms", {})["backward" if bw else "forward"] = 1e3 * t
        print(f"bound{' backward' if bw else ''} with a local memory of {L:,} words: "
              f"{1e3 * t:.2f} ms")
    for heads in (32, 1):
        sh = Shape(1 << 20, 1 << 20, 128, heads=heads)
        rows = {}
        for k in range(11):
            p = 1 << k
            row = {"bound": cp.bound(sh, p).value}
            for name in cp.names():
                if cp.mapspace(name, sh, p).supported:
                    row[name] = plan(sh, p, name).words_per_device
            rows[p] = row
        slopes = {}
        for key in ("bound", *cp.names()):
            pts = [(p, r[key]) for p, r in rows.items() if key in r and r[key] > 0 and p >= 64]
            if len(pts) >= 2:
                (p0, w0), (p1, w1) = pts[0], pts[-1]
                slopes[key] = math.log(w1 / w0) / math.log(p1 / p0)
        out["figure"][f"H{heads}"] = {"rows": rows, "slopes_P64_1024": slopes}
        print(f"H={heads}: log-log slopes over P = 64..1024: "
              + ", ".join(f"{k} {v:+.2f}" for k, v in slopes.items()))
    if a.out:
        with open(a.out, "w") as f:
            json.dump(out, f, indent=1)
    if a.figure:
        figure(out["figure"], a.figure)
    if a.grid:
        out["grid"] = certificate_grid()
        if a.out:
            with open(a.out, "w") as f:
                json.dump(out, f, indent=1)


def certificate_grid() -> list[dict]:
    """The planner's ratio words per device / bound over N in {2^14, 2^17, 2^20}, d in {64, 128},
    (heads, kv_heads) in {(1, 1), (8, 8), (32, 8), (32, 32)}, P in {4, 16, 64, 256}, unmasked
    and causal; printed as a table of the largest ratio over N and d."""
    rows = []
    heads_kv = [(1, 1), (8, 8), (32, 8), (32, 32)]
    for causal in (False, True):
        for P in (4, 16, 64, 256):
            cells = []
            for h, kv in heads_kv:
                worst, picks = 0.0, set()
                for N in (1 << 14, 1 << 17, 1 << 20):
                    for d in (64, 128):
                        p = plan(Shape(N, N, d, heads=h, kv_heads=kv, causal=causal), P)
                        worst = max(worst, p.ratio or 0.0)
                        picks.add(p.scheme)
                        rows.append({"N": N, "d": d, "heads": h, "kv_heads": kv, "P": P,
                                     "causal": causal, "scheme": p.scheme, "params": p.params,
                                     "words": p.words_per_device, "bound": p.bound,
                                     "ratio": p.ratio})
                cells.append(f"{worst:.2f} ({', '.join(sorted(picks))})")
            print(f"| {'causal' if causal else 'none'} | {P} | " + " | ".join(cells) + " |")
    return rows


def figure(data: dict, path: str) -> None:
    """Words per device against P, every scheme's best candidate and the bound, log-log."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True)
    for ax, (label, fig_data) in zip(axes, data.items()):
        rows = fig_data["rows"]
        Ps = sorted(rows)
        for key in ("ring", "zigzag", "ulysses", "usp", "grid", "bound"):
            pts = [(p, rows[p][key]) for p in Ps if key in rows[p] and rows[p][key] > 0]
            if not pts:
                continue
            slope = fig_data["slopes_P64_1024"].get(key)
            name = f"{key} (slope {slope:+.2f})" if slope is not None else key
            ax.loglog(*zip(*pts), "k--" if key == "bound" else "-o", ms=3, label=name,
                      base=2)
        ax.set_title(f"N = 2^20, d = 128, {label.replace('H', 'heads = ')}")
        ax.set_xlabel("P (devices)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    axes[0].set_ylabel("words per device (sent + received, busiest)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    main()
