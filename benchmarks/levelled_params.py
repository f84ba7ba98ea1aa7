"""The table of Theorem B′ (docs/bounds.md §6.1): certified per-segment maxima at nodes of x = d²/M.

The nodes: x = 2^(k/16) from 1/4 to 64 and 2^(k/32) from 2 to 16 (rounded down to 4 decimals;
the bound at run time uses the node with the largest x at or below d²/M), then 128 and 256: 179
nodes.  A node's own candidates (K/M, λ_p/√M, λ_o/√M, ν/√M) are :data:`TUNED` interpolated
linearly in log x and :data:`TUNED` at the two tuned nodes around x, or its :data:`RETUNED` entry
(re-tuned harder by benchmarks/levelled_retune.py).  :data:`TUNED` holds a Nelder–Mead optimum at
every half-octave node (``--tune``: a chain along x, each node warm-started from the better of its
stored entry and the previous node's optimum).  Monotone propagation (:func:`params_at`): the
parameters chosen at the nodes of the octave below, and the RETUNED entries there, are
candidates too (valid at x, with at least their constant at their own node: the maxima are
non-increasing in x); the best by the many-segment constant κ(2 − ν̂/√x)/Λ̂ (units P·d/√M) is
taken, screened at :data:`SCREEN_RTOL` and decided with Λ̂ certified as stored.  Then Λ, Λ_f, Λ_l
are certified at the chosen parameters with the finest tolerance of :data:`FINE_RTOLS` the
branch and bound reaches within :data:`FINE_MAX_BOXES` boxes (from x = :data:`FINE_FROM` up; below
it :data:`RTOLS` within :data:`MAX_BOXES`), and stored with that tolerance; the parameter sets of
:data:`ALTERNATES` are certified the same way and stored as the node's alternate rows (the run
time's few-segment scan evaluates them too).  Any parameters give a valid bound: the search only
decides how tight it is; validity rests on the certification alone.

Run:  python benchmarks/levelled_params.py            # print the table (about 45 minutes)
      python benchmarks/levelled_params.py --write    # and write src/attnio/bounds/levelled.json
      python benchmarks/levelled_params.py --write --nodes 8.0 ...   # recertify only these
                                                      # nodes and replace (or add) their rows,
                                                      # propagated from the stored nodes below
      python benchmarks/levelled_params.py --write --range 2 16      # the nodes in [2, 16]
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
import functools
import json
import math
import pathlib
import random
import sys
import time

from scipy.optimize import minimize

from attnio.bounds.levelled import OCTAVE, certified_lambda

OUT = pathlib.Path(__file__).resolve().parent.parent / "src" / "attnio" / "bounds" / "levelled.json"
#: The nodes x = d²/M: 2^(1/16) steps from M = 4d² to M = d²/64, 2^(1/32) steps from x = 2 to
#: 16 (the midpoints added: where Theorem B′ decides most held-out points), each rounded down to
#: four decimals, then 128 and 256.
XS = tuple(sorted({math.floor(2.0 ** (k / 16) * 1e4) / 1e4 for k in range(-32, 97)}
                  | {math.floor(2.0 ** (k / 32) * 1e4) / 1e4 for k in range(33, 128, 2)}
                  | {128.0, 256.0}))
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
    8.0: (2.6572, 0.3488, 0.618, 0.3392), 9.9348: (2.4775, 0.3477, 0.6044, 0.2595),
}
#: Extra parameter sets per node, certified like the node's own and stored as its alternates
#: (levelled.json "alternates"): the run time's few-segment scan evaluates them too (each a valid
#: bound), so a many-segment optimum that is worse for a few segments does not force a choice.
#: 6.1688: its RETUNED entry (the midpoint of 7.336's and 5.1873's optima), kept where the
#: propagation picks others; 8: its earlier RETUNED entry (the re-tune of session 4, search at
#: ρ = 10⁻³, moved to ν̂ ≈ 0.34, K/M ≈ 2.66: +0.13% certified, fewer segments' counts differ).
ALTERNATES: dict[float, list[tuple[float, float, float, float]]] = {
    6.1688: [(2.506, 0.3778, 0.6342, 0.269)], 8.0: [(2.538, 0.356, 0.5946, 0.2872)],
}
#: Nelder–Mead evaluations per tuned node (each a certified maximum at RTOL_SEARCH).
EVALUATIONS = 70
#: The search tolerance, coarser below x = 0.7 (where the branch and bound is slow).
RTOL_SEARCH, RTOL_SEARCH_SMALL_X = 2e-3, 1e-2
#: The certification tolerances tried, finest first, each within MAX_BOXES boxes.
RTOLS = (1e-3, 2e-3, 5e-3, 1e-2, 2e-2, 4e-2)
MAX_BOXES = 20_000_000
#: Every node from x = FINE_FROM up is certified at these finer tolerances first, within more
#: boxes (``--check`` allows this many everywhere: a branch and bound that finishes gives the same
#: value whatever the limit); first used at the RETUNED nodes only, then from FINE_FROM (seconds a
#: node; below it the branch and bound needs many more boxes, and RTOLS within MAX_BOXES is kept).
FINE_RTOLS, FINE_MAX_BOXES = (2e-4, 5e-4, *RTOLS), 100_000_000
FINE_FROM = 0.5
#: Monotone propagation: the candidates of a node are screened by the many-segment constant at
#: this coarser search tolerance, and the SCREEN_TOP best are compared with Λ certified as it will
#: be stored (with the node's own RETUNED entry and the parameters of the best node of the octave
#: below, so that no node's constant falls below a node's in its octave below).
SCREEN_RTOL, SCREEN_TOP = 1e-2, 2
COMMAND = "python benchmarks/levelled_params.py --write"

Params = tuple[float, float, float, float]
#: Said in the table's comment when RETUNED is not empty.
NOTE = (" Each node's parameters are the best of its own candidates and the parameters of the "
        "nodes of its octave below (monotone propagation); those at the nodes of "
        "levelled_params.RETUNED were found by benchmarks/levelled_retune.py (a harder search "
        "at those nodes). From x = FINE_FROM on, every maximum is certified at the finer "
        "tolerances FINE_RTOLS first.")


def params_of(v) -> Params:
    return math.exp(v[0]), abs(v[1]), abs(v[1]) + abs(v[2]), abs(v[3])


def constant(x: float, kappa: float, lp: float, lo: float, nu: float, lam: float) -> float:
    return kappa * (2.0 - nu / math.sqrt(x)) / lam


def search_constant(x: float, p: Params, rtol: float | None = None,
                    max_boxes: int = 5_000_000) -> float:
    """The many-segment constant at parameters p, Λ̂ certified at the search tolerance (0 where
    the parameters are out of range or the branch and bound gives up); ``rtol``, ``max_boxes``:
    a finer search (benchmarks/levelled_retune.py --rtol)."""
    kappa, lp, lo, nu = p
    if nu >= 1.9 * math.sqrt(x) or kappa <= 0:
        return 0.0
    if rtol is None:
        rtol = RTOL_SEARCH if x >= 0.7 else RTOL_SEARCH_SMALL_X
    for r in (rtol, 2 * rtol, 4 * rtol):  # coarser where the branch and bound needs many boxes
        try:
            lam = certified_lambda(kappa, lp, lo, nu, x, rtol=r, max_boxes=max_boxes)
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


def octave_below(x: float, xs) -> list[float]:
    """The nodes of ``xs`` in x's octave below: OCTAVE·x <= x' < x (levelled.OCTAVE, as the run
    time's few-segment scan)."""
    return [y for y in xs if OCTAVE * x <= y < x]


def tolerances(x: float) -> tuple[tuple[float, ...], int]:
    """The certification tolerances tried at node x, finest first, and the box limit."""
    return (FINE_RTOLS, FINE_MAX_BOXES) if x >= FINE_FROM else (RTOLS, MAX_BOXES)


def stored_constant(x: float, p: Params) -> float:
    """The many-segment constant at p with Λ certified as it will be stored (cached: the node's
    certification reuses it)."""
    return constant(x, *p, certified(*p, x, "mid", *tolerances(x))[0])


def own_params(x: float) -> Params:
    """The node's own parameters (before propagation): RETUNED at x, else the best of
    :func:`candidates` by the many-segment constant at the search tolerance."""
    if x in RETUNED:
        return RETUNED[x]
    cands = candidates(x)
    return cands[0] if len(cands) == 1 else max(cands, key=lambda p: search_constant(x, p))


def params_at(x: float, below: dict[float, tuple[Params, float]] | None = None) -> Params:
    """The node's parameters (monotone propagation): the best, by the many-segment constant, of
    its own candidates (RETUNED at x, else :func:`candidates`), the parameters of the nodes of its
    octave below (``below``: node -> (parameters, stored constant)) and the RETUNED entries there.
    Since the maxima are non-increasing in x, a lower node's parameters are valid at x with at
    least its constant there: so no node falls below the nodes of its octave below (up to the
    certification tolerance).  Screened at SCREEN_RTOL; the SCREEN_TOP best, x's own RETUNED
    entry and the parameters of the octave's best node are compared with Λ certified as stored."""
    below = below or {}
    own = [RETUNED[x]] if x in RETUNED else candidates(x)
    near = octave_below(x, below)
    cands = list(dict.fromkeys([*own, *(below[y][0] for y in near),
                                *(RETUNED[y] for y in octave_below(x, RETUNED))]))
    cands = [p for p in cands if p[3] < 1.9 * math.sqrt(x)]
    if len(cands) == 1:
        return cands[0]
    screened = sorted(cands, key=lambda p: search_constant(x, p, SCREEN_RTOL), reverse=True)
    final = screened[:SCREEN_TOP] + ([RETUNED[x]] if x in RETUNED else [])
    if near:
        final.append(below[max(near, key=lambda y: below[y][1])][0])
    return max(dict.fromkeys(final), key=lambda p: stored_constant(x, p))


@functools.cache
def certified(kappa: float, lp: float, lo: float, nu: float, x: float, kind: str,
              rtols: tuple[float, ...] = FINE_RTOLS, max_boxes: int = FINE_MAX_BOXES,
              ) -> tuple[float, float]:
    """(maximum, tolerance): the certified maximum at the finest tolerance of ``rtols`` the
    branch and bound reaches within ``max_boxes`` boxes (any tolerance gives a value never below the
    maximum; the branch and bound is deterministic, so the result is cached)."""
    for rtol in rtols:
        try:
            return certified_lambda(kappa, lp, lo, nu, x, kind=kind, rtol=rtol,
                                    max_boxes=max_boxes), rtol
        except RuntimeError:
            continue
    raise RuntimeError(f"no certified maximum at x = {x}")


def certify(x: float, kappa: float, lp: float, lo: float, nu: float,
            rtols: tuple[float, ...] | None = None, max_boxes: int | None = None,
            ) -> tuple[list[float], list[float]]:
    """(row, tolerances): the node's row of the table and the tolerance of each of its maxima
    (by default at :func:`tolerances`)."""
    if rtols is None or max_boxes is None:
        rtols, max_boxes = tolerances(x)
    got = [certified(kappa, lp, lo, nu, x, k, rtols, max_boxes) for k in ("mid", "first", "last")]
    return [x, kappa, lp, lo, nu, *(g[0] for g in got)], [g[1] for g in got]


def write_table(table: dict[float, tuple[list[float], list[float]]],
                alternates: dict[float, list[tuple[list[float], list[float]]]], command: str,
                note: str = "") -> None:
    """Write the table to :data:`OUT`: ``table`` node x -> (row, tolerances), ``alternates`` node
    x -> its alternate rows (``command``: how it was made; ``note``: appended to the comment)."""
    alt = [a for x in sorted(alternates) for a in alternates[x]]
    data = {"about": "Theorem B' (docs/bounds.md §6.1): per node x = d^2/M, the parameters "
                     "(K/M, lambda_p/sqrt M, lambda_o/sqrt M, nu/sqrt M) and the certified "
                     "per-segment maxima (Lambda, Lambda_f, Lambda_l) in units M^(3/2), never "
                     "below the true maxima at any d^2/M >= x; rtols: the branch and bound's "
                     "tolerance for each of the three maxima; alternates (rows as in nodes, each "
                     "at the x of a node, certified the same way, alternate_rtols their "
                     "tolerances): more parameter sets the few-segment scan also evaluates. "
                     "Do not edit: regenerate." + note,
            "command": command,
            "columns": ["x", "K/M", "lambda_p", "lambda_o", "nu", "Lambda", "Lambda_f",
                        "Lambda_l"],
            "nodes": [table[x][0] for x in sorted(table)],
            "rtols": [table[x][1] for x in sorted(table)],
            "alternates": [a[0] for a in alt], "alternate_rtols": [a[1] for a in alt]}
    OUT.write_text(json.dumps(data, separators=(",", ":")).replace("],[", "],\n[") + "\n",
                   encoding="utf-8")
    from attnio.bounds.params import pack_json

    pack_json(str(OUT.parent), "levelled.f64")  # the packed copy the bound reads (levelled.f64)


def load() -> tuple[dict[float, tuple[list[float], list[float]]],
                    dict[float, list[tuple[list[float], list[float]]]]]:
    """The stored table: node x -> (row, tolerances), and node x -> its alternate rows (none in a
    table written before alternates existed)."""
    data = json.loads(OUT.read_text(encoding="utf-8"))
    table = {row[0]: (row, tol) for row, tol in zip(data["nodes"], data["rtols"])}
    alternates: dict[float, list[tuple[list[float], list[float]]]] = {}
    for row, tol in zip(data.get("alternates", []), data.get("alternate_rtols", [])):
        alternates.setdefault(row[0], []).append((row, tol))
    return table, alternates


def recertified(row: list[float], tol: list[float]) -> bool:
    """Each maximum at its stored tolerance again (the branch and bound is deterministic)."""
    again = [certified(*row[1:5], row[0], kind, (t,), FINE_MAX_BOXES)[0]
             for kind, t in zip(("mid", "first", "last"), tol)]
    ok = all(math.isclose(a, b, rel_tol=1e-12) for a, b in zip(again, row[5:]))
    print(f"x = {row[0]:g} {tuple(row[1:5])}: {'ok' if ok else 'DIFFERS'} {row[5:]} vs {again}",
          flush=True)
    return ok


def check(sample: int | None, seed: int | None, only: list[float] | None = None) -> int:
    table, alternates = load()
    xs = sorted(table)
    picked = xs if only is None else only
    if sample is not None and sample + 2 < len(xs):
        seed = random.randrange(2 ** 32) if seed is None else seed
        picked = [xs[0], *sorted(random.Random(seed).sample(xs[1:-1], sample)), xs[-1]]
        print(f"checking the end nodes and {sample} drawn with --seed {seed} (and the alternates "
              "of the nodes drawn)", flush=True)
    bad = 0
    for x in picked:
        for row, tol in [table[x], *alternates.get(x, [])]:
            bad += not recertified(row, tol)
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
                    help="only these nodes (--write: replace or add their rows in the stored "
                         "table, by increasing x; --check: recertify these)")
    ap.add_argument("--range", type=float, nargs=2, default=None, metavar=("LO", "HI"),
                    help="--write: the nodes of XS in [LO, HI], as --nodes")
    args = ap.parse_args(argv)
    if args.check:
        return check(args.sample, args.seed, args.nodes)
    if args.tune:
        return retune()
    if args.range is not None:
        args.nodes = [x for x in XS if args.range[0] <= x <= args.range[1]]
    if args.nodes is None:
        table: dict[float, tuple[list[float], list[float]]] = {}
        alternates: dict[float, list[tuple[list[float], list[float]]]] = {}
    else:  # the stored table, the nodes asked for recertified below
        table, alternates = load()
    for x in XS if args.nodes is None else sorted(args.nodes):
        t = time.time()
        # monotone propagation: the parameters stored (or just chosen) at the nodes below
        kappa, lp, lo, nu = p = params_at(x, {y: (tuple(r[1:5]), constant(y, *r[1:6]))
                                              for y, (r, _) in table.items() if y < x})
        table[x] = row, tol = certify(x, kappa, lp, lo, nu)
        # the node's own parameters stay an alternate where propagation replaced them: a few
        # segments' count moves with K, and they may reach one more segment
        alternates[x] = [certify(x, *a) for a in dict.fromkeys([*ALTERNATES.get(x, []),
                                                               own_params(x)]) if a != p]
        print(f"x = d²/M = {x:g}: K/M {kappa}, λ_p {lp}, λ_o {lo}, ν {nu}: Λ {row[5]:.6f}, "
              f"Λ_f {row[6]:.6f}, Λ_l {row[7]:.6f} (rtol {tol}), constant >= "
              f"{constant(x, kappa, lp, lo, nu, row[5]):.4f}·P·d/√M, "
              f"{len(alternates[x])} alternates ({time.time() - t:.0f} s)", flush=True)
        if args.write and args.nodes is not None:  # a run stopped part way keeps the nodes done
            write_table(table, alternates, COMMAND, NOTE)
    if args.write:
        write_table(table, alternates, COMMAND, NOTE)
        print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
