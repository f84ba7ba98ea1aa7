"""The loop-order search on tiny instances (issue 25, point 1): the best searched schedule next to
the pebbling optimum, the planner's pick and the best explicit bound.

For each tiny instance (Nq, Nkv, d, M): every schedule of :mod:`attnio.pebble.loops` (loop nest,
snake order, d chunk, every block partition of an axis of <= 6 rows, the even ones beyond) run on
the referee in count mode; the best one rerun in compute mode (output against the float64
reference); the exact red-blue pebbling optimum (:func:`attnio.pebble.solve`, ``--pebble-time``
seconds, only where the DAG has at most ``--pebble-nodes`` nodes: beyond, the A* search does not
finish); the planner's pick (:func:`attnio.plan`: every registered exact algorithm by closed
form); the best explicit bound (:func:`attnio.bounds.applicable`).

Run:  python benchmarks/loop_search.py [--out benchmarks/results/loop_search.json] [--write]
  --write   regenerate the table of docs/pebbling.md (between the loop_search markers)
  --render  redraw the tables from the saved results only (with --write: into the docs)
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import platform
import time

from _docs import rewrite_block

import attnio
from attnio import bounds, pebble
from attnio.core.errors import ParameterError
from attnio.pebble import loops

ROOT = pathlib.Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "pebbling.md"
START, END = "<!-- BEGIN loop_search -->", "<!-- END loop_search -->"

#: (Nq, Nkv, d, M), smallest first.
INSTANCES = (
    (2, 2, 1, 6), (2, 2, 1, 8), (2, 2, 2, 8), (2, 2, 2, 12), (3, 3, 1, 8), (3, 3, 1, 12),
    (3, 3, 2, 12), (3, 3, 2, 16), (4, 4, 2, 12), (4, 4, 2, 16), (4, 4, 2, 24), (6, 6, 2, 16),
    (8, 4, 2, 16), (4, 8, 2, 16), (8, 8, 2, 12), (8, 8, 2, 24), (8, 8, 2, 32), (8, 8, 3, 24),
    (8, 8, 3, 48),
)


def _pebble(Nq: int, Nkv: int, d: int, M: int, seconds: float, max_nodes: int) -> dict | None:
    g = pebble.dag.attention(Nq, d, Nkv=Nkv)
    if len(g) > max_nodes:
        return None
    r = pebble.solve(g, M, time_limit=seconds)
    return {"io": r.io, "optimal": bool(r.globally_optimal), "lower_bound": r.lower_bound,
            "method": r.method, "nodes": len(g)}


def row(Nq: int, Nkv: int, d: int, M: int, seconds: float, max_nodes: int) -> dict:
    t0 = time.perf_counter()
    found = loops.search(Nq, Nkv, d, M)
    t_search = time.perf_counter() - t0
    best = found[0] if found else None
    err = None
    if best is not None:
        run = loops.run_schedule(best.schedule, Nq, Nkv, d, M, seed=0)
        assert run is not None and run.io == best.io
        err = run.max_error
    try:
        p = attnio.plan(Nq, d, M, Nkv=Nkv)
        pick = {"algorithm": p.chosen.algorithm, "tiling": str(p.chosen.tiling),
                "io": p.chosen.predicted.total}
    except ParameterError as e:
        pick = {"algorithm": None, "tiling": None, "io": None, "reason": str(e).splitlines()[0]}
    expl = [b for b in bounds.applicable(N=Nq, d=d, M=M, Nkv=Nkv) if b.explicit]
    bb = max(expl, key=lambda b: b.value)
    t1 = time.perf_counter()
    opt = _pebble(Nq, Nkv, d, M, seconds, max_nodes)
    return {
        "Nq": Nq, "Nkv": Nkv, "d": d, "M": M,
        "schedules_run": len(list(loops.enumerate_schedules(Nq, Nkv, d))),
        "schedules_fit": len(found),
        "best": None if best is None else {"io": best.io, "reads": best.reads,
                                           "writes": best.writes, "schedule": best.schedule.short(),
                                           "describe": best.schedule.describe(),
                                           "max_error": err,
                                           "ties": sum(1 for s in found if s.io == best.io)},
        "planner": pick,
        "best_bound": {"name": bb.name, "value": float(bb.value)},
        "pebbling": opt,
        "search_seconds": round(t_search, 2), "pebble_seconds": round(time.perf_counter() - t1, 2),
    }


#: Beyond tiny sizes (N, d, M): one family only, Q-stationary schedules with one key/value row per
#: block (query blocks outer; the row schedule, and the split one with a single chunk and eager
#: rescale, which is q_stationary_min's), every even query partition, forward and snake.
BEYOND = ((64, 4, 128), (64, 4, 400), (96, 8, 384), (96, 8, 768), (96, 8, 1200), (128, 8, 1536),
          (128, 8, 2560))


def beyond(N: int, d: int, M: int) -> dict:
    t0 = time.perf_counter()
    best = None
    for split in (False, True):
        for snake in (False, True):
            for qb in loops.compositions(N, every_upto=0):
                s = loops.LoopSchedule("q", snake, qb, (1,) * N, d, False, split, split)
                r = loops.run_schedule(s, N, N, d, M)
                if r is not None and (best is None or r.io < best[0]):
                    best = (r.io, s)
    assert best is not None
    p = attnio.plan(N, d, M)
    run = loops.run_schedule(best[1], N, N, d, M, seed=0)
    assert run is not None and run.io == best[0]
    return {"N": N, "d": d, "M": M, "M_over_Nd": round(M / (N * d), 3),
            "searched": {"io": best[0], "schedule": best[1].short(), "max_error": run.max_error},
            "planner": {"algorithm": p.chosen.algorithm, "tiling": str(p.chosen.tiling),
                        "io": p.chosen.predicted.total},
            "best_bound": {"name": p.certificate.best_bound.name,
                           "value": float(p.certificate.best_bound.value)},
            "seconds": round(time.perf_counter() - t0, 1)}


def beyond_table(rows: list[dict]) -> str:
    lines = ["| N | d | M | M/(Nd) | best Q-stationary schedule (Belady) | query blocks | "
             "planner's pick | searched / planner | best explicit bound |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        s, p, b = r["searched"], r["planner"], r["best_bound"]
        qb = s["schedule"].split("Br=")[1].split(" Bc=")[0]
        qb = qb if len(qb) < 40 else qb[:36] + " …]"
        lines.append(f"| {r['N']} | {r['d']} | {r['M']} | {r['M_over_Nd']:.2f} | {s['io']} "
                     f"({s['schedule'].split(' ')[0]}{'/split' if '/split' in s['schedule'] else ''}) | {qb} | {p['algorithm']} {p['io']} | "
                     f"{s['io'] / p['io']:.3f} | {b['value']:g} ({b['name']}) |")
    return "\n".join(lines)


def _opt(o: dict | None) -> str:
    if o is None:
        return "— (too large)"
    if o["optimal"]:
        return str(o["io"])
    return f"[{o['lower_bound']}, {o['io'] if o['io'] is not None else '?'}]"


def table(rows: list[dict]) -> str:
    lines = ["| Nq | Nkv | d | M | pebbling OPT | schedules (fit / run) | best searched | "
             "its loop order | planner's pick | planner / searched | best explicit bound |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        b, p = r["best"], r["planner"]
        bio = "none fits" if b is None else str(b["io"])
        order = "—" if b is None else f"`{b['schedule']}`" + (
            f" (+{b['ties'] - 1} ties)" if b["ties"] > 1 else "")
        pk = "none fits" if p["io"] is None else f"{p['algorithm']} {p['io']}"
        ratio = ("—" if b is None or p["io"] is None else f"{p['io'] / b['io']:.2f}")
        bb = r["best_bound"]
        lines.append(f"| {r['Nq']} | {r['Nkv']} | {r['d']} | {r['M']} | {_opt(r['pebbling'])} | "
                     f"{r['schedules_fit']:,} / {r['schedules_run']:,} | {bio} | {order} | {pk} | {ratio} | {bb['value']:g} ({bb['name']}) |")
    return "\n".join(lines)


def _text(rows: list[dict], brows: list[dict]) -> str:
    text = table(rows)
    if brows:
        text += ("\n\nBeyond tiny sizes, one family (Q-stationary, one key/value row per "
                 "block: the row schedule and the split one with eager rescale, which is "
                 "q_stationary_min's; every even query partition, forward and snake, "
                 "Belady-managed), each run on the referee:\n\n" + beyond_table(brows))
    return text


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "loop_search.json"))
    ap.add_argument("--pebble-time", type=float, default=20.0,
                    help="seconds for each pebbling solve (default 20)")
    ap.add_argument("--pebble-nodes", type=int, default=120,
                    help="solve the pebbling game only on DAGs of at most this many nodes")
    ap.add_argument("--first", type=int, default=None, help="only the first K instances")
    ap.add_argument("--write", action="store_true")
    ap.add_argument("--render", action="store_true",
                    help="only redraw the tables from --out (no search)")
    args = ap.parse_args(argv)
    if args.render:
        saved = json.loads(pathlib.Path(args.out).read_text())
        text = _text(saved["rows"], saved["beyond"])
        print(text)
        if args.write:
            rewrite_block(DOC, START, END, text)
        return 0
    todo = INSTANCES[: args.first] if args.first else INSTANCES
    rows = []
    t0 = time.perf_counter()
    for inst in todo:
        r = row(*inst, args.pebble_time, args.pebble_nodes)
        rows.append(r)
        b = r["best"]
        print(f"# {inst}: searched {b['io'] if b else None} ({r['search_seconds']} s), planner "
              f"{r['planner']['io']}, OPT {_opt(r['pebbling'])}", flush=True)
    brows = []
    if not args.first:
        for inst in BEYOND:
            brows.append(beyond(*inst))
            print(f"# beyond {inst}: {brows[-1]['searched']['io']} vs planner "
                  f"{brows[-1]['planner']['io']}", flush=True)
    text = _text(rows, brows)
    print(text)
    out = {"rows": rows, "beyond": brows, "seconds": round(time.perf_counter() - t0, 1),
           "machine": {"python": platform.python_version(), "cpus": os.cpu_count()},
           "command": "python benchmarks/loop_search.py" + (" --write" if args.write else "")}
    pathlib.Path(args.out).write_text(json.dumps(out, indent=1, default=str) + "\n")
    print("wrote", args.out)
    if args.write:
        rewrite_block(DOC, START, END, text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
