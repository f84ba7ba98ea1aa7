"""How long ``attnio report`` takes on a small database: ``python benchmarks/bench_report.py``.

The catalogue of issue 24 measured 15–19 s for ``attnio report`` on a 48-row database, without
progress.  This builds the same kind of database (flash2 and standard, N = 256…2048, d = 16 and
32, M = 1024, 4096, 16384: 48 rows) and times, in one process, best of 3:

* ``before``: the report as it was before the report package (``src/attnio/experiments/report.py``
  at commit ae32663, read with ``git show``; skipped when git or the commit is unavailable), with
  its default files (PNG and SVG);
* ``now``: :func:`attnio.experiments.report.build_report` with its defaults (PNG and PDF), and
  with PNG only.

Each variant draws the figures its own planner chooses, so the time per figure is reported too.
Writes ``benchmarks/results/report.json``.
"""

from __future__ import annotations

import importlib.util
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
BEFORE = "ae32663"


def _old_report():
    """The report module before the split, loaded as attnio.experiments._report_before."""
    try:
        src = subprocess.run(["git", "-C", ROOT, "show", f"{BEFORE}:src/attnio/experiments/report.py"],
                             capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    src = src.replace("_alg.names(None)", "_alg.names()")  # the registry's call since then
    path = os.path.join(tempfile.mkdtemp(), "_report_before.py")
    with open(path, "w") as f:
        f.write(src)
    spec = importlib.util.spec_from_file_location("attnio.experiments._report_before", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def _best(fn, rounds: int = 3) -> tuple[float, int]:
    best, n = float("inf"), 0
    for _ in range(rounds):
        out = tempfile.mkdtemp()
        t0 = time.perf_counter()
        n = fn(out)
        best = min(best, time.perf_counter() - t0)
        shutil.rmtree(out)
    return best, n


def main() -> None:
    from attnio.experiments.report import ReportOptions, build_report
    from attnio.experiments.sweep import Grid, parse_values, run_sweep

    tmp = tempfile.mkdtemp()
    db = os.path.join(tmp, "r48.sqlite")
    run_sweep(Grid(N=parse_values("N", "256:2048:x2"), d=(16, 32), M=(1024, 4096, 16384),
                   algorithms=("flash2", "standard")), db, jobs=1, progress=False)
    results = {}
    old = _old_report()
    if old is not None:
        t, n = _best(lambda out: len(old.build_report(db, out).figures))
        results["before (png+svg)"] = {"seconds": t, "figures": n}
    for name, fmts in (("now (png+pdf)", ("png", "pdf")), ("now (png)", ("png",))):
        t, n = _best(lambda out, fmts=fmts: len(build_report(
            db, out, options=ReportOptions(fmts)).figures))
        results[name] = {"seconds": t, "figures": n}
    for name, r in results.items():
        r["seconds_per_figure"] = r["seconds"] / max(1, r["figures"])
        print(f"{name:18s} {r['seconds']:6.2f} s  {r['figures']:3d} figures  "
              f"{r['seconds_per_figure']:.3f} s/figure")
    if "before (png+svg)" in results:
        b = results["before (png+svg)"]["seconds_per_figure"]
        for name in ("now (png+pdf)", "now (png)"):
            results[name]["per_figure_vs_before"] = results[name]["seconds_per_figure"] / b
            print(f"{name}: {results[name]['per_figure_vs_before']:.2f}x the time per figure "
                  "of before")
    os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
    with open(os.path.join(HERE, "results", "report.json"), "w") as f:
        json.dump({"machine": {"python": platform.python_version(), "platform": platform.platform(),
                               "cpus": os.cpu_count(), "load": os.getloadavg()[0]},
                   "rows": 48, "results": results}, f, indent=1)
        f.write("\n")
    shutil.rmtree(tmp)


if __name__ == "__main__":
    main()
