"""The small-cache regime, measured: square tiling vs FlashAttention, matmul vs COSMA's bound.

Counts only (the simulator in count mode, bulk counting); no timings.  Prints every figure quoted
in docs/small_cache.md; with ``--write`` it regenerates the crossover tables in
docs/small_cache.md and in the docstring of ``attnio.algorithms.square_tiling`` (between their
``crossover-table`` markers; tests/experiments/test_crossover.py fails when they drift from a fresh run).

    python benchmarks/bench_small_cache.py            # print
    python benchmarks/bench_small_cache.py --write    # print and regenerate the tables
"""

from __future__ import annotations

import argparse
import pathlib
import re
import sys

import numpy as np

import attnio
from attnio.blocks.matmul import run_matmul
from attnio.experiments import crossover as st

ROOT = pathlib.Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "small_cache.md"
MOD = ROOT / "src" / "attnio" / "algorithms" / "square_tiling.py"


def replace_block(text: str, start: str, end: str, body: str) -> str:
    pat = re.compile(re.escape(start) + r".*?" + re.escape(end), re.S)
    if not pat.search(text):
        raise SystemExit(f"markers {start!r} .. {end!r} not found")
    return pat.sub(lambda _m: start + "\n" + body + "\n" + end, text, count=1)


def docstring_block(report: str) -> str:
    return "\n::\n\n" + "\n".join(("    " + ln) if ln else "" for ln in report.splitlines()) + "\n"


def doc_block(report: str) -> str:
    return "```text\n" + report + "\n```"


def slope(xs, ys) -> float:
    return float(np.polyfit(np.log(xs), np.log(ys), 1)[0])


def total(name, N, d, M, tiling=None) -> int:
    return attnio.run(name, shape=(N, d), M=M, mode="count", tiling=tiling).io.total


def extras() -> str:
    out = ["paper's tiles (B = ⌊√(M/4)⌋, stable=False) vs auto tiles, and the stable variant's cost",
           "N     d    M        paper/auto  literal-auto/stable-auto"]
    for N, d in ((4096, 128), (4096, 256)):
        for f in (1 / 16, 1 / 4, 1):
            M = round(f * d * d)
            auto = total("square_tiling", N, d, M)
            paper = total("square_tiling", N, d, M, "paper")
            lit = total("square_tiling", N, d, M, {"stable": False})
            out.append(f"{N:<5d} {d:<4d} {M:<8d} {paper / auto:<11.3f} {lit / auto:.4f}")
    d = 256
    Ms = [m for m in (round(64 * 2 ** (k / 2)) for k in range(17)) if m <= d * d // 4]
    for N in (1024, 4096):
        ys = [total("square_tiling", N, d, M) for M in Ms]
        keep = [(m, y) for m, y in zip(Ms, ys) if 4 * N * d < 0.1 * y]
        out.append(f"slope of square tiling's I/O in M, N={N}, d=256, M in [64, d²/4]: "
                   f"{slope(*zip(*keep)):.3f} ({len(keep)} points)")
    N = 2 ** 18
    Ms = [4 * d * d * 2 ** k for k in range(6)]
    ys = [total("flash2", N, d, M) for M in Ms]
    keep = [(m, y) for m, y in zip(Ms, ys) if 4 * N * d < 0.1 * y]
    out.append(f"slope of flash2's I/O in M, N=2^18, d=256, M >= 4d²: {slope(*zip(*keep)):.3f} "
               f"({len(keep)} points)")
    out.append("matmul: measured / COSMA bound 2mnk/√M + mn")
    out.append("    m×k×n            M        auto    square  outer")
    for shp, M in (((512, 512, 512), 64), ((512, 512, 512), 1024), ((512, 512, 512), 16384),
                   ((1000, 300, 700), 4096), ((4096, 64, 4096), 4096),
                   ((4096, 4096, 256), 16384)):
        r = [run_matmul(shape=shp, M=M, tiling=t).ratio for t in ("auto", "square", "outer")]
        out.append(f"    {'×'.join(map(str, shp)):<16s} {M:<8d} {r[0]:<7.3f} {r[1]:<7.3f} {r[2]:.3f}")
    return "\n".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help="regenerate the tables in docs and code")
    args = ap.parse_args(argv)
    report = st.crossover_report()
    print(report)
    print()
    print(extras())
    if args.write:
        DOC.write_text(replace_block(DOC.read_text(), "<!-- crossover-table-start -->",
                                     "<!-- crossover-table-end -->", doc_block(report)))
        MOD.write_text(replace_block(MOD.read_text(), ".. crossover-table-start",
                                     ".. crossover-table-end", docstring_block(report)))
        print(f"\nwrote {DOC.relative_to(ROOT)} and {MOD.relative_to(ROOT)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
