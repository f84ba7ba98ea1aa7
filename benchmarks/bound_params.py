"""Tabulate the segment parameters of the explicit bounds (src/attnio/bounds/params.py).

Theorems A-E (docs/bounds.md) give a valid lower bound for *every* segment length K and every
multiplier (μ or ν); the bound functions evaluate them at tabulated values so a call is O(1).
This script finds, for each x = d²/M on a grid (log2 x from -16 to 10 in steps of 1/4), the
parameters that maximise the leading constant (the many-segment limit, where the bound is
``K·work/Λ``), by a coarse grid search refined by a pattern search, and writes the table.
Scale invariance (docs/bounds.md §12) makes the optimum a function of x only:
K/M, μ/max(√M, M/d) and ν/√M.

Run:  python benchmarks/bound_params.py [--write] [--check]
  --write  rewrite src/attnio/bounds/params.py
  --check  compare with the stored table: largest relative loss of the leading constant
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "src"))

from attnio.bounds import params  # noqa: E402
from attnio.bounds.backward import backward_accum_lambdas, backward_pooled_lambdas  # noqa: E402
from attnio.bounds.forward import pv_segment_lambdas, qkpv_pooled_lambdas  # noqa: E402
from attnio.bounds.matmul import matmul_potential_lambdas  # noqa: E402

GRID = tuple(j / 4 for j in range(-64, 41))  # log2(d²/M)
OUT = os.path.join(ROOT, "src", "attnio", "bounds", "params.py")


def objective(kind: str, x: float, kappa: float, p: float) -> float:
    """The leading constant K·work/Λ in units of the work's natural scale, M = 1, d = √x."""
    d = math.sqrt(x)
    if kind == "A":
        return kappa / pv_segment_lambdas(1.0, d, kappa, p * max(1.0, 1.0 / d))[0]
    if kind == "D":
        return 3 * kappa / backward_accum_lambdas(1.0, d, kappa, p * max(1.0, 1.0 / d))[0]
    if kind == "B":
        if p >= 2 * d:
            return -math.inf
        return kappa * (2 * d - p) / d / qkpv_pooled_lambdas(1.0, d, kappa, p)[0]
    if kind == "E":
        if 2 * p >= 5 * d:
            return -math.inf
        return kappa * (5 * d - 2 * p) / d / backward_pooled_lambdas(1.0, d, kappa, p)[0]
    if kind == "C":
        return kappa / matmul_potential_lambdas(1.0, kappa, p)[0]
    raise ValueError(kind)


def p_grid(kind: str, x: float) -> list[float]:
    if kind in ("A", "D", "C"):
        return [0.0] + [2 ** (j / 4) for j in range(-40, 13)]
    top = (2.0 if kind == "B" else 2.5) * math.sqrt(x)
    return [t * top * 0.999 for t in [j / 40 for j in range(40)]] + \
        [v for v in (2 ** (j / 4) for j in range(-24, 17)) if v < top]


def optimise(kind: str, x: float) -> tuple[float, float, float]:
    best = (-math.inf, 1.0, 0.0)
    for kj in range(-8, 17):
        kappa = 2 ** (kj / 4)
        for p in p_grid(kind, x):
            v = objective(kind, x, kappa, p)
            if v > best[0]:
                best = (v, kappa, p)
    v, kappa, p = best
    rk, rp = 2 ** 0.25, 2 ** 0.25  # a 5×5 local grid in log scale, shrunk when nothing improves
    while rk > 1.0001:
        moved = False
        for i in (-2, -1, 0, 1, 2):
            for j in (-2, -1, 0, 1, 2):
                k2 = kappa * rk ** (i / 2)
                p2 = p * rp ** (j / 2) if p > 0 else (rp - 1) * 0.05 * max(j, 0)
                w = objective(kind, x, k2, p2)
                if w > v:
                    v, kappa, p, moved = w, k2, p2, True
        if not moved:
            rk, rp = math.sqrt(rk), math.sqrt(rp)
    return v, kappa, p


def table(kind: str) -> list[tuple[float, float, float]]:
    return [optimise(kind, 2.0 ** t) for t in GRID]


def write(tabs: dict[str, list[tuple[float, float, float]]], c: tuple[float, float, float]) -> None:
    def row(r):
        return f"({r[1]:.5g}, {r[2]:.5g})"

    lines = [
        '"""Tabulated segment parameters of the explicit bounds (generated: do not edit).',
        "",
        "Written by ``python benchmarks/bound_params.py --write``.  For x = d²/M on the grid",
        "``GRID_LOG2_X`` (log2 x), each table holds the (K/M, multiplier) that maximise the leading",
        "constant of a theorem of docs/bounds.md: A and D (potential μ / max(√M, M/d)), B and E",
        "(root-piece multiplier ν / √M); C is matmul's (K/M, μ/√M).  Any values give a valid bound:",
        "the table only sets how tight it is.  The comments give the leading constant at each node",
        "(the many-segment limit of bound / (P·d/√M), P the required pairs; informational).",
        '"""',
        "",
        "from __future__ import annotations",
        "",
        f"GRID_LOG2_X: tuple[float, ...] = ({', '.join(f'{t:g}' for t in GRID)},)",
        "",
    ]
    for kind, tab in tabs.items():
        lines.append(f"{kind}: tuple[tuple[float, float], ...] = (")
        for t, r in zip(GRID, tab):
            lines.append(f"    {row(r)},  # log2 x = {t:g}: constant {r[0]:.4f}")
        lines.append(")")
        lines.append("")
    lines.append(f"C: tuple[float, float] = {row(c)}  # constant {c[0]:.4f} (units mnk/√M)")
    lines.append("")
    with open(OUT, "w") as f:
        f.write("\n".join(lines))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true")
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args(argv)
    t0 = time.time()
    if args.check:
        worst = (0.0, None)
        for kind in ("A", "B", "D", "E"):
            stored = getattr(params, kind)
            for t, (kappa, p) in zip(params.GRID_LOG2_X, stored):
                x = 2.0 ** t
                opt = optimise(kind, x)[0]
                got = objective(kind, x, kappa, p)
                loss = 1 - got / opt
                if loss > worst[0]:
                    worst = (loss, (kind, t))
        print(f"largest loss of the leading constant: {worst[0]:.2e} at {worst[1]}")
        return 0
    tabs = {}
    for kind in ("A", "B", "D", "E"):
        tabs[kind] = table(kind)
        print(f"{kind}: done, {time.time() - t0:.0f}s", flush=True)
        for t, r in list(zip(GRID, tabs[kind]))[::8]:
            print(f"   log2 x = {t:6.2f}: constant {r[0]:.4f}  K/M {r[1]:.3f}  p {r[2]:.4g}")
    c = optimise("C", 1.0)
    print(f"C: constant {c[0]:.4f} K/M {c[1]:.3f} mu/sqrt(M) {c[2]:.4g}")
    if args.write:
        write(tabs, c)
        print("wrote", OUT)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
