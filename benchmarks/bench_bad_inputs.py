"""How fast bad input is refused: ``python benchmarks/bench_bad_inputs.py``.

Issue 18 asks every case of the bad-input catalogue to be refused in under 2 s however absurd
the size.  This times every case of ``tests/cli/test_bad_inputs_catalogue.py``:

* in process (``attnio.cli.main(argv)`` / the API call), best of 3, after one warm-up call, so
  the figure is the refusal itself, not Python's start-up;
* as a user sees it, ``python -m attnio ...`` in a fresh process (start-up and imports included),
  once, for every CLI case (``--no-subprocess`` skips this part).

Writes ``benchmarks/results/bad_inputs.json`` with the slowest cases of each kind.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


def load_catalogue():
    spec = importlib.util.spec_from_file_location(
        "catalogue", ROOT / "tests" / "test_bad_inputs_catalogue.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(HERE / "results" / "bad_inputs.json"))
    ap.add_argument("--no-subprocess", action="store_true")
    args = ap.parse_args(argv)
    os.environ["ATTNIO_PROGRESS"] = "0"
    cat = load_catalogue()
    from attnio.cli import main as cli

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        inputs = tmp_path / "inputs"
        inputs.mkdir()
        paths = cat._files(inputs)
        work = tmp_path / "work"
        work.mkdir()
        cwd = os.getcwd()
        os.chdir(work)
        try:
            for argv_, _ in cat.CLI_CASES:
                argv_ = [a.format(**paths) if "{" in a and "}" in a and not a.startswith('{"')
                         and a != "{oops" else a for a in argv_]
                best = float("inf")
                for _ in range(4):  # one warm-up, best of the other 3
                    t0 = time.perf_counter()
                    with contextlib.redirect_stderr(io.StringIO()), \
                            contextlib.redirect_stdout(io.StringIO()):
                        code = cli(argv_)
                    best = min(best, time.perf_counter() - t0)
                wall = None
                if not args.no_subprocess:
                    t0 = time.perf_counter()
                    p = subprocess.run([sys.executable, "-m", "attnio", *argv_],
                                       capture_output=True, text=True,
                                       env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
                    wall = time.perf_counter() - t0
                    assert p.returncode == 2, (argv_, p.stderr)
                rows.append({"kind": "cli", "case": " ".join(argv_)[:120], "exit": code,
                             "in_process_s": best, "fresh_process_s": wall})
            for case, call, _ in cat.API_CASES:
                best = float("inf")
                for _ in range(4):
                    t0 = time.perf_counter()
                    try:
                        call()
                    except Exception:  # noqa: BLE001 - every case raises; timing only
                        pass
                    best = min(best, time.perf_counter() - t0)
                rows.append({"kind": "api", "case": case, "in_process_s": best})
        finally:
            os.chdir(cwd)
    cli_rows = [r for r in rows if r["kind"] == "cli"]
    api_rows = [r for r in rows if r["kind"] == "api"]
    res = {
        "machine": {"python": platform.python_version(), "platform": platform.platform(),
                    "cpus": os.cpu_count(), "note": "shared 2-core machine"},
        "cases": {"cli": len(cli_rows), "api": len(api_rows)},
        "slowest_in_process": sorted(rows, key=lambda r: -r["in_process_s"])[:5],
        "slowest_fresh_process": sorted((r for r in cli_rows if r["fresh_process_s"]),
                                        key=lambda r: -r["fresh_process_s"])[:5],
        "median_fresh_process_s": (sorted(r["fresh_process_s"] for r in cli_rows)[len(cli_rows) // 2]
                                   if not args.no_subprocess else None),
        "rows": rows,
    }
    print(f"{len(cli_rows)} CLI + {len(api_rows)} API cases")
    for r in res["slowest_in_process"]:
        print(f"  in process {r['in_process_s'] * 1e3:8.1f} ms  {r['kind']}: {r['case']}")
    for r in res["slowest_fresh_process"]:
        print(f"  fresh process {r['fresh_process_s']:6.2f} s  {r['case']}")
    if res["median_fresh_process_s"]:
        print(f"  median fresh process {res['median_fresh_process_s']:.2f} s")
    with open(args.out, "w") as f:
        json.dump(res, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
