"""Speed of the things issue 18 asks to be fast: masked plans and counts at N = 10^9, sweep
throughput in count mode, and Ctrl-C during a sweep; and, with ``--compare REF``, the speed
guard of issue 31: this tree against an earlier commit, in one run.

Run:  python benchmarks/bench_speed.py [--out benchmarks/results/speed.json] [--repeat 11]
                                       [--sweep-repeat 3] [--ctrl-c 20] [--quick]
                                       [--only GROUPS] [--rounds N]
      python benchmarks/bench_speed.py --compare REF [--rounds 5] [--quick] [--out FILE.json]

``--compare REF`` (run it before stopping whenever a change touches bounds, algorithms, the
planner or sweeps): REF is checked out as a git worktree in a temporary folder (removed
afterwards), and the current tree and REF are measured alternately, round after round (current,
reference, current, reference, ...), each measurement in a fresh process whose ``PYTHONPATH`` is
that tree's ``src`` (``_speed_probe.py``, which uses only APIs old trees have too and reports
"missing" for what a tree lacks).  For every figure it prints the median over the rounds of each
tree and the ratio current/reference (configs/s: higher is better; ms and s: lower is better):

* ``sweep``: ``attnio sweep --N 256:32768:x2 --d 16,32,64,128 --M 1024:1048576:x2 --algo
  flash1,flash2 --causal both --mode count --jobs 2`` (1,408 configurations) in configurations
  per second (wall, after an untimed one-configuration sweep) and CPU seconds (with the workers);
* ``plan``: cold ``attnio.plan`` forward and ``backward=True``, CPU ms (median of 5 calls, 3
  with ``--quick``), at N=4096 d=64 M=65536; N=3000 d=40 M=60000; N=8192 d=128 M=65536 with 32
  query heads on 8 K/V heads, causal;
* ``counts``: every registered exact schedule's masked count at N = 10^9 (causal, window 4096;
  causal alone for one without windows), d = 128, M = 65536, and every backward schedule's
  (after flash2's forward), CPU ms; a count is stopped after 30 s (5 with ``--quick``) and not
  tried again in later rounds;
* ``import``: ``import attnio`` in a fresh process, wall and CPU ms.

``--quick``: one round; ``--only sweep,plan``: those groups only.  Wall-clock figures are noisy
on a shared machine: quote the CPU ones and the ratios, and rerun with more ``--rounds`` when a
ratio matters.

Without ``--compare``, ``--only`` picks the groups of the figures below as well (``plan``: the
planner's, ``counts``: the counts', ``import``: the command lines', ``sweep``: the sweeps'; the
JSON is then written only where ``--out`` says) and ``--rounds N`` is the number of cold calls
per planner and count figure (``--repeat``): ``python benchmarks/bench_speed.py --only counts
--rounds 1`` measures every masked count at N = 10^9 once.

Figures (medians; the machine is shared, so every figure is the median of several runs, and the
planner's is given both as wall time and as this process's CPU time):

* ``planner``: ``attnio.plan(...)`` cold (every ``functools.lru_cache`` of attnio cleared before
  each call) for causal shapes up to N = 10^9 (with and without a window, GQA, top-left) and one
  unmasked shape for comparison;
* ``count``: ``attnio.run(name, shape=..., mode="count")`` in this process at N = 10^9, causal,
  d = 128 (caches cleared, past the time budget), each count checked against its closed form:
  the hand-picked rows of ``COUNTS`` (flash2 without a window, schedules without windows at
  their causal count, standard's one-pass tiling, the small-cache ones at M = 4096), then every
  other registered exact schedule that takes a window and every registered backward schedule
  that does (after flash2's forward; the backward pass's count) at window 4096, M = 65536, from
  the registry (a schedule that cannot run the shape is listed with its reason); and the whole
  command line
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
import re
import resource
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time

from _cold import clear_attnio_caches

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
    ("window_square", dict(window=4096), None),
]


def _grids() -> dict:
    from attnio.experiments.sweep import Grid, parse_values

    return {
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
    import attnio

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


def _count_jobs() -> list[tuple[str, dict, dict | None, str | None]]:
    """(schedule, extra Shape keywords, tiling, backward schedule) of the ``counts`` group: the
    hand-picked rows of :data:`COUNTS`, then every other registered exact forward schedule that
    takes a window and every registered backward schedule that does (after flash2's forward),
    at the window of 4096: issue 31's "every registered schedule's masked count (causal, window
    4096) at N = 10^9", from the registry, so a schedule registered later is measured too."""
    from attnio import algorithms

    jobs: list[tuple[str, dict, dict | None, str | None]] = [
        (name, extra, tiling, None) for name, extra, tiling in COUNTS]
    listed = {name for name, extra, _ in COUNTS if "window" in extra}
    jobs += [(a.name, dict(window=4096), None, None) for a in algorithms.all_algorithms(exact=True)
             if a.supports_window and a.name not in listed]
    jobs += [("flash2", dict(window=4096), None, b.name) for b in algorithms.all_backwards()
             if getattr(b, "supports_window", True)]
    return jobs


def counts(repeat: int) -> list[dict]:
    import attnio
    from attnio.core.workload import Shape

    rows = []
    backwards = {b.name: b for b in attnio.algorithms.all_backwards()}
    for name, extra, tiling, bwd in _count_jobs():
        shape = Shape(10**9, 10**9, 128, causal=True, **extra)
        M = 4096 if name in ("square_tiling", "window_square") else 65536  # small-cache ones
        kw: dict = {"limits": attnio.Limits(force=True)}  # measured even past the time budget
        if bwd is not None:
            kw["backward"] = attnio.BackwardPass(bwd)
        why = attnio.algorithms.get(name).unsupported(shape, M) or (
            None if bwd is None else backwards[bwd].unsupported(shape, M))
        label = name if bwd is None else f"{name} + {bwd}"
        if why is not None:
            rows.append({"algorithm": label, "shape": shape.describe(), "M": M, "refused": why})
            print(f"count {label:38s} {shape.describe():42s} M={M:<6} refused: {why}")
            continue
        wall, cpu, r = median_cold(lambda: attnio.run(name, shape=shape, M=M, mode="count",
                                                      tiling=tiling, **kw), repeat)
        # the forward writes the logsumexp for a backward pass
        pred = attnio.algorithms.get(name).cost(shape, r.tiling, lse=bwd is not None).io
        assert (r.io.reads, r.io.writes) == (pred.reads, pred.writes)
        total = r.io.total
        if bwd is not None:
            bpred = backwards[bwd].cost(shape, r.backward_tiling).io
            assert (r.backward_io.reads, r.backward_io.writes) == (bpred.reads, bpred.writes)
            total = r.backward_io.total
        rows.append({"algorithm": label, "shape": shape.describe(), "M": M,
                     "wall_ms": wall * 1e3, "cpu_ms": cpu * 1e3, "total": total,
                     "equals_closed_form": True})
        print(f"count {label:38s} {shape.describe():42s} M={M:<6} {wall * 1e3:8.2f} ms wall "
              f"{cpu * 1e3:8.2f} ms CPU  total {total:,}")
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
    from attnio.experiments.sweep import Grid, run_sweep

    out = {}
    with tempfile.TemporaryDirectory() as tmp:  # warm-up: the lazy layers imported, not timed
        run_sweep(Grid(N=(256,), d=(16,), M=(1024,), algorithms=("all",)),
                  os.path.join(tmp, "warm.sqlite"), jobs=1)
    for gname, grid in _grids().items():
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
    from attnio.experiments.store import ResultsStore

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


# ----------------------------------------------------------------------------- --compare REF
PROBE = os.path.join(HERE, "_speed_probe.py")
GROUPS = ("sweep", "plan", "counts", "import")


class CompareError(Exception):
    """A --compare run that cannot go on (a bad reference, a failed measurement)."""


def _git(*args: str) -> str:
    p = subprocess.run(["git", "-C", ROOT, *args], capture_output=True, text=True)
    if p.returncode != 0:
        raise CompareError(f"git {' '.join(args)}: {(p.stderr or p.stdout).strip()[:200]}")
    return p.stdout.strip()


def probe(group: str, tree: str, opts: dict, timeout_s: float) -> dict:
    """One measurement: ``_speed_probe.py GROUP`` in a fresh process importing attnio from
    ``tree``/src."""
    env = dict(os.environ, PYTHONPATH=os.path.join(tree, "src"))
    env.pop("PYTHONSTARTUP", None)
    with tempfile.TemporaryDirectory() as cwd:  # nothing of either tree on sys.path by accident
        try:
            p = subprocess.run([sys.executable, PROBE, group, tree, json.dumps(opts)], env=env,
                               cwd=cwd, capture_output=True, text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return {"error": f"{group}: no answer in {timeout_s:.0f} s"}
    if p.returncode != 0 or not p.stdout.strip():
        last = (p.stderr.strip().splitlines() or ["(no output)"])[-1]
        return {"error": f"{group}: exit code {p.returncode}: {last[:200]}"}
    return json.loads(p.stdout.strip().splitlines()[-1])


def _median(values: list) -> float | str | None:
    nums = [v for v in values if isinstance(v, (int, float))]
    if nums:
        return statistics.median(nums)
    return values[0] if values else None


def _fmt(v) -> str:
    """A figure for the table: a number, or the first word of why there is none."""
    if isinstance(v, (int, float)):
        return f"{v:,.3g}" if abs(v) < 100 else f"{v:,.0f}"
    if v is None:
        return "absent"
    m = re.match(r"over (\S+) s", v)
    return f"> {m.group(1)} s" if m else v.split(":")[0]


def _short(key: str, group: str) -> str:
    """A figure's name in the lines of a round (the table gives it in full)."""
    if group == "counts":
        return key.split(", ")[0].removeprefix("count ")
    if group == "sweep":
        return key.rsplit(", ", 1)[1]
    return key.rsplit(", ", 1)[0].removeprefix("plan ")


def compare(ref: str, rounds: int, quick: bool, out: str | None,
            groups: tuple[str, ...] = GROUPS) -> int:
    """Measure the current tree and ``ref`` (checked out as a git worktree in a temporary
    folder, removed afterwards) alternately, ``rounds`` times, and print both medians and their
    ratio for every figure."""
    try:
        sha = _git("rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
    except CompareError:
        raise CompareError(f"{ref!r} is not a commit of {ROOT}") from None
    opts = {"repeat": 3 if quick else 5, "timeout_s": 5.0 if quick else 30.0}
    tmp = tempfile.mkdtemp(prefix="attnio-bench-ref-")
    wt = os.path.join(tmp, "ref")
    t0 = time.perf_counter()
    try:
        _git("worktree", "add", "--detach", "--quiet", wt, sha)
        if not os.path.isdir(os.path.join(wt, "src", "attnio")):
            raise CompareError(f"{ref} ({sha[:10]}) has no src/attnio")
        trees = {"current": ROOT, "reference": wt}
        samples: dict[str, dict[str, list]] = {"current": {}, "reference": {}}
        over: dict[str, set] = {"current": set(), "reference": set()}  # counts past the limit
        print(f"bench_speed --compare {ref} ({sha[:10]}): {rounds} round(s), current = {ROOT}")
        for r in range(rounds):
            for group in groups:
                for name in ("current", "reference"):  # interleaved: cur, ref, cur, ref, ...
                    o = dict(opts, skip=sorted(over[name]))
                    res = probe(group, trees[name], o, timeout_s=600)
                    if "error" in res:
                        print(f"  round {r + 1} {name:9s} {res['error']}")
                    for k, v in res.items():
                        if k == "error":
                            continue
                        samples[name].setdefault(k, []).append(v)
                        if isinstance(v, str) and v.startswith("over "):
                            over[name].add(k)
                    shown = "; ".join(f"{_short(k, group)} {_fmt(v)}" for k, v in res.items()
                                      if k != "error")
                    print(f"  round {r + 1} {name:9s} {group:6s} {shown}", flush=True)
    finally:
        subprocess.run(["git", "-C", ROOT, "worktree", "remove", "--force", wt],
                       capture_output=True)
        shutil.rmtree(tmp, ignore_errors=True)
        subprocess.run(["git", "-C", ROOT, "worktree", "prune"], capture_output=True)
    keys = list(samples["current"])
    keys += [k for k in samples["reference"] if k not in keys]
    figures = {}
    width = max(len(k) for k in keys) if keys else 10
    print(f"\n{'figure (median of the rounds)':{width}s} {'current':>12s} {'reference':>12s} "
          f"{'cur/ref':>8s}")
    for k in keys:
        cur, refv = _median(samples["current"].get(k, [])), _median(samples["reference"].get(k, []))
        ratio = cur / refv if isinstance(cur, (int, float)) and isinstance(refv, (int, float)) \
            and refv else None
        figures[k] = {"current": samples["current"].get(k, []),
                      "reference": samples["reference"].get(k, []),
                      "current_median": cur, "reference_median": refv, "ratio": ratio}
        print(f"{k:{width}s} {_fmt(cur):>12s} {_fmt(refv):>12s} "
              f"{'' if ratio is None else f'{ratio:.2f}':>8s}")
    text = {k: v for k, v in figures.items() if not isinstance(v["current_median"], float)
            or not isinstance(v["reference_median"], float)}
    for k, v in text.items():  # the reasons in full (the table cuts them)
        for side in ("current", "reference"):
            if isinstance(v[f"{side}_median"], str):
                print(f"  {k} [{side}]: {v[f'{side}_median']}")
    print("(absent: the tree has no such schedule; ratios: configs/s higher is better, ms and s "
          "lower is better)")
    elapsed = time.perf_counter() - t0
    print(f"{elapsed:.0f} s")
    if out:
        with open("/proc/loadavg") if os.path.exists("/proc/loadavg") else open(os.devnull) as f:
            load = f.read().split()[:3]
        with open(out, "w") as f:
            json.dump({"reference": ref, "reference_commit": sha, "rounds": rounds,
                       "quick": quick, "seconds": elapsed, "load_average_at_end": load,
                       "machine": {"python": platform.python_version(),
                                   "platform": platform.platform(),
                                   "cpu_count": os.cpu_count()},
                       "figures": figures}, f, indent=1, sort_keys=True)
            f.write("\n")
        print(f"wrote {out}")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None,
                    help="JSON results (default benchmarks/results/speed.json; with --compare: "
                         "none unless given)")
    ap.add_argument("--repeat", type=int, default=11, help="cold calls per planner/count figure")
    ap.add_argument("--sweep-repeat", type=int, default=3, help="sweeps per throughput figure")
    ap.add_argument("--ctrl-c", type=int, default=0, help="Ctrl-C trials (0: none)")
    ap.add_argument("--quick", action="store_true", help="fewer repeats, no subprocess figures "
                    "(with --compare: 1 round, 3 calls per plan and count figure, counts stopped at 5 s)")
    ap.add_argument("--compare", metavar="REF", default=None,
                    help="measure the current tree against commit REF, alternately (see above)")
    ap.add_argument("--rounds", type=int, default=None,
                    help="with --compare: rounds of measurements (default 5, --quick 1); "
                         "without: cold calls per planner/count figure (as --repeat)")
    ap.add_argument("--only", default=None, metavar="GROUPS",
                    help=f"these groups only, comma-separated ({','.join(GROUPS)}; without "
                         "--compare, import is the command-line figures)")
    args = ap.parse_args(argv)
    groups = tuple(g.strip() for g in (args.only or ",".join(GROUPS)).split(",") if g.strip())
    bad = [g for g in groups if g not in GROUPS]
    if bad or not groups:
        print(f"bench_speed: --only must name groups among {', '.join(GROUPS)}, got "
              f"{args.only!r}", file=sys.stderr)
        return 2
    if args.rounds is not None and args.rounds < 1:
        print(f"bench_speed: --rounds must be at least 1, got {args.rounds}", file=sys.stderr)
        return 2
    if args.compare is not None:
        rounds = args.rounds if args.rounds is not None else (1 if args.quick else 5)
        try:
            return compare(args.compare, rounds, args.quick, args.out, groups)
        except CompareError as e:
            print(f"bench_speed: --compare {args.compare}: {e}", file=sys.stderr)
            return 2
    import attnio

    # a run of some groups only writes its JSON where --out says (the default file holds all)
    out = args.out or (None if args.only else os.path.join(HERE, "results", "speed.json"))
    rep = args.rounds if args.rounds is not None else (3 if args.quick else args.repeat)
    t0 = time.perf_counter()
    with open("/proc/loadavg") if os.path.exists("/proc/loadavg") else open(os.devnull) as f:
        load = f.read().split()[:3]
    res: dict = {"machine": {"python": platform.python_version(), "platform": platform.platform(),
                             "cpu_count": os.cpu_count(), "attnio": attnio.__version__,
                             "load_average_at_start": load}}
    if "plan" in groups:
        res["planner"] = planner(rep)
    if "counts" in groups:
        res["count"] = counts(rep)
    if "import" in groups and not args.quick:
        res["commands"] = commands(5)
    if "sweep" in groups:
        res["sweep"] = sweeps(1 if args.quick else args.sweep_repeat)
    if args.ctrl_c:
        res["ctrl_c"] = ctrl_c(args.ctrl_c)
    res["seconds"] = time.perf_counter() - t0
    if out is None:
        print(f"({res['seconds']:.0f} s; no JSON written: --only without --out)")
        return 0
    with open(out, "w") as f:
        json.dump(res, f, indent=1, sort_keys=True)
        f.write("\n")
    print(f"wrote {out} ({res['seconds']:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
