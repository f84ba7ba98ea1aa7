"""The table of Theorem B′ (docs/bounds.md §6.1): certified per-segment maxima at nodes of x = d²/M.

The nodes: x = 2^(k/16) from 1/4 to 64 (rounded down to 4 decimals; the bound at run time uses the
node with the largest x at or below d²/M), then 128 and 256.  At each node the parameters
(K/M, λ_p/√M, λ_o/√M, ν/√M) are the best, by the many-segment constant κ(2 − ν̂/√x)/Λ̂ (in units
P·d/√M, Λ̂ certified at a search tolerance), of three candidates: :data:`TUNED` interpolated
linearly in log x, and :data:`TUNED` at the two tuned nodes around x.  :data:`TUNED` holds a
Nelder–Mead optimum at every half-octave node (``--tune``: a chain along x, each node warm-started
from the better of its stored entry and the previous node's optimum).  Then Λ, Λ_f, Λ_l are
certified at the chosen parameters with the finest tolerance of :data:`RTOLS` the branch and bound
reaches within :data:`MAX_BOXES` boxes, and stored with that tolerance.  At the nodes of
:data:`RETUNED` (re-tuned harder by benchmarks/levelled_retune.py) its parameters are used
instead, certified at the finest of :data:`FINE_RTOLS` reached within :data:`FINE_MAX_BOXES`.
Any parameters give a valid bound: the search only decides how tight it is; validity rests on
the certification alone.

Run:  python benchmarks/levelled_params.py            # print the table (about 10 minutes)
      python benchmarks/levelled_params.py --write    # and write src/attnio/bounds/levelled.json
      python benchmarks/levelled_params.py --write --nodes 8.0 ...   # recertify only these
                                                      # nodes and replace their rows
      python benchmarks/levelled_params.py --check    # recertify every stored node at its stored
                                                      # parameters and tolerance; exit 1 if any
                                                      # maximum differs (a few minutes)
      python benchmarks/levelled_params.py --check --sample 12   # the two end nodes and 12 others
                                                      # drawn at random (the seed is printed;
                                                      # --seed S repeats a draw)
      python benchmarks/levelled_params.py --tune     # re-tune TUNED (about an hour); prints it
"""

from __future__ import annotations

import argparse
import json
import math
import pathlib
import random
import sys
import time

from scipy.optimize import minimize

from attnio.bounds.levelled import certified_lambda

OUT = pathlib.Path(__file__).resolve().parent.parent / "src" / "attnio" / "bounds" / "levelled.json"
#: The nodes x = d²/M: 2^(1/16) steps from M = 4d² to M = d²/64, rounded down, then 128 and 256.
XS = tuple(math.floor(2.0 ** (k / 16) * 1e4) / 1e4 for k in range(-32, 97)) + (128.0, 256.0)
#: Nelder–Mead optima (K/M, λ_p/√M, λ_o/√M, ν/√M) at the half-octave nodes, from ``--tune``'s
#: search (run as two chains, 4 → 32 and 2.83 → 0.5, and 64 → 45); 0.25 and 256 kept from before
#: (0.25 tuned the same way, 256 from benchmarks/explore_potential_b.py), 0.3535 and 128 not tuned.
TUNED: dict[float, tuple[float, float, float, float]] = {
    0.25: (0.9992, 0.3509, 0.6912, 0.3044), 0.5: (1.2555, 0.3264, 0.6458, 0.3422),
    0.7071: (1.6, 0.3335, 0.655, 0.393), 1.0: (1.9705, 0.3482, 0.6743, 0.4464),
    1.4142: (2.306, 0.3486, 0.681, 0.5071), 2.0: (2.3264, 0.3742, 0.7205, 0.4711),
    2.8284: (2.5793, 0.4287, 0.7674, 0.4017), 4.0: (2.412, 0.4345, 0.6189, 0.222),
    5.6568: (2.5339, 0.4058, 0.5863, 0.234), 8.0: (2.6256, 0.3918, 0.5876, 0.2226),
    11.3137: (2.4317, 0.3462, 0.5719, 0.2363), 16.0: (2.5481, 0.3336, 0.5855, 0.2497),
    22.6274: (2.5409, 0.325, 0.5863, 0.2569), 32.0: (2.6535, 0.3252, 0.5874, 0.2569),
    45.2548: (3.2381, 0.3248, 0.6396, 0.3778), 64.0: (3.4178, 0.3263, 0.6471, 0.387),
    256.0: (2.97, 0.305, 0.61, 0.6),
}
#: The tuned nodes: half octaves from 1/4 to 64 (rounded down to 4 decimals), 128 and 256.
TUNED_XS = tuple(math.floor(2.0 ** (k / 2) * 1e4) / 1e4 for k in range(-4, 13)) + (128.0, 256.0)
#: Nodes re-tuned one by one (benchmarks/levelled_retune.py: several starts, Nelder–Mead with a
#: restart; 7.336 and 6.1688 take a neighbour's optimum or a midpoint, docs/bounds.md §6.1), used
#: at those nodes instead of the three candidates and certified at FINE_RTOLS first.
RETUNED: dict[float, tuple[float, float, float, float]] = {
    0.6209: (1.6032, 0.335, 0.6589, 0.3937), 0.7071: (1.628, 0.3406, 0.657, 0.3922),
    4.7568: (2.4683, 0.4175, 0.6089, 0.2287), 5.1873: (2.4961, 0.3989, 0.6764, 0.2592),
    6.1688: (2.506, 0.3778, 0.6342, 0.269), 7.336: (2.516, 0.3568, 0.592, 0.2788),
    8.0: (2.538, 0.356, 0.5946, 0.2872), 9.9348: (2.4775, 0.3477, 0.6044, 0.2595),
}
#: Nelder–Mead evaluations per tuned node (each a certified maximum at RTOL_SEARCH).
EVALUATIONS = 70
#: The search tolerance, coarser below x = 0.7 (where the branch and bound is slow).
RTOL_SEARCH, RTOL_SEARCH_SMALL_X = 2e-3, 1e-2
#: The certification tolerances tried, finest first, each within MAX_BOXES boxes.
RTOLS = (1e-3, 2e-3, 5e-3, 1e-2, 2e-2, 4e-2)
MAX_BOXES = 20_000_000
#: At the RETUNED nodes: finer tolerances first, within more boxes (``--check`` allows this many
#: everywhere: a branch and bound that finishes gives the same value whatever the limit).
FINE_RTOLS, FINE_MAX_BOXES = (2e-4, 5e-4, *RTOLS), 100_000_000
COMMAND = "python benchmarks/levelled_params.py --write"

Params = tuple[float, float, float, float]
#: Said in the table's comment when RETUNED is not empty.
NOTE = (" The parameters at the nodes of levelled_params.RETUNED were found by "
        "benchmarks/levelled_retune.py (a harder search at those nodes) and certified by this "
        "script, at the finer tolerances FINE_RTOLS first.")


def params_of(v) -> Params:
    return math.exp(v[0]), abs(v[1]), abs(v[1]) + abs(v[2]), abs(v[3])


def constant(x: float, kappa: float, lp: float, lo: float, nu: float, lam: float) -> float:
    return kappa * (2.0 - nu / math.sqrt(x)) / lam


def search_constant(x: float, p: Params) -> float:
    """The many-segment constant at parameters p, Λ̂ certified at the search tolerance (0 where
    the parameters are out of range or the branch and bound gives up)."""
    kappa, lp, lo, nu = p
    if nu >= 1.9 * math.sqrt(x) or kappa <= 0:
        return 0.0
    rtol = RTOL_SEARCH if x >= 0.7 else RTOL_SEARCH_SMALL_X
    for r in (rtol, 2 * rtol, 4 * rtol):  # coarser where the branch and bound needs many boxes
        try:
            lam = certified_lambda(kappa, lp, lo, nu, x, rtol=r, max_boxes=5_000_000)
        except RuntimeError:
            continue
        return constant(x, kappa, lp, lo, nu, lam)
    return 0.0


def tune(x: float, starts: list[Params]) -> Params:
    """A Nelder–Mead optimum of :func:`search_constant` from the best of ``starts``."""
    start = max(starts, key=lambda p: search_constant(x, p))
    kappa, lp, lo, nu = start
    r = minimize(lambda v: -search_constant(x, params_of(v)),
                 [math.log(kappa), lp, lo - lp, nu], method="Nelder-Mead",
                 options={"maxfev": EVALUATIONS, "xatol": 1e-3, "fatol": 1e-5})
    best = tuple(round(float(t), 4) for t in params_of(r.x))
    return best if search_constant(x, best) >= search_constant(x, start) else start  # type: ignore[return-value]


def candidates(x: float) -> list[Params]:
    """TUNED interpolated linearly in log x at x (constant beyond its ends), and TUNED at the
    tuned nodes around x."""
    keys = sorted(TUNED)
    if x <= keys[0]:
        return [TUNED[keys[0]]]
    if x >= keys[-1]:
        return [TUNED[keys[-1]]]
    j = max(k for k in range(len(keys)) if keys[k] <= x)
    if keys[j] == x:
        return [TUNED[x]]
    w = math.log(x / keys[j]) / math.log(keys[j + 1] / keys[j])
    mid = tuple(round(a + w * (b - a), 4) for a, b in zip(TUNED[keys[j]], TUNED[keys[j + 1]]))
    return [mid, TUNED[keys[j]], TUNED[keys[j + 1]]]  # type: ignore[list-item]


def params_at(x: float) -> Params:
    if x in RETUNED:
        return RETUNED[x]
    cands = candidates(x)
    return cands[0] if len(cands) == 1 else max(cands, key=lambda p: search_constant(x, p))


def certified(kappa: float, lp: float, lo: float, nu: float, x: float, kind: str,
              rtols: tuple[float, ...] = RTOLS, max_boxes: int = MAX_BOXES,
              ) -> tuple[float, float]:
    """(maximum, tolerance): the certified maximum at the finest tolerance of ``rtols`` the
    branch and bound reaches within ``max_boxes`` boxes (any tolerance gives a value never below the
    maximum)."""
    for rtol in rtols:
        try:
            return certified_lambda(kappa, lp, lo, nu, x, kind=kind, rtol=rtol,
                                    max_boxes=max_boxes), rtol
        except RuntimeError:
            continue
    raise RuntimeError(f"no certified maximum at x = {x}")


def certify(x: float, kappa: float, lp: float, lo: float, nu: float,
            rtols: tuple[float, ...] = RTOLS, max_boxes: int = MAX_BOXES,
            ) -> tuple[list[float], list[float]]:
    """(row, tolerances): the node's row of the table and the tolerance of each of its maxima."""
    got = [certified(kappa, lp, lo, nu, x, k, rtols, max_boxes) for k in ("mid", "first", "last")]
    return [x, kappa, lp, lo, nu, *(g[0] for g in got)], [g[1] for g in got]


def write_table(rows: list[list[float]], tols: list[list[float]], command: str,
                note: str = "") -> None:
    """Write the table to :data:`OUT` (``command``: how it was made; ``note``: appended to the
    comment, e.g. nodes re-tuned by another driver)."""
    data = {"about": "Theorem B' (docs/bounds.md §6.1): per node x = d^2/M, the parameters "
                     "(K/M, lambda_p/sqrt M, lambda_o/sqrt M, nu/sqrt M) and the certified "
                     "per-segment maxima (Lambda, Lambda_f, Lambda_l) in units M^(3/2), never "
                     "below the true maxima at any d^2/M >= x; rtols: the branch and bound's "
                     "tolerance for each of the three maxima. Do not edit: regenerate." + note,
            "command": command,
            "columns": ["x", "K/M", "lambda_p", "lambda_o", "nu", "Lambda", "Lambda_f",
                        "Lambda_l"],
            "nodes": rows, "rtols": tols}
    OUT.write_text(json.dumps(data, separators=(",", ":")).replace("],[", "],\n[") + "\n",
                   encoding="utf-8")


def check(sample: int | None, seed: int | None, only: list[float] | None = None) -> int:
    data = json.loads(OUT.read_text(encoding="utf-8"))
    rows, tols = data["nodes"], data["rtols"]
    picked = list(range(len(rows))) if only is None else [XS.index(x) for x in only]
    if sample is not None and sample + 2 < len(rows):
        seed = random.randrange(2 ** 32) if seed is None else seed
        picked = [0, *sorted(random.Random(seed).sample(range(1, len(rows) - 1), sample)),
                  len(rows) - 1]
        print(f"checking the end nodes and {sample} drawn with --seed {seed}", flush=True)
    bad = 0
    for i in picked:
        row, tol = rows[i], tols[i]
        # each maximum at its stored tolerance (the branch and bound is deterministic)
        again = [certified(*row[1:5], row[0], kind, (t,), FINE_MAX_BOXES)[0]
                 for kind, t in zip(("mid", "first", "last"), tol)]
        ok = all(math.isclose(a, b, rel_tol=1e-12) for a, b in zip(again, row[5:]))
        bad += not ok
        print(f"x = {row[0]:g}: {'ok' if ok else 'DIFFERS'} {row[5:]} vs {again}", flush=True)
    return 1 if bad else 0


def retune() -> int:
    prev: Params | None = None
    out = {}
    for x in TUNED_XS:
        starts = [p for p in (*candidates(x), prev) if p is not None]
        t = time.time()
        prev = out[x] = tune(x, starts)
        print(f"x = {x:g}: {prev} constant {search_constant(x, prev):.4f} "
              f"({time.time() - t:.0f} s)", flush=True)
    print("TUNED = {" + ", ".join(f"{x!r}: {p}" for x, p in out.items()) + "}")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true")
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--sample", type=int, default=None,
                    help="--check: the two end nodes and this many others drawn at random")
    ap.add_argument("--seed", type=int, default=None, help="--check --sample: the draw's seed")
    ap.add_argument("--tune", action="store_true",
                    help="re-tune TUNED by a Nelder-Mead chain along x (about an hour); prints it")
    ap.add_argument("--nodes", type=float, nargs="+", default=None,
                    help="only these nodes (--write: replace their rows in the stored table; "
                         "--check: recertify these)")
    args = ap.parse_args(argv)
    if args.check:
        return check(args.sample, args.seed, args.nodes)
    if args.tune:
        return retune()
    if args.nodes is None:
        rows, tols = [], []
    else:  # the stored table, the nodes asked for recertified below
        stored = json.loads(OUT.read_text(encoding="utf-8"))
        rows, tols = stored["nodes"], stored["rtols"]
    for x in XS if args.nodes is None else args.nodes:
        kappa, lp, lo, nu = params_at(x)
        row, tol = (certify(x, kappa, lp, lo, nu, FINE_RTOLS, FINE_MAX_BOXES) if x in RETUNED
                    else certify(x, kappa, lp, lo, nu))
        if args.nodes is None:
            rows.append(row)
            tols.append(tol)
        else:
            i = XS.index(x)
            rows[i], tols[i] = row, tol
        print(f"x = d²/M = {x:g}: K/M {kappa}, λ_p {lp}, λ_o {lo}, ν {nu}: Λ {row[5]:.6f}, "
              f"Λ_f {row[6]:.6f}, Λ_l {row[7]:.6f} (rtol {tol}), constant >= "
              f"{constant(x, kappa, lp, lo, nu, row[5]):.4f}·P·d/√M", flush=True)
    if args.write:
        write_table(rows, tols, COMMAND, NOTE if RETUNED else "")
        print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
