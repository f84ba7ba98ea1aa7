"""The table of Theorem B′ (docs/bounds.md §6.1): certified per-segment maxima at nodes of x = d²/M.

For each node x (M = d²/x), the parameters (K/M, λ_p/√M, λ_o/√M, ν/√M) are START interpolated in
log x (tuned at a few nodes; ``--tune``: a Nelder–Mead search per node maximising the many-segment
constant κ(2 − ν̂/√x)/Λ̂ in units P·d/√M, Λ̂ from the certified branch and bound
:func:`attnio.bounds.levelled.certified_lambda` at a coarse tolerance); then Λ, Λ_f, Λ_l are
certified at those parameters with a fine tolerance and stored.  Any parameters give a valid
bound: the search only decides how tight it is; validity rests on the certification alone.

Run:  python benchmarks/levelled_params.py            # print the table (minutes)
      python benchmarks/levelled_params.py --write    # and write src/attnio/bounds/levelled.json
      python benchmarks/levelled_params.py --check    # recertify the stored nodes at their stored
                                                      # parameters; exit 1 if any maximum differs
"""

from __future__ import annotations

import argparse
import json
import math
import pathlib
import sys

from scipy.optimize import minimize

from attnio.bounds.levelled import certified_lambda

OUT = pathlib.Path(__file__).resolve().parent.parent / "src" / "attnio" / "bounds" / "levelled.json"
#: The nodes x = d²/M: √2 steps from M = 4d² to M = d²/16, then coarser towards M << d².
XS = (0.25, 0.3536, 0.5, 0.7071, 1.0, 1.414, 2.0, 2.828, 4.0, 8.0, 16.0, 64.0, 256.0)
#: Starting parameters (K/M, λ_p/√M, λ_o/√M, ν/√M) found by benchmarks/explore_potential_b.py.
START = {0.25: (0.9992, 0.3509, 0.6912, 0.3044), 0.5: (1.25, 0.327, 0.643, 0.334),
         1.0: (1.95, 0.34, 0.667, 0.452), 2.0: (2.64, 0.348, 0.692, 0.561),
         4.0: (2.90, 0.357, 0.696, 0.558), 256.0: (2.97, 0.305, 0.61, 0.6)}
#: Nelder–Mead iterations per node (each a coarse certified maximum, about a second).
ITERATIONS = 20
RTOL_SEARCH = 0.02
RTOL = 5e-3
COMMAND = "python benchmarks/levelled_params.py --write"


def params_of(v) -> tuple[float, float, float, float]:
    return math.exp(v[0]), abs(v[1]), abs(v[1]) + abs(v[2]), abs(v[3])


def constant(x: float, kappa: float, lp: float, lo: float, nu: float, lam: float) -> float:
    return kappa * (2.0 - nu / math.sqrt(x)) / lam


def tune(x: float, start: tuple[float, float, float, float]) -> tuple[float, ...]:
    kappa, lp, lo, nu = start

    def neg(v) -> float:
        k, a, b, n = params_of(v)
        if n >= 1.9 * math.sqrt(x):
            return 0.0
        return -constant(x, k, a, b, n, certified_lambda(k, a, b, n, x, rtol=RTOL_SEARCH))

    r = minimize(neg, [math.log(kappa), lp, lo - lp, nu], method="Nelder-Mead",
                 options={"maxiter": ITERATIONS, "xatol": 2e-3, "fatol": 1e-4})
    return tuple(round(t, 4) for t in params_of(r.x))


def certified(kappa: float, lp: float, lo: float, nu: float, x: float, kind: str) -> float:
    """The certified maximum at tolerance RTOL, or a coarser one where the branch and bound
    would need too many boxes (any tolerance gives a value never below the maximum)."""
    for rtol in (RTOL, 2 * RTOL, 4 * RTOL, 8 * RTOL):
        try:
            return certified_lambda(kappa, lp, lo, nu, x, kind=kind, rtol=rtol,
                                    max_boxes=20_000_000)
        except RuntimeError:
            continue
    raise RuntimeError(f"no certified maximum at x = {x}")


def certify(x: float, kappa: float, lp: float, lo: float, nu: float) -> list[float]:
    lams = [certified(kappa, lp, lo, nu, x, k) for k in ("mid", "first", "last")]
    return [x, kappa, lp, lo, nu, *lams]


def start_of(x: float) -> tuple[float, float, float, float]:
    """START interpolated linearly in log x between its nodes (constant beyond them)."""
    keys = sorted(START)
    if x <= keys[0]:
        return START[keys[0]]
    if x >= keys[-1]:
        return START[keys[-1]]
    j = max(k for k in range(len(keys)) if keys[k] <= x)
    if keys[j] == x:
        return START[x]
    w = math.log(x / keys[j]) / math.log(keys[j + 1] / keys[j])
    return tuple(round(a + w * (b - a), 4)  # type: ignore[return-value]
                 for a, b in zip(START[keys[j]], START[keys[j + 1]]))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true")
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--tune", action="store_true",
                    help="tune the parameters per node (Nelder-Mead, about an hour) instead of "
                         "interpolating START")
    args = ap.parse_args(argv)
    if args.check:
        bad = 0
        for row in json.loads(OUT.read_text(encoding="utf-8"))["nodes"]:
            again = certify(*row[:5])
            ok = all(math.isclose(a, b, rel_tol=1e-12) for a, b in zip(again, row))
            bad += not ok
            print(f"x = {row[0]:g}: {'ok' if ok else 'DIFFERS'} {row[5:]} vs {again[5:]}", flush=True)
        return 1 if bad else 0
    rows = []
    for x in XS:
        kappa, lp, lo, nu = tune(x, start_of(x)) if args.tune else start_of(x)
        row = certify(x, kappa, lp, lo, nu)
        rows.append(row)
        print(f"x = d²/M = {x:g}: K/M {kappa}, λ_p {lp}, λ_o {lo}, ν {nu}: Λ {row[5]:.6f}, "
              f"Λ_f {row[6]:.6f}, Λ_l {row[7]:.6f}, constant >= "
              f"{constant(x, kappa, lp, lo, nu, row[5]):.4f}·P·d/√M", flush=True)
    if args.write:
        data = {"about": "Theorem B' (docs/bounds.md §6.1): per node x = d^2/M, the parameters "
                         "(K/M, lambda_p/sqrt M, lambda_o/sqrt M, nu/sqrt M) and the certified "
                         "per-segment maxima (Lambda, Lambda_f, Lambda_l) in units M^(3/2), never "
                         "below the true maxima at any d^2/M >= x. Do not edit: regenerate.",
                "command": COMMAND, "rtol": RTOL,
                "columns": ["x", "K/M", "lambda_p", "lambda_o", "nu", "Lambda", "Lambda_f",
                            "Lambda_l"],
                "nodes": rows}
        OUT.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
        print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
