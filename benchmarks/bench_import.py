"""How long ``import attnio`` takes: ``python -X importtime -c "import attnio"``, cumulative.

Run:  python benchmarks/bench_import.py  [--repeat 15] [--out benchmarks/results/import.json]

Target (issue 15): at most 0.3 s cumulative.  Each run is a fresh interpreter; the figure is the
cumulative microseconds of the top-level ``attnio`` entry of ``-X importtime`` (every module it
imports, numpy included, and nothing of the interpreter's own start-up), with bytecode cached as
in an installed package.  Reported: best and
median of the runs, numpy's share (its own cumulative entry), attnio's own modules, the
slowest attnio modules (self time, median), and which optional packages were loaded (none
should be: the test suite checks that, this only records it).  Nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.join(os.path.dirname(HERE), "src")
LINE = re.compile(r"import time:\s+(\d+)\s+\|\s+(\d+)\s+\|(\s*)(\S+)")
OPTIONAL = ("matplotlib", "torch", "distributed", "dask", "ortools", "cachesim", "pandas",
            "pyarrow", "rich", "sqlite3")


def one_run(pycache: str) -> dict:
    """One fresh ``import attnio`` under -X importtime: the parsed entries.

    Bytecode is cached as in an installed package (a first run fills ``pycache``, outside the
    source tree), so the figure is the import itself, not compiling it.
    """
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (SRC, env.get("PYTHONPATH")) if p)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = pycache
    code = "import attnio, sys; print(attnio.__file__); print(' '.join(sys.modules))"
    proc = subprocess.run([sys.executable, "-X", "importtime", "-c", code], env=env,
                          capture_output=True, text=True, check=True)
    entries = []
    for line in proc.stderr.splitlines():
        m = LINE.match(line)
        if m:
            entries.append((m[4], int(m[1]), int(m[2]), len(m[3])))
    top = {name: cum for name, _, cum, depth in entries if depth == 1}
    attnio_self = {name: own for name, own, _, _ in entries if name.startswith("attnio")}
    out, mods = proc.stdout.splitlines()[:2]
    return {"cumulative_us": top["attnio"], "numpy_us": _numpy(entries),
            "attnio_self_us": attnio_self, "file": out,
            "loaded_optional": sorted({m.split(".")[0] for m in mods.split()} & set(OPTIONAL))}


def _numpy(entries) -> int:
    """numpy's cumulative time, wherever in the tree attnio first imported it."""
    return next((cum for name, _, cum, _ in entries if name == "numpy"), 0)


def machine() -> dict:
    import numpy as np

    return {"python": platform.python_version(), "numpy": np.__version__,
            "platform": platform.platform(), "cpus": os.cpu_count(),
            "load_average": os.getloadavg() if hasattr(os, "getloadavg") else None}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=15, help="fresh interpreters to time")
    ap.add_argument("--out", default=None, help="write the results as JSON here")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="attnio-pycache-") as pycache:
        one_run(pycache)  # compile once (and warm the file system cache)
        runs = [one_run(pycache) for _ in range(args.repeat)]
    cum = [r["cumulative_us"] for r in runs]
    npy = [r["numpy_us"] for r in runs]
    own = [r["cumulative_us"] - r["numpy_us"] for r in runs]
    names = sorted({n for r in runs for n in r["attnio_self_us"]})
    slowest = sorted(((statistics.median(r["attnio_self_us"].get(n, 0) for r in runs), n)
                      for n in names), reverse=True)[:8]
    res = {
        "command": 'python -X importtime -c "import attnio"',
        "attnio": runs[0]["file"],
        "runs": len(runs),
        "bytecode": "cached (PYTHONPYCACHEPREFIX filled by one run before the timed ones)",
        "cumulative_s": {"best": min(cum) / 1e6, "median": statistics.median(cum) / 1e6},
        "numpy_s": {"best": min(npy) / 1e6, "median": statistics.median(npy) / 1e6},
        "attnio_without_numpy_s": {"best": min(own) / 1e6, "median": statistics.median(own) / 1e6},
        "slowest_attnio_modules_self_ms": {n: t / 1e3 for t, n in slowest},
        "loaded_optional": sorted({m for r in runs for m in r["loaded_optional"]}),
        "target_s": 0.3,
        "machine": machine(),
    }
    c = res["cumulative_s"]
    print(f"import attnio: {c['best'] * 1e3:.0f} ms best, {c['median'] * 1e3:.0f} ms median of "
          f"{len(runs)} (numpy {res['numpy_s']['median'] * 1e3:.0f} ms, attnio's own modules "
          f"{res['attnio_without_numpy_s']['median'] * 1e3:.0f} ms; target 300 ms)")
    for n, t in res["slowest_attnio_modules_self_ms"].items():
        print(f"  {t:7.1f} ms  {n}")
    print(f"  optional packages loaded: {res['loaded_optional'] or 'none'}")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(res, f, indent=1)
            f.write("\n")
    return res


if __name__ == "__main__":
    main()
