"""Re-tune chosen nodes of the Theorem B′ table (docs/bounds.md §6.1) harder than ``--tune``.

For each node x: the starts are its stored parameters, :func:`levelled_params.candidates` at x,
the stored parameters of the table's nodes within ``--around`` steps, the tuned entries of the
ν̂ ≈ 0.22–0.26 family (TUNED at 4 to 32), the RETUNED entries from 4 to 10 (the ν̂ ≈ 0.26–0.29,
λ̂_p ≈ 0.36 family) and any ``--start``; Nelder–Mead (``--evaluations`` certified evaluations at
the search tolerance, ``--rtol``: a finer one than levelled_params', within 10⁸ boxes) runs from
the best start, then again from its optimum (``--restarts``, default one).  The three best starts, the two optima and the stored parameters are then
compared with Λ certified as it will be stored (FINE_RTOLS within FINE_MAX_BOXES: the search
tolerance's slack is as large as the differences), and the best is certified and printed with the
change of the many-segment constant κ(2 − ν̂/√x)/Λ.  Nothing is written: a node that improves is
entered in ``levelled_params.RETUNED`` and its row written by
``python benchmarks/levelled_params.py --write --nodes X ...``.  Any parameters give a valid bound:
the certification alone makes it one.

Run:  python benchmarks/levelled_retune.py 8.0 5.1873 [--evaluations 120] [--start K LP LO NU]
          [--rtol 1e-3] [--restarts 1]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time

import levelled_params as lp_
from scipy.optimize import minimize

Params = lp_.Params
#: The search's tolerance and box limit (``--rtol``: finer than levelled_params' search, whose
#: noise, up to 0.4% where it falls back to 4e-3, is as large as the gains sought).
SEARCH = {"rtol": None, "max_boxes": 5_000_000}


def search(x: float, p: Params) -> float:
    return lp_.search_constant(x, p, SEARCH["rtol"], SEARCH["max_boxes"])  # type: ignore[arg-type]


def starts_for(x: float, rows: list[list[float]], around: int,
               extra: list[Params]) -> list[Params]:
    i = [r[0] for r in rows].index(x)
    out = [tuple(rows[j][1:5]) for j in range(max(0, i - around), min(len(rows), i + around + 1))]
    out += lp_.candidates(x) + [p for p in extra if p[3] < 1.9 * math.sqrt(x)]
    out += [p for t, p in lp_.TUNED.items() if 4.0 <= t <= 32.0 and p[3] < 1.9 * math.sqrt(x)]
    # the ν̂ ≈ 0.26–0.29, λ̂_p ≈ 0.36 family of the re-tuned nodes from 4 to 10
    out += [p for t, p in lp_.RETUNED.items() if 4.0 <= t <= 10.0 and p[3] < 1.9 * math.sqrt(x)]
    return list(dict.fromkeys(out))  # type: ignore[arg-type]


def nelder_mead(x: float, start: Params, evaluations: int) -> Params:
    kappa, lp, lo, nu = start
    r = minimize(lambda v: -search(x, lp_.params_of(v)),
                 [math.log(kappa), lp, lo - lp, nu], method="Nelder-Mead",
                 options={"maxfev": evaluations, "xatol": 1e-4, "fatol": 1e-6})
    return tuple(round(float(t), 4) for t in lp_.params_of(r.x))  # type: ignore[return-value]


def retune(x: float, rows: list[list[float]], evaluations: int, around: int,
           extra: list[Params], restarts: int = 1) -> list[Params]:
    """The candidates at x: the three best starts and each Nelder–Mead pass's optimum."""
    starts = starts_for(x, rows, around, extra)
    scored = sorted(((search(x, p), p) for p in starts), reverse=True)
    print(f"x = {x:g}: best start {scored[0][1]} {scored[0][0]:.4f} of {len(starts)}", flush=True)
    best_c, best = scored[0]
    out = [p for _, p in scored[:3]]
    for _ in range(1 + restarts):  # restarts from the optimum
        got = nelder_mead(x, best, evaluations)
        c = search(x, got)
        print(f"  Nelder-Mead: {got} {c:.4f}", flush=True)
        out.append(got)
        if c > best_c:
            best_c, best = c, got
    return out


def pick(x: float, cands: list[Params]) -> tuple[float, Params]:
    """The best candidate by the many-segment constant with Λ certified as stored (FINE_RTOLS
    within FINE_MAX_BOXES): the search tolerance's slack is as large as the differences."""
    def final(p: Params) -> float:
        lam = lp_.certified(*p, x, "mid", lp_.FINE_RTOLS, lp_.FINE_MAX_BOXES)[0]
        return lp_.constant(x, *p, lam)
    return max((final(p), p) for p in dict.fromkeys(cands))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("nodes", type=float, nargs="+")
    ap.add_argument("--evaluations", type=int, default=150)
    ap.add_argument("--around", type=int, default=3)
    ap.add_argument("--start", type=float, nargs=4, action="append", default=[],
                    help="one more start (K/M, lambda_p, lambda_o, nu), for every node")
    ap.add_argument("--rtol", type=float, default=None,
                    help="the search's tolerance (within 10^8 boxes; default: levelled_params')")
    ap.add_argument("--restarts", type=int, default=1, help="Nelder-Mead restarts from the optimum")
    ap.add_argument("--out", default=None, help="write the certified rows found to this json")
    args = ap.parse_args(argv)
    if args.rtol is not None:
        SEARCH.update(rtol=args.rtol, max_boxes=100_000_000)
    rows = json.loads(lp_.OUT.read_text(encoding="utf-8"))["nodes"]
    found = {}
    for x in args.nodes:
        t = time.time()
        i = [r[0] for r in rows].index(x)
        _, p = pick(x, [tuple(rows[i][1:5]), *retune(x, rows, args.evaluations, args.around,
                                                      [tuple(s) for s in args.start],
                                                      args.restarts)])
        row, tol = lp_.certify(x, *p, lp_.FINE_RTOLS, lp_.FINE_MAX_BOXES)
        old = lp_.constant(x, *rows[i][1:6])
        new = lp_.constant(x, *row[1:6])
        print(f"x = {x:g}: {p} certified {row[5:]} (rtol {tol}): constant {old:.4f} -> "
              f"{new:.4f} ({100 * (new / old - 1):+.2f}%, {time.time() - t:.0f} s)", flush=True)
        found[x] = (row, tol, old, new)
        if args.out:
            with open(args.out, "w", encoding="utf-8") as f:
                json.dump({repr(k): v for k, v in found.items()}, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
