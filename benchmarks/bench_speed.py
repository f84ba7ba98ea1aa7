"""Speed of the things issue 18 asks to be fast: masked plans and counts at N = 10^9, sweep
throughput in count mode, and Ctrl-C during a sweep.

Run:  python benchmarks/bench_speed.py [--out benchmarks/results/speed.json] [--repeat 11]
                                       [--sweep-repeat 3] [--ctrl-c 20] [--quick]

Figures (medians; the machine is shared, so every figure is the median of several runs, and the
planner's is given both as wall time and as this process's CPU time):

* ``planner``: ``attnio.plan(...)`` cold (every ``functools.lru_cache`` of attnio cleared before
  each call) for causal shapes up to N = 10^9 (with and without a window, GQA, top-left) and one
  unmasked shape for comparison;
* ``count``: ``attnio.run(name, shape=..., mode="count")`` in this process at N = 10^9, causal,
  for every exact algorithm (caches cleared), and the whole command line
  ``attnio run flash2 --N 1000000000 --d 128 --M 65536 --count-only --causal --window 4096``
  (and ``attnio plan`` of the same shape) as subprocesses: wall time and peak memory, next to a
  bare ``python -c "import attnio"``;
* ``sweep``: configurations per second of ``run_sweep`` in count mode with 1 and 2 jobs, each into
  a fresh database, on two grids: ``flash`` (flash2 and flash1, N = 256..16384, d = 16..128,
  M = 256..2^20, causal and not: 1,456 configurations) and ``all`` (the README's own-grid
  example, every registered algorithm: 1,764 configurations, 378 of them stored as skipped);
  the whole call is timed (expansion, worker start-up, every transaction), after one untimed
  one-configuration sweep that imports the lazily loaded layers;
* ``ctrl_c`` (with ``--ctrl-c N``): N real ``attnio sweep`` subprocesses (1 and 2 jobs in turn,
  every fourth with a second Ctrl-C) interrupted by SIGINT to their process group once rows are
  being written: seconds to exit, stderr lines, exit code, and whether the resumed database equals
  an uninterrupted run.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time

from _cold import clear_attnio_caches

import attnio
from attnio.core.workload import Shape
from attnio.experiments.store import ResultsStore
from attnio.experiments.sweep import Grid, parse_values, run_sweep

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

PLANS = [
    ("causal, window 4096, N=1e9", dict(N=10**9, d=128, M=65536, causal=True, window=4096)),
    ("causal, N=1e9", dict(N=10**9, d=128, M=65536, causal=True)),
    ("causal top-left, N=1e9", dict(N=10**9, d=128, M=65536, causal="top_left")),
    ("causal, N=2^20", dict(N=2**20, d=64, M=65536, causal=True)),
    ("causal, N=2^20, M=4096 (< d^2)", dict(N=2**20, d=64, M=4096, causal=True)),
    ("causal GQA 32/8, N=8192", dict(N=8192, d=128, M=65536, causal=True, heads=32,
                                     kv_heads=8)),
    ("unmasked, N=2^20 (reference)", dict(N=2**20, d=64, M=65536)),
]
COUNTS = [
    ("flash2", dict(window=4096), None),
    ("flash2", {}, None),
    ("flash1", dict(window=4096), None),
    ("flash_decoding", dict(window=4096), None),
    ("standard", dict(window=4096), {"bm": 64, "bn": 64, "bk": 64, "onepass": False}),
    ("square_tiling", {}, None),
]
GRIDS = {
    "flash": Grid(N=parse_values("N", "256:16384:x2"), d=(16, 32, 64, 128),
                  M=parse_values("M", "256:1048576:x2"), algorithms=("flash2", "flash1"),
                  causal=(False, True)),
    "all": Grid(N=parse_values("N", "256:16384:x2"), d=(16, 64, 128),
                M=parse_values("M", "256:1048576:x4"), algorithms=("all",),
                causal=(False, True)),
}
CTRL_C_GRID = ["--algo", "flash2,flash1,standard", "--N", "256:16384:x2", "--d", "16,32,64,128",
               "--M", "256:1048576:x2", "--causal", "both"]


def clear_caches() -> int:
    """Clear every functools.lru_cache of the attnio modules (a cold call)."""
    return clear_attnio_caches()


def median_cold(fn, repeat: int) -> tuple[float, float, object]:
    """(median wall s, median CPU s, last result) of ``fn`` with the caches cleared each time."""
    walls, cpus, out = [], [], None
    for _ in range(repeat):
        clear_caches()
        c0, t0 = time.process_time(), time.perf_counter()
        out = fn()
        walls.append(time.perf_counter() - t0)
        cpus.append(time.process_time() - c0)
    return statistics.median(walls), statistics.median(cpus), out


def planner(repeat: int) -> list[dict]:
    attnio.plan(1024, 64, 65536, causal=True)  # imports and first-call work out of the way
    rows = []
    for label, kw in PLANS:
        wall, cpu, p = median_cold(lambda kw=kw: attnio.plan(**kw), repeat)
        rows.append({"case": label, "args": {k: str(v) for k, v in kw.items()},
                     "cold_wall_ms": wall * 1e3, "cold_cpu_ms": cpu * 1e3,
                     "algorithm": p.chosen.algorithm, "tiling": str(p.chosen.tiling),
                     "total": p.chosen.predicted.total})
        print(f"plan {label:34s} cold {wall * 1e3:7.2f} ms wall {cpu * 1e3:7.2f} ms CPU  "
              f"{p.chosen.algorithm} {p.chosen.tiling}")
    return rows


def counts(repeat: int) -> list[dict]:
    rows = []
    for name, extra, tiling in COUNTS:
        shape = Shape(10**9, 10**9, 128, causal=True, **extra)
        M = 4096 if name == "square_tiling" else 65536
        wall, cpu, r = median_cold(lambda: attnio.run(name, shape=shape, M=M, mode="count",
                                                      tiling=tiling), repeat)
        pred = attnio.algorithms.get(name).predict_total(shape, r.tiling)
        assert (r.io.reads, r.io.writes) == (pred.reads, pred.writes)
        rows.append({"algorithm": name, "shape": shape.describe(), "M": M,
                     "wall_ms": wall * 1e3, "cpu_ms": cpu * 1e3, "total": r.io.total,
                     "equals_closed_form": True})
        print(f"count {name:15s} {shape.describe():42s} M={M:<6} {wall * 1e3:8.2f} ms wall "
              f"{cpu * 1e3:8.2f} ms CPU  total {r.io.total:,}")
    return rows


def _subprocess(argv: list[str], repeat: int) -> dict:
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "src"))
    walls, rss = [], 0
    for _ in range(repeat):
        t0 = time.perf_counter()
        p = subprocess.run(argv, env=env, capture_output=True, text=True)
        walls.append(time.perf_counter() - t0)
        assert p.returncode == 0, p.stderr
        rss = max(rss, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
    return {"argv": argv[1:], "wall_s_median": statistics.median(walls), "wall_s_all": walls,
            "max_rss_mb_of_all_children_so_far": rss / 1024}


def commands(repeat: int) -> dict:
    py = sys.executable
    out = {
        "import_attnio": _subprocess([py, "-c", "import attnio"], repeat),
        "run_count_1e9_window": _subprocess(
            [py, "-m", "attnio", "run", "flash2", "--N", "1000000000", "--d", "128", "--M",
             "65536", "--count-only", "--causal", "--window", "4096"], repeat),
        "plan_1e9_window": _subprocess(
            [py, "-m", "attnio", "plan", "--N", "1000000000", "--d", "128", "--M", "65536",
             "--causal", "--window", "4096"], repeat),
    }
    for k, v in out.items():
        print(f"command {k:24s} {v['wall_s_median']:6.2f} s wall (median of {repeat}), max RSS "
              f"so far {v['max_rss_mb_of_all_children_so_far']:.0f} MB")
    return out


def sweeps(repeat: int) -> dict:
    out = {}
    with tempfile.TemporaryDirectory() as tmp:  # warm-up: the lazy layers imported, not timed
        run_sweep(Grid(N=(256,), d=(16,), M=(1024,), algorithms=("all",)),
                  os.path.join(tmp, "warm.sqlite"), jobs=1)
    for gname, grid in GRIDS.items():
        for jobs in (1, 2):
            rates, cpu = [], []
            s = None
            for _ in range(repeat):
                with tempfile.TemporaryDirectory() as tmp:
                    db = os.path.join(tmp, "bench.sqlite")
                    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
                    c0, t0 = time.process_time(), time.perf_counter()
                    s = run_sweep(grid, db, jobs=jobs)
                    t = time.perf_counter() - t0
                    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
                    cpu.append(time.process_time() - c0 + (r1.ru_utime - r0.ru_utime)
                               + (r1.ru_stime - r0.ru_stime))
                assert s.errors == 0 and s.already == 0
                rates.append(s.total / t)
            med = statistics.median(rates)
            out[f"{gname}_jobs{jobs}"] = {
                "configurations": s.total, "ran": s.ran, "stored_skipped": s.skipped,
                "configs_per_s_median": med, "configs_per_s_all": rates,
                "cpu_ms_per_config_median": statistics.median(cpu) / s.total * 1e3}
            print(f"sweep {gname:6s} --jobs {jobs}: {s.total} configurations, {med:7.0f} cfg/s "
                  f"(median of {repeat}: {', '.join(f'{r:.0f}' for r in rates)}), "
                  f"{statistics.median(cpu) / s.total * 1e3:.2f} ms CPU per configuration")
    return out


def _count(db: str) -> int:
    try:
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
        try:
            return con.execute("SELECT COUNT(*) FROM results").fetchone()[0]
        finally:
            con.close()
    except sqlite3.Error:
        return 0


def _stable_rows(db: str) -> list[dict]:
    with ResultsStore(db, readonly=True) as st:
        return [{k: v for k, v in r.items() if k not in ("wall_s", "created_at")}
                for r in st.rows()]


def ctrl_c(trials: int) -> dict:
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "src"))
    sweep = [sys.executable, "-m", "attnio", "sweep"]
    with tempfile.TemporaryDirectory() as tmp:
        ref = os.path.join(tmp, "ref.sqlite")
        subprocess.run([*sweep, "--db", ref, "--quiet", "--jobs", "2", *CTRL_C_GRID], env=env,
                       check=True)
        want = _stable_rows(ref)
        results = []
        for trial in range(trials):
            jobs, double = 1 + trial % 2, trial % 4 == 3
            db = os.path.join(tmp, f"t{trial}.sqlite")
            p = subprocess.Popen([*sweep, "--db", db, "--jobs", str(jobs), *CTRL_C_GRID], env=env,
                                 start_new_session=True, stdout=subprocess.DEVNULL,
                                 stderr=subprocess.PIPE, text=True)
            deadline = time.monotonic() + 60
            while _count(db) == 0 and p.poll() is None and time.monotonic() < deadline:
                time.sleep(0.01)
            time.sleep(0.05 * (trial % 5))
            t0 = time.monotonic()
            try:
                os.killpg(p.pid, signal.SIGINT)
                if double:
                    time.sleep(0.05)
                    os.killpg(p.pid, signal.SIGINT)
            except ProcessLookupError:
                pass
            _, err = p.communicate(timeout=60)
            dt = time.monotonic() - t0
            at_stop = _count(db)
            subprocess.run([*sweep, "--db", db, "--quiet", "--jobs", "2", *CTRL_C_GRID], env=env,
                           check=True)
            same = _stable_rows(db) == want
            lines = err.splitlines()
            ok = p.returncode == 130 and len(lines) == 1 and dt < 2.0 and same
            results.append({"trial": trial, "jobs": jobs, "double": double, "exit_code":
                            p.returncode, "seconds_to_exit": dt, "stderr_lines": len(lines),
                            "rows_at_stop": at_stop, "resumed_equal": same, "ok": ok,
                            "line": lines[0] if lines else ""})
            print(f"ctrl-c trial {trial:2d} jobs={jobs} double={double!s:5s}: exit "
                  f"{p.returncode} in {dt:.2f} s, {len(lines)} line(s), {at_stop} rows at stop, "
                  f"resumed equal: {same}")
    times = [r["seconds_to_exit"] for r in results]
    summary = {"trials": trials, "passed": sum(r["ok"] for r in results),
               "seconds_to_exit_median": statistics.median(times), "seconds_to_exit_max":
               max(times), "results": results}
    print(f"ctrl-c: {summary['passed']} of {trials} trials passed; exit in "
          f"{summary['seconds_to_exit_median']:.2f} s (median), {max(times):.2f} s (max)")
    return summary


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.join(HERE, "results", "speed.json"))
    ap.add_argument("--repeat", type=int, default=11, help="cold calls per planner/count figure")
    ap.add_argument("--sweep-repeat", type=int, default=3, help="sweeps per throughput figure")
    ap.add_argument("--ctrl-c", type=int, default=0, help="Ctrl-C trials (0: none)")
    ap.add_argument("--quick", action="store_true", help="fewer repeats, no subprocess figures")
    args = ap.parse_args(argv)
    rep = 3 if args.quick else args.repeat
    t0 = time.perf_counter()
    with open("/proc/loadavg") if os.path.exists("/proc/loadavg") else open(os.devnull) as f:
        load = f.read().split()[:3]
    res = {"machine": {"python": platform.python_version(), "platform": platform.platform(),
                       "cpu_count": os.cpu_count(), "attnio": attnio.__version__,
                       "load_average_at_start": load},
           "planner": planner(rep), "count": counts(rep)}
    if not args.quick:
        res["commands"] = commands(5)
    res["sweep"] = sweeps(1 if args.quick else args.sweep_repeat)
    if args.ctrl_c:
        res["ctrl_c"] = ctrl_c(args.ctrl_c)
    res["seconds"] = time.perf_counter() - t0
    with open(args.out, "w") as f:
        json.dump(res, f, indent=1, sort_keys=True)
        f.write("\n")
    print(f"wrote {args.out} ({res['seconds']:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
