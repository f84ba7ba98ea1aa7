"""Block-sparse attention, measured: flash2's forward and backward words against the density s.

A random layout of density s (blocks of b x b, b the flash2 tile side M/(4d) rounded down to a
power of two, as ``attnio run --density`` defaults), s from 1/64 to 1; each pass's least-I/O
tiling by closed form (equal to the simulated count: tests/algorithms/test_block_sparse.py; one point per
pass is simulated here in count mode).  FlashAttention's block-sparse algorithm moves
Θ(Nd + N²d²s/M) words: the fitted slope of log(words) against log(s) over the densities where
the read-once floor (forward 4Nd: Q, K, V read once, O written once; backward 8Nd: Q, K, V, O,
dO read once, dQ, dK, dV written once) is under 10% of the total should be 1 ± 0.05.  Counts only, no timings.

    python benchmarks/bench_sparse.py            # print, write benchmarks/results/sparse.json
    python benchmarks/bench_sparse.py --write    # ... and regenerate the table in docs/sparse.md
"""

from __future__ import annotations

import argparse
import json
import pathlib
import re

import numpy as np

import attnio
from attnio.algorithms import get, get_backward, mapper
from attnio.core.blockmask import BlockMask
from attnio.core.workload import Shape
from attnio.runner import BackwardPass

ROOT = pathlib.Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "sparse.md"
OUT = ROOT / "benchmarks" / "results" / "sparse.json"
FA2 = get("flash2")
FA2B = get_backward("flash2_backward")

CASES = ((8192, 64, 16384), (8192, 128, 65536))
DENSITIES = tuple(2.0 ** (-k / 2) for k in range(12, -1, -1))  # 1/64 to 1, half octaves


def block_side(d: int, M: int, N: int) -> int:
    side = max(1, M // (4 * d))
    return min(1 << (side.bit_length() - 1), N)


def aligned(cands, shape, M, b, fields, predict):
    """The least-I/O candidate whose tile sides divide the block side b (tiles hold whole
    blocks: FlashAttention's block-sparse algorithm), scored on ``shape``."""
    ok = [t for t in cands if all(b % getattr(t, f) == 0 for f in fields)
          and (FA2 if hasattr(t, "group") else FA2B).footprint(shape, t) <= M]
    return min(ok, key=lambda t: predict(shape, t).total)


def measure() -> dict:
    out = []
    for N, d, M in CASES:
        b = block_side(d, M, N)
        floor = 4 * N * d  # forward: Q, K, V read once, O written once
        floor_b = 8 * N * d  # backward: Q, K, V, O, dO read once, dQ, dK, dV written once
        rows = []
        full = Shape(N, N, d, block_mask=BlockMask.random(N, N, b, density=1.0))
        ft = aligned(FA2.candidate_tilings(full, M), full, M, b, ("Br", "Bc"),
                     lambda s, t: FA2.cost(s, t).io)
        bt = aligned(FA2B.candidate_tilings(full, M), full, M, b, ("Br", "Bc"),
                     lambda s, t: FA2B.cost(s, t).io)
        for s in DENSITIES:
            bm = BlockMask.random(N, N, b, density=s, seed=0)
            shape = Shape(N, N, d, block_mask=bm)
            fwd = FA2.cost(shape, ft).io.total
            bwd = FA2B.cost(shape, bt).io.total
            best = mapper.search(FA2, shape, M, FA2.candidate_tilings(shape, M))
            rows.append({"s": bm.density, "forward": fwd, "forward_tiling": str(ft),
                         "backward": bwd, "backward_tiling": str(bt),
                         "planner_forward": best.predicted.total,
                         "planner_forward_tiling": str(best.tiling), "floor": floor,
                         "floor_share": floor / fwd, "floor_share_backward": floor_b / bwd})
        # one density simulated: the closed forms are the counts
        mid = Shape(N, N, d, block_mask=BlockMask.random(N, N, b, density=0.25, seed=0))
        res = attnio.run("flash2", shape=mid, M=M, mode="count", tiling=ft,
                         backward=BackwardPass(tiling=bt))
        assert res.io.total == FA2.cost(mid, ft, lse=True).io.total
        assert res.backward_io.total == FA2B.cost(mid, bt).io.total
        fit = [r for r in rows if r["floor_share"] < 0.10]
        fit_b = [r for r in rows if r["floor_share_backward"] < 0.10]
        slope = (float(np.polyfit(np.log([r["s"] for r in fit]),
                                  np.log([r["forward"] for r in fit]), 1)[0])
                 if len(fit) > 1 else None)
        slope_b = (float(np.polyfit(np.log([r["s"] for r in fit_b]),
                                    np.log([r["backward"] for r in fit_b]), 1)[0])
                   if len(fit_b) > 1 else None)
        out.append({"N": N, "d": d, "M": M, "block": b, "rows": rows,
                    "slope_forward": slope, "slope_backward": slope_b,
                    "fit_points_forward": len(fit), "fit_points_backward": len(fit_b)})
    return {"cases": out}


def table(res: dict) -> str:
    lines = []
    for c in res["cases"]:
        r0 = c["rows"][0]
        lines += [f"N = {c['N']}, d = {c['d']}, M = {c['M']:,}, blocks {c['block']}x{c['block']};"
                  f" tiles aligned with the blocks: forward {r0['forward_tiling']}, backward "
                  f"{r0['backward_tiling']}",
                  "", "| s | forward words | floor share | backward words | floor share | "
                  "planner's forward (any tiling) |", "|---|---|---|---|---|---|"]
        for r in c["rows"]:
            lines.append(f"| {r['s']:.4g} | {r['forward']:,} | {100 * r['floor_share']:.1f}% | "
                         f"{r['backward']:,} | {100 * r['floor_share_backward']:.1f}% | "
                         f"{r['planner_forward']:,} "
                         f"({r['planner_forward_tiling']}) |")
        sf = "n/a" if c["slope_forward"] is None else f"{c['slope_forward']:.3f}"
        sb = "n/a" if c["slope_backward"] is None else f"{c['slope_backward']:.3f}"
        lines += ["", f"Slope in s where the floor is under 10%: forward {sf} "
                      f"({c['fit_points_forward']} densities), backward {sb} "
                      f"({c['fit_points_backward']} densities).", ""]
    return "\n".join(lines).rstrip()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--write", action="store_true", help="regenerate the table in docs/sparse.md")
    args = ap.parse_args()
    res = measure()
    report = table(res)
    print(report)
    OUT.write_text(json.dumps(res, indent=1) + "\n")
    if args.write:
        text = DOC.read_text()
        start, end = "<!-- sparse-table -->", "<!-- /sparse-table -->"
        pat = re.compile(re.escape(start) + r".*?" + re.escape(end), re.S)
        if not pat.search(text):
            raise SystemExit("markers not found in docs/sparse.md")
        DOC.write_text(pat.sub(lambda _m: start + "\n" + report + "\n" + end, text, count=1))


if __name__ == "__main__":
    main()
