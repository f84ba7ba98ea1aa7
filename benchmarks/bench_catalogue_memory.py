"""Peak memory of issue 24's run/plan/bound cases: ``python benchmarks/bench_catalogue_memory.py``.

Issue 24 asks every case of its catalogue to be answered in one line naming the flag or
argument, with exit code 2 (or, for the cases that were hangs and tracebacks on valid sizes,
exit 0 with exact counts), and a peak memory under 500 MB.  Each case runs in a fresh process
under ``/usr/bin/time -v`` (Python's start-up and imports included); the figure is its
"Maximum resident set size".  Writes ``benchmarks/results/catalogue_memory.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
LIMIT_MB = 500

API = ("import attnio, numpy as np\n"
       "from attnio import Shape\n"
       "from attnio.blocks.matmul import run_matmul\n")

# (case, argv after `python`, expected exit code)
CASES: list[tuple[str, list[str], int]] = [
    ("--inputs /dev/zero", ["-m", "attnio", "run", "flash2", "--inputs", "/dev/zero", "--M",
                            "512"], 2),
    ("--inputs /dev/urandom", ["-m", "attnio", "run", "flash2", "--inputs", "/dev/urandom",
                               "--M", "512"], 2),
    ("plan --heads 2**40 --kv-heads 1", ["-m", "attnio", "plan", "--N", "64", "--d", "8", "--M",
                                         "1000", "--heads", "1099511627776", "--kv-heads", "1"],
     0),
    ("run --heads 2**30 --kv-heads 1 --count-only",
     ["-m", "attnio", "run", "flash2", "--N", "64", "--d", "8", "--M", "1000", "--heads",
      "1073741824", "--kv-heads", "1", "--count-only"], 0),
    ("bound --q 2**61-1", ["-m", "attnio", "bound", "--N", "4096", "--d", "64", "--M", "16384",
                           "--q", "2305843009213693951"], 0),
    ("run --M 2**40 (N=64)", ["-m", "attnio", "run", "flash2", "--N", "64", "--d", "8", "--M",
                              "1099511627776"], 0),
    ("run N=2**20 --density 0.1 --force", ["-m", "attnio", "run", "flash2", "--N", "1048576",
                                           "--d", "64", "--M", "65536", "--count-only",
                                           "--density", "0.1", "--force"], 2),
    ("run matmul --m 2**62", ["-m", "attnio", "run", "matmul", "--m", str(2**62), "--k", "4",
                              "--n", "4", "--M", "1000", "--count-only"], 2),
    ("run matmul 1e10^3 --count-only", ["-m", "attnio", "run", "matmul", "--m", "10000000000",
                                        "--k", "10000000000", "--n", "10000000000", "--M",
                                        "1048576", "--count-only"], 0),
    ("API run Shape(2**20, ..., batch=heads=2**20)",
     ["-c", API + "attnio.run('flash2', shape=Shape(2**20, 2**20, 128, batch=2**20, "
      "heads=2**20), M=65536)"], 0),
    ("API run_matmul((2**40,)*3)", ["-c", API + "run_matmul(shape=(2**40,)*3, M=2**20)"], 0),
    ("--inputs int Q", ["-m", "attnio", "run", "flash2", "--inputs", "{intQ}", "--M", "100"], 2),
    ("--inputs bad dO", ["-m", "attnio", "run", "flash2", "--inputs", "{badDO}", "--M", "100",
                         "--backward"], 2),
    ("trace approx_poly", ["-m", "attnio", "trace", "approx_poly", "--N", "64", "--d", "8",
                           "--M", "20000"], 2),
    ("verify approx_poly", ["-m", "attnio", "verify", "approx_poly", "--N", "64", "--d", "8",
                            "--M", "20000"], 2),
    ("trace --out, file too large", ["-c", "import resource, sys; resource.setrlimit("
                                     "resource.RLIMIT_FSIZE, (4096, 4096)); from attnio.cli "
                                     "import main; sys.exit(main(['trace', 'flash2', '--N', "
                                     "'64', '--d', '16', '--out', '{out}']))"], 2),
    ("run flash1 --density 0.5", ["-m", "attnio", "run", "flash1", "--density", "0.5"], 2),
    ("--M-bytes 2**70", ["-m", "attnio", "run", "flash2", "--M-bytes", str(2**70), "--dtype",
                         "fp16"], 2),
    ("API budget_s='5'", ["-c", API + "attnio.run('flash2', shape=(8, 4), M=100, "
                          "limits=attnio.Limits(budget_s='5'))"], 1),
    ("API scale='0.5'", ["-c", API + "attnio.run('flash2', shape=(8, 4), M=100, scale='0.5')"],
     1),
    ("API force='no'", ["-c", API + "attnio.Limits(force='no')"], 1),
    ("API causal=np.bool_(True)", ["-c", API + "attnio.run('flash2', shape=(8, 4), M=100, "
                                   "causal=np.bool_(True))"], 0),
]


def _files(folder: Path) -> dict[str, str]:
    import numpy as np

    rng = np.random.default_rng(0)
    Q, K, V = (rng.standard_normal((8, 4)) for _ in range(3))
    np.savez(folder / "intQ.npz", Q=Q.astype(np.int64), K=K, V=V)
    np.savez(folder / "badDO.npz", Q=Q, K=K, V=V, dO=np.ones((3, 4)))
    return {"intQ": str(folder / "intQ.npz"), "badDO": str(folder / "badDO.npz"),
            "out": str(folder / "t.npz")}


def measure(argv: list[str], cwd: Path) -> dict:
    env = {**os.environ, "ATTNIO_PROGRESS": "0", "PYTHONPATH": str(ROOT / "src")}
    p = subprocess.run(["/usr/bin/time", "-v", sys.executable, *argv], capture_output=True,
                       text=True, cwd=cwd, env=env, timeout=300)
    rss = re.search(r"Maximum resident set size \(kbytes\): (\d+)", p.stderr)
    wall = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): ([\d:.]+)", p.stderr)
    stderr = p.stderr[:p.stderr.find("\tCommand being timed")]  # the program's own lines
    own = [ln for ln in stderr.splitlines() if ln and not ln.startswith("Command exited")]
    errs = [ln for ln in own if "Error" in ln or "error:" in ln]
    return {"exit": p.returncode, "peak_mb": int(rss.group(1)) / 1024 if rss else None,
            "wall": wall.group(1) if wall else None, "stderr_lines": len(own),
            "message": (errs or own or [""])[-1]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(HERE / "results" / "catalogue_memory.json"))
    args = ap.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        paths = _files(folder)
        for case, cmd, want in CASES:
            cmd = [a.format(**paths) if a.startswith("{") or "{out}" in a else a for a in cmd]
            r = measure(cmd, folder)
            r.update(case=case, expected_exit=want,
                     ok=r["exit"] == want and (r["peak_mb"] or 1e9) < LIMIT_MB
                     and (want != 2 or r["stderr_lines"] == 1))
            rows.append(r)
            print(f"{case:48s} exit {r['exit']} (want {want})  peak {r['peak_mb']:7.1f} MB  "
                  f"{'ok' if r['ok'] else 'FAIL'}  {r['message'][:90]}")
        left = sorted(p.name for p in folder.iterdir())
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"limit_mb": LIMIT_MB, "cases": rows,
                                          "files_left": left}, indent=1) + "\n")
    print(f"files left in the folder: {left}")
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
