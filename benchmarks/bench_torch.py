"""poly_attention against scaled_dot_product_attention's fused CPU kernel, and the error/time
trade-off of poly_attention, Based and FAVOR+.

    python benchmarks/bench_torch.py --quick          # d=8, R=1: the issue-23 targets (~5 min)
    python benchmarks/bench_torch.py --full           # d in {8,16,32}, R in {0.5,1,2}, 2^10..2^17
    python benchmarks/bench_torch.py --tradeoff       # error vs time plot (docs/img)
    python benchmarks/bench_torch.py --guard          # the cost guard on issue 23's R = 4.17 case
    python benchmarks/bench_torch.py --threads-check  # 1 and 2 threads at n = 65,536, d = 8
    python benchmarks/bench_torch.py --cost-grid      # the cost model's decision against measured

Speed (``speed``): SDPA is called in the layout modules use, 4-D ``(B, H, L, E) = (1, 1, n, d)``,
which takes its fused CPU kernel; the backend SDPA selects is recorded for every shape
(``torch._fused_sdp_choice``: 1 = flash, the fused kernel; 0 = math, the unfused fallback that 3-D
inputs take).  float32; Q, K uniform in [-B, B] with ``B = sqrt(R / sqrt(d))`` (scores in
[-R, R] at scale 1/sqrt(d)), passed as ``entry_bound=B``, ``eps = 1e-3``; V standard normal.
Each (threads, d, n, causal, pass) times SDPA and poly_attention back to back in this process,
after a warm-up on the same shape for n <= 2^14 and on n = 2^12 above (min of ``--reps``
repetitions, one above ``--rep-limit`` seconds); the ratio SDPA / poly is the speed-up.
"fwdbwd" times forward plus ``backward`` of ``(out * G).sum()`` for a fixed random G.  A poly case
whose plan (``poly_plan``) predicts more than ``--budget`` seconds is not run and recorded as such;
SDPA is not run where 4.2 times its time at n/2 exceeds ``--sdpa-budget`` seconds.

Error: ``max |O - O_exact|`` with O_exact in float64 (SDPA, same inputs) over all rows for
n <= 2^14 and over 512 sampled rows (the first, the last and random ones) above, against the
guarantee ``eps/(1-eps) * (max - min of V's column)``; at the target shape the float32 gradient's
relative error against float64 poly_attention.

Writes benchmarks/results/torch_speed.json and docs/img/approx_wallclock.png (--quick),
torch_speed_full.json (--full), torch_tradeoff.json and docs/img/approx_tradeoff.png (--tradeoff).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"


def _inputs(torch, n, d, R, seed=0, dtype=None):
    g = torch.Generator().manual_seed(seed)
    B = math.sqrt(R / math.sqrt(d))
    q = (torch.rand(1, 1, n, d, generator=g) * 2 - 1) * B
    k = (torch.rand(1, 1, n, d, generator=g) * 2 - 1) * B
    v = torch.randn(1, 1, n, d, generator=g)
    return q, k, v, B


def _time(torch, fn, reps, rep_limit):
    return _time2(torch, fn, reps, rep_limit)[0]


def _time2(torch, fn, reps, rep_limit):
    """(min wall seconds, CPU seconds of that repetition: all threads of the process)."""
    best, cpu = math.inf, math.inf
    for _ in range(reps):
        t, c = time.perf_counter(), time.process_time()
        fn()
        w = time.perf_counter() - t
        if w < best:
            best, cpu = w, time.process_time() - c
        if best > rep_limit:
            break
    return best, cpu


def _fwdbwd(torch, f, q, k, v, G):
    def run():
        xs = [x.detach().requires_grad_(True) for x in (q, k, v)]
        (f(*xs) * G).sum().backward()
    return run


def _rows(n, causal, torch, sample=512):
    if n <= 16384:
        return None
    g = torch.Generator().manual_seed(1)
    idx = torch.randperm(n, generator=g)[: sample - 2]
    return torch.unique(torch.cat([torch.tensor([0, n - 1]), idx]))


def error_check(torch, o, q, k, v, causal, eps):
    """(max error, guarantee, rows checked) against float64 SDPA."""
    n = q.shape[-2]
    rows = _rows(n, causal, torch)
    qd, kd, vd = q.double(), k.double(), v.double()
    sd = torch.nn.functional.scaled_dot_product_attention
    if rows is None:
        ref = sd(qd, kd, vd, is_causal=causal)
        err = float((o.double() - ref).abs().max())
        checked = "all"
    else:
        mask = None
        if causal:
            mask = torch.arange(n)[None, :] <= rows[:, None]
        ref = sd(qd[..., rows, :], kd, vd, attn_mask=mask)
        err = float((o[..., rows, :].double() - ref).abs().max())
        checked = int(rows.numel())
    guarantee = eps / (1 - eps) * float((v.amax(-2) - v.amin(-2)).min())
    return err, guarantee, checked


def speed(torch, args):
    from attnio.torch_ops import poly_attention, poly_plan

    sd = torch.nn.functional.scaled_dot_product_attention
    rows = []
    eps = 1e-3
    for threads in args.threads:
        torch.set_num_threads(threads)
        for d in args.d:
            sdpa_prev: dict = {}
            for n in args.n:
                for causal in (False, True):
                    for mode in args.modes:
                        q0, k0, v0, _ = _inputs(torch, n, d, 1.0)
                        G = torch.randn(q0.shape[:-1] + (d,), generator=torch.Generator().manual_seed(2))
                        key = (causal, mode)
                        pred = sdpa_prev.get(key, 0.0) * 4.2

                        def sd_f(a, b, c, cz=causal):
                            return sd(a, b, c, is_causal=cz)
                        run = (lambda: sd_f(q0, k0, v0)) if mode == "fwd" else _fwdbwd(torch, sd_f, q0, k0, v0, G)
                        tsc = None
                        if pred > args.sdpa_budget:
                            ts = None
                        else:
                            _warm(torch, sd_f, n, d, mode, causal)
                            ts, tsc = _time2(torch, run, args.reps, args.rep_limit)
                            sdpa_prev[key] = ts
                        backend = int(torch._fused_sdp_choice(q0, k0, v0, is_causal=causal))
                        for R in args.R:
                            row = _poly_case(torch, poly_attention, poly_plan, args, threads, d, n, R,
                                             causal, mode, eps, ts, backend, G)
                            row["sdpa_cpu_s"] = tsc
                            rows.append(row)
                            print(json.dumps(row), flush=True)
    return rows


def _warm(torch, f, n, d, mode, causal):
    m = n if n <= 16384 else 4096
    q, k, v, _ = _inputs(torch, m, d, 1.0, seed=5)
    if mode == "fwd":
        f(q, k, v)
    else:
        _fwdbwd(torch, f, q, k, v, torch.ones(q.shape[:-1] + (d,)))()


def _poly_case(torch, poly_attention, poly_plan, args, threads, d, n, R, causal, mode, eps, ts,
               backend, G):
    q, k, v, B = _inputs(torch, n, d, R)
    plan = poly_plan(q, k, v, eps=eps, entry_bound=B, is_causal=causal)
    row = {"threads": threads, "d": d, "n": n, "R": R, "causal": causal, "pass": mode,
           "entry_bound": B, "degree": plan.degree, "r": plan.r, "sdpa_backend": backend,
           "sdpa_s": ts, "poly_predicted_s": plan.predicted_s,
           "sdpa_predicted_s": plan.sdpa_predicted_s}
    factor = 3.0 if mode == "fwdbwd" else 1.0
    if plan.predicted_s * factor > args.budget:
        row["poly_s"] = None
        row["skipped"] = f"predicted {plan.predicted_s * factor:.3g} s > budget {args.budget:g} s"
        return row
    if ts is not None and plan.predicted_s * factor > max(1.0, args.max_loss * ts):
        row["poly_s"] = None  # a sure loss: it cannot move the crossover
        row["skipped"] = (f"predicted {plan.predicted_s * factor:.3g} s > {args.max_loss:g}x "
                          f"SDPA's measured {ts:.3g} s")
        return row
    def f(a, b, c):
        return poly_attention(a, b, c, eps=eps, entry_bound=B, is_causal=causal, on_slow="warn")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _warm_poly(torch, f, q, k, v, n, mode)
        run = (lambda: f(q, k, v)) if mode == "fwd" else _fwdbwd(torch, f, q, k, v, G)
        tp, row["poly_cpu_s"] = _time2(torch, run, args.reps, args.rep_limit)
        row["poly_s"] = tp
        row["speedup"] = None if ts is None else ts / tp
        if mode == "fwd" and (n <= args.err_max_n):
            o = f(q, k, v)
            row["max_err"], row["guarantee"], row["rows_checked"] = error_check(
                torch, o, q, k, v, causal, eps)
            row["within_guarantee"] = row["max_err"] <= row["guarantee"]
    return row


def _warm_poly(torch, f, q, k, v, n, mode):
    m = min(n, 4096)
    qs, ks, vs = q[..., :m, :], k[..., :m, :], v[..., :m, :]
    if mode == "fwd":
        f(qs, ks, vs)
    else:
        _fwdbwd(torch, f, qs, ks, vs, torch.ones(qs.shape[:-1] + (vs.shape[-1],)))()


def grad_error(torch, n=16384, d=8, R=1.0, eps=1e-3):
    """Relative error of the float32 causal gradient against float64 poly_attention."""
    from attnio.torch_ops import poly_attention

    q, k, v, B = _inputs(torch, n, d, R)
    G = torch.randn(q.shape[:-1] + (d,), generator=torch.Generator().manual_seed(2))
    out = {}
    for dt in (torch.float32, torch.float64):
        xs = [x.detach().to(dt).requires_grad_(True) for x in (q, k, v)]
        (poly_attention(*xs, eps=eps, entry_bound=B, is_causal=True) * G.to(dt)).sum().backward()
        out[dt] = [x.grad.double() for x in xs]
    rel = [float((a - b).abs().max() / b.abs().max()) for a, b in zip(out[torch.float32], out[torch.float64])]
    return {"n": n, "d": d, "R": R, "causal": True, "rel_err_dq_dk_dv": rel}


def summarize(rows):
    """Crossover n (the least measured n from which poly stays faster) and the speed-up at the
    largest n where both ran, per (threads, d, R, causal, pass)."""
    out = []
    keys = sorted({(r["threads"], r["d"], r["R"], r["causal"], r["pass"]) for r in rows})
    for key in keys:
        rs = sorted((r for r in rows if (r["threads"], r["d"], r["R"], r["causal"], r["pass"]) == key),
                    key=lambda r: r["n"])
        both = [r for r in rs if r.get("speedup") is not None]
        cross = None
        for i, r in enumerate(both):
            if all(x["speedup"] > 1 for x in both[i:]):
                cross = r["n"]
                break
        last = both[-1] if both else None
        out.append({"threads": key[0], "d": key[1], "R": key[2], "causal": key[3], "pass": key[4],
                    "r": rs[0]["r"], "degree": rs[0]["degree"], "crossover_n": cross,
                    "largest_n": last and last["n"], "speedup_at_largest_n": last and last["speedup"],
                    "all_within_guarantee": all(r.get("within_guarantee", True) for r in rs)})
    return out


def tradeoff(torch, args):
    """Max error against time at equal n for poly (eps sweep), Based and FAVOR+ (features sweep)."""
    from attnio.torch_ops import based_attention, favor_attention, poly_attention, poly_plan

    torch.set_num_threads(1)
    n = args.tradeoff_n
    out = []
    sd = torch.nn.functional.scaled_dot_product_attention
    for d in (8, 16):
        for R in (0.5, 1.0, 2.0):
            q, k, v, B = _inputs(torch, n, d, R, seed=3)
            ref = sd(q.double(), k.double(), v.double())
            ts = _time(torch, lambda: sd(q, k, v), 3, 1.0)
            cases = [("poly", {"eps": e}) for e in (1e-1, 1e-2, 1e-3, 1e-4, 1e-6)]
            cases += [("based", {})]
            cases += [("favor", {"features": m}) for m in (d, 4 * d, 16 * d, 64 * d, 256 * d)]
            for name, kw in cases:
                if name == "poly":
                    try:
                        pl = poly_plan(q, k, v, entry_bound=B, **kw)
                    except Exception as e:  # noqa: BLE001 - recorded: no degree reaches eps
                        out.append({"d": d, "R": R, "n": n, "method": name, **kw, "skipped": str(e)})
                        continue
                    if pl.predicted_s > args.budget / 4:
                        out.append({"d": d, "R": R, "n": n, "method": name, **kw, "r": pl.r,
                                    "skipped": f"predicted {pl.predicted_s:.3g} s"})
                        continue
                    def f(kw=kw):
                        return poly_attention(q, k, v, entry_bound=B, on_slow="warn", **kw)
                elif name == "based":
                    def f():
                        return based_attention(q, k, v)
                else:
                    def f(kw=kw):
                        return favor_attention(q, k, v, seed=0, **kw)
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    f()
                    t = _time(torch, f, 3, 1.0)
                    o = f()
                row = {"d": d, "R": R, "n": n, "method": name, **kw, "time_s": t, "sdpa_s": ts,
                       "max_err": float((o.double() - ref).abs().max())}
                if name == "poly":
                    row["guarantee"] = kw["eps"] / (1 - kw["eps"]) * float((v.amax(-2) - v.amin(-2)).min())
                print(json.dumps(row), flush=True)
                out.append(row)
    return out


def plot_tradeoff(rows, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 3, figsize=(13, 7.5), sharey=True)
    for i, d in enumerate((8, 16)):
        for j, R in enumerate((0.5, 1.0, 2.0)):
            ax = axes[i][j]
            rs = [r for r in rows if r["d"] == d and r["R"] == R and "skipped" not in r]
            for name, style in (("poly", "-o"), ("based", "s"), ("favor", "--^")):
                m = sorted((r for r in rs if r["method"] == name),  # along the knob
                           key=lambda r: (-r.get("eps", 0), r.get("features", 0)))
                if m:
                    ax.loglog([r["time_s"] for r in m], [r["max_err"] for r in m], style,
                              label={"poly": "poly (eps 1e-1..1e-6)", "based": "Based (Taylor-2)",
                                     "favor": "FAVOR+ (m = d..256d)"}[name])
            pg = sorted((r for r in rs if r["method"] == "poly"), key=lambda r: -r["eps"])
            ax.loglog([r["time_s"] for r in pg], [r["guarantee"] for r in pg], ":", color="C0",
                      alpha=0.6, label="poly guarantee")
            ax.axvline(rs[0]["sdpa_s"], color="k", lw=0.8, label="exact SDPA (fused)")
            ax.set_title(f"d = {d}, R = {R}, n = {rs[0]['n']:,}", fontsize=9)
            if i == 1:
                ax.set_xlabel("seconds (1 thread, float32)")
            if j == 0:
                ax.set_ylabel("max |O - O_exact|")
            ax.legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def guard_case(torch):
    """Issue 23's silent explosion: a module's data, no entry_bound, R = 4.17 at E = 8, L = 512
    (degree 12, r = 125,970 features): the time to refuse, to fall back, and to compute anyway."""
    from attnio.core.errors import ParameterError
    from attnio.torch_ops import SlowApproximationWarning, poly_attention, poly_plan

    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(0)
    norm = (4.17 * 8 ** 0.5) ** 0.5
    q, k = (torch.randn(1, 8, 512, 8, generator=g) for _ in range(2))
    q, k = (x / x.norm(dim=-1, keepdim=True) * norm for x in (q, k))
    v = torch.randn(1, 8, 512, 8, generator=g)
    plan = poly_plan(q, k, v)
    row = {"L": 512, "E": 8, "heads": 8, "R": plan.R, "degree": plan.degree, "r": plan.r,
           "slow": plan.slow, "reason": plan.reason, "predicted_s": plan.predicted_s,
           "sdpa_predicted_s": plan.sdpa_predicted_s}
    t = time.perf_counter()
    try:
        poly_attention(q, k, v, on_slow="error")
    except ParameterError as e:
        row["refused_in_s"], row["refusal"] = time.perf_counter() - t, str(e)
    row["exact_fallback_s"] = _time(torch, lambda: poly_attention(q, k, v, on_slow="exact"), 3, 1)
    row["sdpa_s"] = _time(torch, lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v), 3, 1)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        t = time.perf_counter()
        poly_attention(q, k, v, on_slow="warn")
        row["computed_anyway_s"] = time.perf_counter() - t
        row["warned"] = any(issubclass(x.category, SlowApproximationWarning) for x in w)
    print(json.dumps(row), flush=True)
    return row


def threads_check(torch, args):
    """poly_attention and SDPA at n = 65,536, d = 8, R = 1 with 1 and 2 threads, in one process,
    interleaved (1, 2, 1, 2, ...) so that a change of the machine's load hits both: wall and
    CPU seconds (all threads) of each, fwd and fwd+bwd, causal and not."""
    from attnio.torch_ops import poly_attention

    n, d = args.threads_n, 8
    q, k, v, B = _inputs(torch, n, d, 1.0)
    G = torch.randn(q.shape[:-1] + (d,), generator=torch.Generator().manual_seed(2))
    sd = torch.nn.functional.scaled_dot_product_attention
    rows = []
    for mode in ("fwd", "fwdbwd"):
        for causal in (False, True):
            def pf(a, b, c, cz=causal):
                return poly_attention(a, b, c, entry_bound=B, is_causal=cz, on_slow="warn")

            def sf(a, b, c, cz=causal):
                return sd(a, b, c, is_causal=cz)

            for name, f in (("poly", pf), ("sdpa", sf)):
                if name == "sdpa" and not args.threads_sdpa:
                    continue
                run = (lambda f=f: f(q, k, v)) if mode == "fwd" else _fwdbwd(torch, f, q, k, v, G)
                times: dict = {1: [], 2: []}
                for _ in range(args.reps):
                    for th in (1, 2):
                        torch.set_num_threads(th)
                        run()  # warm at this thread count
                        times[th].append(_time2(torch, run, 1, math.inf))
                row = {"method": name, "pass": mode, "causal": causal, "n": n, "d": d}
                for th in (1, 2):
                    w, c = min(times[th])
                    row[f"wall_{th}t"], row[f"cpu_{th}t"] = w, c
                row["speedup_2t"] = row["wall_1t"] / row["wall_2t"]
                row["cpu_ratio_2t"] = row["cpu_2t"] / row["cpu_1t"]
                print(json.dumps(row), flush=True)
                rows.append(row)
    torch.set_num_threads(1)
    return rows


def cost_grid(torch, args):
    """The cost model's decision (plan.slow: fall back to SDPA) against the measured winner,
    forward, on a grid of (n, d, R, causal); one thread; poly not run where its plan predicts
    more than ``--budget`` seconds (recorded)."""
    from attnio.torch_ops import poly_attention, poly_plan

    torch.set_num_threads(1)
    sd = torch.nn.functional.scaled_dot_product_attention
    rows = []
    for d in (8, 16, 32, 64):
        for R in (0.5, 1.0, 2.0):
            for n in (1024, 4096, 16384):
                for causal in (False, True):
                    q, k, v, B = _inputs(torch, n, d, R)
                    row = {"n": n, "d": d, "R": R, "causal": causal}
                    try:
                        pl = poly_plan(q, k, v, entry_bound=B, is_causal=causal)
                    except Exception as e:  # noqa: BLE001 - recorded: no degree reaches eps
                        row["skipped"] = str(e)
                        rows.append(row)
                        continue
                    row.update(degree=pl.degree, r=pl.r, predicted_s=pl.predicted_s,
                               sdpa_predicted_s=pl.sdpa_predicted_s, falls_back=pl.slow,
                               reason=pl.reason)
                    def sf(cz=causal):
                        return sd(q, k, v, is_causal=cz)
                    sf()
                    row["sdpa_s"] = statistics.median(_time(torch, sf, 1, math.inf)
                                                      for _ in range(3))
                    if pl.predicted_s > args.budget or "features the kernel" in pl.reason \
                            or "memory_limit" in pl.reason:
                        row["poly_s"] = None
                    else:
                        def pf(cz=causal):
                            return poly_attention(q, k, v, entry_bound=B, is_causal=cz,
                                                  on_slow="warn")
                        with warnings.catch_warnings():
                            warnings.simplefilter("ignore")
                            pf()
                            row["poly_s"] = statistics.median(_time(torch, pf, 1, math.inf)
                                                              for _ in range(3))
                    if row["poly_s"] is not None:
                        ratio = row["poly_s"] / row["sdpa_s"]
                        row["measured_ratio"] = ratio
                        row["clear"] = ratio > 1.5 or ratio < 1 / 1.5
                        row["right"] = (ratio > 1) == pl.slow
                    print(json.dumps(row), flush=True)
                    rows.append(row)
    return rows


def _g(x):
    return "—" if x is None else f"{x:.3g}"


def tables():
    """docs/approximate.md's §7 tables (markdown) from the results files."""
    out = []
    sp = json.loads((RESULTS / "torch_speed.json").read_text())
    summ = {(x["threads"], x["pass"], x["causal"]): x for x in sp["summary"]}
    by = {(r["threads"], r["pass"], r["causal"], r["n"]): r for r in sp["rows"]}
    n = max(r["n"] for r in sp["rows"])
    out.append("| threads | pass | mask | SDPA fused (s) | poly_attention (s) | speed-up | "
               "crossover n |")
    out.append("|---|---|---|---|---|---|---|")
    for th in sorted({r["threads"] for r in sp["rows"]}):
        for mode in ("fwd", "fwdbwd"):
            for causal in (False, True):
                r = by.get((th, mode, causal, n), {})
                sm = summ.get((th, mode, causal), {})
                sup = r.get("speedup")
                cross = sm.get("crossover_n")
                out.append(f"| {th} | {'forward' if mode == 'fwd' else 'fwd+bwd'} | "
                           f"{'causal' if causal else 'none'} | {_g(r.get('sdpa_s'))} | "
                           f"{_g(r.get('poly_s'))} | "
                           f"{'—' if sup is None else f'**{sup:.3g}×**'} | "
                           f"{'none' if cross is None else f'{cross:,}'} |")
    out.append("")
    path = RESULTS / "torch_threads.json"
    if path.exists():
        out.append("| method | pass | mask | 1 thread: wall (CPU) s | 2 threads: wall (CPU) s | "
                   "wall speed-up | CPU 2t / 1t |")
        out.append("|---|---|---|---|---|---|---|")
        for r in json.loads(path.read_text())["rows"]:
            out.append(f"| {r['method']} | {r['pass']} | {'causal' if r['causal'] else 'none'} | "
                       f"{r['wall_1t']:.3g} ({r['cpu_1t']:.3g}) | {r['wall_2t']:.3g} "
                       f"({r['cpu_2t']:.3g}) | {r['speedup_2t']:.2f}× | {r['cpu_ratio_2t']:.2f} |")
        out.append("")
    path = RESULTS / "torch_cost_grid.json"
    if path.exists():
        rows = json.loads(path.read_text())["rows"]
        out.append("| n | d | R | causal | r | predicted poly/SDPA | measured poly/SDPA | "
                   "falls back | decision |")
        out.append("|---|---|---|---|---|---|---|---|---|")
        for r in rows:
            if "skipped" in r:
                continue
            pr = r["predicted_s"] / r["sdpa_predicted_s"]
            if "measured_ratio" not in r:
                continue
            m = f"{r['measured_ratio']:.3g}"
            dec = ("right" if r["right"] else "wrong") + ("" if r["clear"] else " (tie)")
            out.append(f"| {r['n']:,} | {r['d']} | {r['R']} | {'yes' if r['causal'] else 'no'} | "
                       f"{r['r']:,} | {pr:.3g} | {m} | {'yes' if r['falls_back'] else 'no'} | "
                       f"{dec} |")
        clear = [r for r in rows if r.get("clear")]
        rest = [r for r in rows if "measured_ratio" not in r and "skipped" not in r]
        out.append("")
        if rest:
            lo = min(r["predicted_s"] / r["sdpa_predicted_s"] for r in rest)
            out.append(f"Not run: {len(rest)} shapes whose plan predicts more than the budget or "
                       f"exceeds the kernel's feature or memory limits (predicted {lo:.3g}× to "
                       f"{max(r['predicted_s'] / r['sdpa_predicted_s'] for r in rest):.3g}× "
                       f"SDPA's time); {sum(r['falls_back'] for r in rest)} of them fall back.")
        out.append(f"{sum(r['right'] for r in clear)} of {len(clear)} measured cases where the two "
                   f"differ by more than 1.5× decided right; "
                   f"{sum(r.get('right', False) for r in rows)} of "
                   f"{sum('right' in r for r in rows)} measured cases in all.")
    print("\n".join(out))


def plot_speed(rows, path):
    """Seconds against n, SDPA (fused) and poly, per pass and mask, one thread (d = 8, R = 1)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True)
    for ax, mode in zip(axes, ("fwd", "fwdbwd")):
        for causal, c in ((False, "C0"), (True, "C3")):
            rs = sorted((r for r in rows if r["pass"] == mode and r["causal"] == causal
                         and r["threads"] == 1 and r["d"] == 8 and r["R"] == 1.0),
                        key=lambda r: r["n"])
            lab = "causal" if causal else "non-causal"
            s = [r for r in rs if r["sdpa_s"] is not None]
            p = [r for r in rs if r.get("poly_s") is not None]
            ax.loglog([r["n"] for r in s], [r["sdpa_s"] for r in s], "--o", color=c,
                      label=f"SDPA fused, {lab}")
            ax.loglog([r["n"] for r in p], [r["poly_s"] for r in p], "-x", color=c,
                      label=f"poly_attention, {lab}")
        ax.set_title(f"{'forward' if mode == 'fwd' else 'forward + backward'}: d = 8, R = 1, "
                     "eps = 1e-3, 1 thread, float32", fontsize=9)
        ax.set_xlabel("n")
        ax.legend(fontsize=7)
    axes[0].set_ylabel("seconds")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="d=8, R=1, n=2^10..2^16, 1 and 2 threads")
    ap.add_argument("--full", action="store_true",
                    help="d in {8,16,32}, R in {0.5,1,2}, n=2^10..2^17, 1 thread and all threads")
    ap.add_argument("--tradeoff", action="store_true", help="the error/time plot only")
    ap.add_argument("--guard", action="store_true", help="the R = 4.17, L = 512 cost-guard case")
    ap.add_argument("--threads-check", action="store_true",
                    help="1 against 2 threads at n = 65,536, d = 8 (wall and CPU time)")
    ap.add_argument("--threads-n", type=int, default=65536)
    ap.add_argument("--threads-sdpa", action="store_true", help="--threads-check: SDPA too")
    ap.add_argument("--tables", action="store_true", help="print docs/approximate.md's tables")
    ap.add_argument("--cost-grid", action="store_true",
                    help="the cost model's decision against the measured winner")
    ap.add_argument("--from-log", nargs="+", default=None, metavar="LOG",
                    help="summarise the rows stopped --full runs printed to these logs")
    ap.add_argument("--max-loss", type=float, default=10.0,
                    help="skip poly where predicted above this many times SDPA's measured time")
    ap.add_argument("--d", default=None, help="--full: comma-separated head dims")
    ap.add_argument("--threads", default=None, help="--full: comma-separated thread counts")
    ap.add_argument("--plot-only", action="store_true",
                    help="redraw the plots from benchmarks/results/torch_*.json")
    ap.add_argument("--tradeoff-n", type=int, default=4096)
    ap.add_argument("--budget", type=float, default=60.0, help="skip a case predicted above this")
    ap.add_argument("--sdpa-budget", type=float, default=400.0,
                    help="skip SDPA where 4.2x its time at n/2 exceeds this")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--rep-limit", type=float, default=2.0)
    ap.add_argument("--err-max-n", type=int, default=1 << 17)
    ap.add_argument("--n-max", type=int, default=None, help="largest n (default 2^16, --full 2^17)")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    args.threads_arg, args.threads = args.threads, None
    import torch

    meta = {"platform": platform.platform(), "torch": torch.__version__,
            "cpu_count": os.cpu_count(), "argv": os.sys.argv[1:]}
    if args.plot_only:
        plot_speed(json.loads((RESULTS / "torch_speed.json").read_text())["rows"],
                   ROOT / "docs" / "img" / "approx_wallclock.png")
        plot_tradeoff(json.loads((RESULTS / "torch_tradeoff.json").read_text())["rows"],
                      ROOT / "docs" / "img" / "approx_tradeoff.png")
        return
    if args.from_log:  # a run stopped before its end: the rows it printed, marked partial
        by_key = {}  # a case measured twice (a restarted run): the later row
        for log in args.from_log:
            for line in Path(log).read_text().splitlines():
                if line.startswith('{"threads"'):
                    r = json.loads(line)
                    by_key[(r["threads"], r["d"], r["n"], r["R"], r["causal"], r["pass"])] = r
        rows = list(by_key.values())
        data = {"machine": meta, "eps": 1e-3, "partial": True, "rows": rows,
                "summary": summarize(rows)}
        (RESULTS / "torch_speed_full.json").write_text(json.dumps(data, indent=1))
        for s_ in data["summary"]:
            print(s_)
        return
    if args.tables:
        tables()
        return
    if args.threads_check:
        rows = threads_check(torch, args)
        (RESULTS / "torch_threads.json").write_text(json.dumps({"machine": meta, "rows": rows},
                                                               indent=1))
        return
    if args.cost_grid:
        rows = cost_grid(torch, args)
        (RESULTS / "torch_cost_grid.json").write_text(json.dumps({"machine": meta, "rows": rows},
                                                                 indent=1))
        clear = [r for r in rows if r.get("clear")]
        print(f"{sum(r['right'] for r in clear)} of {len(clear)} clear cases decided right; "
              f"{sum(r.get('right', False) for r in rows)} of "
              f"{sum('right' in r for r in rows)} measured")
        return
    if args.guard:
        (RESULTS / "torch_guard.json").write_text(json.dumps({"machine": meta, **guard_case(torch)}, indent=1))
        return
    if args.tradeoff:
        rows = tradeoff(torch, args)
        (RESULTS / "torch_tradeoff.json").write_text(json.dumps({"machine": meta, "rows": rows}, indent=1))
        plot_tradeoff(rows, ROOT / "docs" / "img" / "approx_tradeoff.png")
        return
    if args.full:
        args.d = [int(x) for x in args.d.split(",")] if args.d else [8, 16, 32]
        args.R = [0.5, 1.0, 2.0]
        args.n = [2**e for e in range(10, 18)]
        args.threads = ([int(x) for x in args.threads_arg.split(",")] if args.threads_arg
                        else [1, os.cpu_count() or 1])
    else:
        args.d, args.R = [8], [1.0]
        args.n = [2**e for e in range(10, 17)]
        args.threads = [int(x) for x in args.threads_arg.split(",")] if args.threads_arg else [1, 2]
    if args.n_max:
        args.n = [n for n in args.n if n <= args.n_max]
    args.modes = ["fwd", "fwdbwd"]
    t0 = time.perf_counter()
    torch.manual_seed(0)
    rows = speed(torch, args)
    torch.set_num_threads(1)
    data = {"machine": meta, "eps": 1e-3, "rows": rows, "summary": summarize(rows),
            "grad_error": grad_error(torch), "elapsed_s": time.perf_counter() - t0}
    out = Path(args.out) if args.out else RESULTS / ("torch_speed_full.json" if args.full else "torch_speed.json")
    out.write_text(json.dumps(data, indent=1))
    if not args.full and not args.out:
        plot_speed(rows, ROOT / "docs" / "img" / "approx_wallclock.png")
    for s in data["summary"]:
        print(s)
    print(data["grad_error"])
    print(f"wrote {out} in {data['elapsed_s']:.0f} s")


if __name__ == "__main__":
    main()
