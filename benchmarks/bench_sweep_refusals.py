"""Peak memory and time of the sweep's refusals (issue 24's catalogue): ``python
benchmarks/bench_sweep_refusals.py``.

Each case runs ``python -m attnio sweep ...`` in a fresh process under ``/usr/bin/time -v`` and
records the exit code, the stderr lines, the peak resident memory (maximum RSS) and the wall
time.  The issue asks for exit 2, one line naming the flag or the file, and a peak under 500 MB
(``sweep --config /dev/zero`` reached 2.7 GB before).  Writes
``benchmarks/results/sweep_refusals.json``.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
BASE = ["--quiet", "--jobs", "1"]


def cases(tmp: Path) -> list[tuple[str, list[str], str]]:
    """(name, sweep arguments, the flag the line must name)."""
    (tmp / "lists.toml").write_text('N = [[64, 128]]\nd = 8\nM = 256\nalgo = "flash2"\n')
    (tmp / "grid.toml").write_text("grid = [[[1]]]\n")
    (tmp / "latin1.toml").write_bytes("N = 64\n# caf\xe9\n".encode("latin-1"))
    os.symlink("nowhere/r.sqlite", tmp / "dangling.sqlite")
    db = str(tmp / "r.sqlite")
    return [
        ("--config /dev/zero", ["--db", db, "--config", "/dev/zero"], "--config"),
        ("--config a list of lists", ["--db", db, "--config", str(tmp / "lists.toml")], "N"),
        ("--config [[grid]] of lists", ["--db", db, "--config", str(tmp / "grid.toml")],
         "--config"),
        ("--config latin-1", ["--db", db, "--config", str(tmp / "latin1.toml")], "--config"),
        ("--db dangling symlink", ["--db", str(tmp / "dangling.sqlite"), "--N", "64"], "--db"),
        ("--jobs 100000", ["--db", db, "--N", "64", "--jobs", "100000"], "--jobs"),
        ("--N 2**51", ["--db", db, "--N", str(2**51)], "--N"),
        ("--heads 4 --kv-heads 3", ["--db", db, "--N", "64", "--heads", "4", "--kv-heads", "3"],
         "--kv-heads"),
        ("--window without a causal mask", ["--db", db, "--N", "64", "--window", "512"],
         "--window"),
        ("--N 0", ["--db", db, "--N", "0"], "--N"),
    ]


def measure(argv: list[str]) -> dict:
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    p = subprocess.run(["/usr/bin/time", "-v", sys.executable, "-m", "attnio", "sweep", *BASE,
                        *argv], env=env, capture_output=True, text=True, timeout=300)
    lines = [ln for ln in p.stderr.splitlines() if ln.startswith("attnio")]
    rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", p.stderr).group(1))
    wall = re.search(r"Elapsed \(wall clock\) time.*: (\S+)", p.stderr).group(1)
    status = int(re.search(r"Exit status: (\d+)", p.stderr).group(1))
    return {"exit_code": status, "lines": lines, "peak_MB": rss / 1024, "wall": wall}


def main() -> int:
    out = {}
    with tempfile.TemporaryDirectory() as d:
        for name, argv, flag in cases(Path(d)):
            r = measure(argv)
            r["ok"] = (r["exit_code"] == 2 and len(r["lines"]) == 1 and flag in r["lines"][0]
                       and r["peak_MB"] < 500)
            out[name] = r
            print(f"{name:34s} exit {r['exit_code']}  peak {r['peak_MB']:6.1f} MB  {r['wall']:>8s}"
                  f"  {'ok ' if r['ok'] else 'BAD'}  {r['lines'][0] if r['lines'] else ''}")
    path = HERE / "results" / "sweep_refusals.json"
    path.write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")
    print(f"wrote {path}: {sum(r['ok'] for r in out.values())} of {len(out)} cases ok")
    return 0 if all(r["ok"] for r in out.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
