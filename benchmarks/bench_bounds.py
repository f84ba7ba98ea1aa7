"""The certificate, measured: the planner's best schedule over the best explicit lower bound.

Grid (issue 17): N in 2^8..2^16, d in {32, 64, 128, 256}, M every power of two in [4d, N·d],
unmasked attention, one head (396 configurations).  For each: ``attnio.plan(N, d, M)`` (the least
predicted I/O over every registered exact algorithm and tiling), the best explicit bound of
``attnio.bounds.applicable`` (what the plan's certificate prints), and their ratio, kept exact
(``fractions.Fraction``) so the maximum is not rounded.  Regimes: A: M < d²/4, B: d²/4 <= M < 4d²,
C: 4d² <= M < Nd/4, D: M >= Nd/4.  Also, for information: the same ratio with the first-generation
bounds only, the backward ratio (the planner's backward schedule over the best explicit backward
bound, ``attnio.bounds.backward_applicable_to``; points where no backward schedule fits are
skipped), and the cold time of ``applicable_to`` (every attnio cache cleared; the parameter table,
read once per process, is timed apart).

Run:  python benchmarks/bench_bounds.py [--out benchmarks/results/bounds.json] [--write]
  --write  regenerate the tables of docs/bounds.md (between the bench_bounds markers)
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import platform
import statistics
import time
from fractions import Fraction

from _cold import clear_attnio_caches
from _docs import rewrite_block

import attnio
from attnio import bounds as B
from attnio.bounds import levelled, params
from attnio.core.workload import Shape

ROOT = pathlib.Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "bounds.md"
START, END = "<!-- BEGIN bench_bounds -->", "<!-- END bench_bounds -->"
OLD = ("trivial", "standard_matmul_large_cache", "standard_matmul_small_cache")
REGIMES = ("A: M < d²/4", "B: d²/4 <= M < 4d²", "C: 4d² <= M < Nd/4", "D: M >= Nd/4")


def regime(N: int, d: int, M: int) -> str:
    if 4 * M < d * d:
        return REGIMES[0]
    if M < 4 * d * d:
        return REGIMES[1]
    if 4 * M < N * d:
        return REGIMES[2]
    return REGIMES[3]


def grid():
    for e in range(8, 17):
        N = 2 ** e
        for d in (32, 64, 128, 256):
            M = 4 * d
            while M <= N * d:
                yield N, d, M
                M *= 2


def clear_caches() -> None:
    """Clear every attnio result cache; the bounds' parameter tables (params.json, levelled.json,
    read from their packed copies once per process, like an import) stay loaded:
    :func:`params_load_ms` times reading it."""
    clear_attnio_caches(keep=(params._load, levelled._load, levelled._packed, levelled.nodes,
                              levelled._xs))


def params_load_ms(repeat: int) -> float:
    """Reading and parsing the parameter table (once per process, on the first bound): median ms."""
    ts = []
    for _ in range(repeat):
        params._load.cache_clear()
        t0 = time.perf_counter()
        params.table("A")
        ts.append(time.perf_counter() - t0)
    ms = statistics.median(ts) * 1e3
    print(f"reading the bounds' parameter table (once per process): {ms:.2f} ms")
    return ms


def point(N: int, d: int, M: int, backward: bool) -> dict:
    p = attnio.plan(N, d, M)
    bs = [b for b in B.applicable(N=N, d=d, M=M) if b.explicit]
    best = max(bs, key=lambda b: b.value)
    old = max((b for b in bs if b.name in OLD), key=lambda b: b.value)
    total = p.chosen.predicted.total
    row = {"N": N, "d": d, "M": M, "regime": regime(N, d, M), "algorithm": p.chosen.algorithm,
           "tiling": str(p.chosen.tiling), "total": total, "bound": int(best.value),
           "bound_name": best.name, "old_bound": int(old.value), "old_bound_name": old.name,
           "ratio": [total, int(best.value)], "old_ratio": [total, int(old.value)]}
    assert p.certificate.best_bound.value == best.value, (N, d, M, p.certificate.best_bound, best)
    if backward:
        try:
            pb = attnio.plan(N, d, M, backward=True)
        except attnio.ParameterError:
            pb = None
        if pb is not None and pb.backward is not None:
            bb = [b for b in B.backward_applicable_to(Shape(N, N, d), M) if b.explicit]
            bbest = max(bb, key=lambda b: b.value)
            row.update(backward_total=pb.backward.predicted.total, backward_bound=int(bbest.value),
                       backward_bound_name=bbest.name,
                       backward_algorithm=getattr(pb.backward, "algorithm", "flash2"))
    return row


def timing(repeat: int) -> dict:
    """Cold ``applicable_to`` (every cache cleared) at a few shapes: median ms."""
    cases = [("N=2^20 d=64 M=65536", Shape(2**20, 2**20, 64), 65536),
             ("N=2^20 d=64 M=4096", Shape(2**20, 2**20, 64), 4096),
             ("N=2^20 d=64 M=512", Shape(2**20, 2**20, 64), 512),
             ("causal N=1e9 d=128 M=65536", Shape.make(10**9, 128, causal=True), 65536),
             ("N=4096 d=256 M=1024", Shape(4096, 4096, 256), 1024)]
    out = {}
    for label, shape, M in cases:
        ts = []
        for _ in range(repeat):
            clear_caches()
            t0 = time.perf_counter()
            B.applicable_to(shape, M)
            B.backward_applicable_to(shape, M)
            ts.append(time.perf_counter() - t0)
        out[label] = statistics.median(ts) * 1e3
        print(f"cold applicable_to + backward_applicable_to, {label:28s}: {out[label]:.2f} ms")
    return out


def summarise(rows: list[dict], key: str, alg: str = "algorithm") -> dict:
    out = {}
    for g in (*REGIMES, "all"):
        rr = [r for r in rows if (g == "all" or r["regime"] == g) and key in r]
        if not rr:
            continue
        ratios = [Fraction(*r[key]) for r in rr]
        worst = max(zip(ratios, rr), key=lambda t: t[0])
        out[g] = {"n": len(rr), "median": float(statistics.median(ratios)),
                  "max": float(worst[0]), "max_exact": f"{worst[0].numerator}/{worst[0].denominator}",
                  "min": float(min(ratios)),
                  "worst": {"N": worst[1]["N"], "d": worst[1]["d"], "M": worst[1]["M"],
                            "algorithm": worst[1][alg]}}
    return out


def table(summary: dict, what: str) -> str:
    lines = [f"| regime | points | median {what} | max {what} | worst point (N, d, M, schedule) |",
             "|---|---:|---:|---:|---|"]
    for g, s in summary.items():
        w = s["worst"]
        lines.append(f"| {g} | {s['n']} | {s['median']:.3f} | {s['max']:.4f} | "
                     f"{w['N']}, {w['d']}, {w['M']}, {w['algorithm']} |")
    return "\n".join(lines)


def winners(rows: list[dict]) -> str:
    counts: dict[str, dict[str, int]] = {}
    for r in rows:
        counts.setdefault(r["regime"], {}).setdefault(r["bound_name"], 0)
        counts[r["regime"]][r["bound_name"]] += 1
    return "; ".join(f"{g}: " + ", ".join(f"{k} {v}" for k, v in sorted(c.items()))
                     for g, c in sorted(counts.items()))


def report(rows: list[dict], res: dict) -> str:
    s, old = res["summary"], res["summary_old"]
    back = res["summary_backward"]
    out = [
        "Forward, ratio = the planner's predicted total / the best explicit bound (the certificate "
        f"`attnio plan` prints), {len(rows)} configurations:",
        "",
        table(s, "ratio"),
        "",
        f"Exact maximum: {s['all']['max_exact']} = {s['all']['max']:.6f}.  Bound that wins, by "
        f"regime: {winners(rows)}.",
        "",
        "The same with the first-generation bounds only (trivial, `standard_matmul_large_cache`, "
        "`standard_matmul_small_cache`):",
        "",
        table(old, "ratio"),
        "",
    ]
    if back:
        out += [
            "Backward (information): the planner's backward schedule / the best explicit backward "
            "bound (`backward_trivial`, Theorems D, E), where a backward schedule fits "
            f"({back['all']['n']} points):",
            "",
            table(back, "ratio"),
            "",
        ]
    out += [
        "Cold `applicable_to` + `backward_applicable_to` (every attnio cache cleared, median of "
        f"{res['timing_repeat']}): " + ", ".join(f"{k}: {v:.2f} ms" for k, v in
                                                 res["timing_ms"].items()) + ".",
    ]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "bounds.json"))
    ap.add_argument("--write", action="store_true")
    ap.add_argument("--no-backward", action="store_true")
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args(argv)
    t0 = time.time()
    rows = [point(N, d, M, not args.no_backward) for N, d, M in grid()]
    for r in rows:
        if "backward_total" in r:
            r["backward_ratio"] = [r["backward_total"], r["backward_bound"]]
    res = {"machine": platform.platform(), "python": platform.python_version(),
           "seconds": time.time() - t0, "summary": summarise(rows, "ratio"),
           "summary_old": summarise(rows, "old_ratio"),
           "summary_backward": summarise(rows, "backward_ratio", "backward_algorithm"),
           "timing_repeat": args.repeat, "timing_ms": timing(args.repeat),
           "params_load_ms": params_load_ms(args.repeat), "rows": rows}
    text = report(rows, res)
    print(text)
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(res, f, indent=1)
    print("wrote", args.out)
    if args.write:
        rewrite_block(DOC, START, END, text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
