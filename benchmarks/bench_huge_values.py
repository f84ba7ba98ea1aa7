"""V near the largest float (issue 24's catalogue): ``python benchmarks/bench_huge_values.py``.

Finite inputs whose V entries are near 1e307 gave an infinite output with exit 0 for the flash
schedules (their unnormalised accumulator overflowed while the reference is finite).  Each case
runs ``python -m attnio run ALGO --inputs FILE.npz`` in a fresh process under ``/usr/bin/time -v``
and records the exit code, the printed error against the float64 reference (relative to max |V|),
the stderr lines and the peak resident memory.  The exact schedules must exit 0 with a finite
output matching the reference; approx_poly, whose signed features cannot be kept within max |V|,
must refuse in one line naming V (exit 2); every case under 500 MB.  Writes
``benchmarks/results/huge_values.json``.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


def inputs(tmp: Path) -> tuple[Path, float]:
    """Q, K in [-1/2, 1/2] (approx_poly's entry bound holds) and V of alternating sign near
    1e307 (a column at 1.5e307); returns the file and max |V|."""
    rng = np.random.default_rng(24)
    Q, K = rng.uniform(-0.5, 0.5, (256, 8)), rng.uniform(-0.5, 0.5, (256, 8))
    V = np.full((256, 8), 1e307)
    V[::2] *= -1
    V[:, 0] = 1.5e307
    path = tmp / "huge_v.npz"
    np.savez(path, Q=Q, K=K, V=V)
    return path, float(np.abs(V).max())


CASES = [  # (algorithm, extra flags, expected exit code)
    ("flash2", ["--M", "512"], 0),
    ("flash1", ["--M", "512"], 0),
    ("flash_decoding", ["--M", "4096", "--tiling", '{"Br": 16, "Bc": 16, "splits": 4}'], 0),
    ("standard", ["--M", "512"], 0),
    ("square_tiling", ["--M", "512"], 0),
    ("approx_poly", ["--M", "4000"], 2),
]


def measure(argv: list[str]) -> dict:
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"), ATTNIO_PROGRESS="0")
    p = subprocess.run(["/usr/bin/time", "-v", sys.executable, "-m", "attnio", "run", *argv],
                       env=env, capture_output=True, text=True, timeout=300)
    lines = [ln for ln in p.stderr.splitlines() if ln.startswith("attnio")]
    rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", p.stderr).group(1))
    status = int(re.search(r"Exit status: (\d+)", p.stderr).group(1))
    err = re.search(r"max \|O - reference\| = (\S+)", p.stdout)
    return {"exit_code": status, "lines": lines, "peak_MB": rss / 1024,
            "max_abs_err": None if err is None else float(err.group(1))}


def main() -> int:
    out = {}
    with tempfile.TemporaryDirectory() as d:
        path, vmax = inputs(Path(d))
        for alg, flags, want in CASES:
            r = measure([alg, "--inputs", str(path), *flags])
            rel = None if r["max_abs_err"] is None else r["max_abs_err"] / vmax
            r["max_err_relative_to_max_V"] = rel
            if want == 0:
                r["ok"] = (r["exit_code"] == 0 and rel is not None and rel < 1e-12
                           and r["peak_MB"] < 500)
            else:
                r["ok"] = (r["exit_code"] == want and len(r["lines"]) == 1
                           and "V:" in r["lines"][0] and r["peak_MB"] < 500)
            out[alg] = r
            what = f"rel. error {rel:.2e}" if rel is not None else (r["lines"] or [""])[0][:70]
            print(f"{alg:15s} exit {r['exit_code']}  peak {r['peak_MB']:6.1f} MB  "
                  f"{'ok ' if r['ok'] else 'BAD'}  {what}")
    res = HERE / "results" / "huge_values.json"
    res.write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")
    print(f"wrote {res}: {sum(r['ok'] for r in out.values())} of {len(out)} cases ok")
    return 0 if all(r["ok"] for r in out.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
