"""CPU time of masked counts (issue 31, item 3): every registered schedule at N = 10^9, and the
count part of ``attnio sweep --algo all`` over a 22,275-configuration grid.

Run:  python benchmarks/bench_counts.py [--repeat 5] [--grid] [--grid-share K/J]
                                        [--out benchmarks/results/counts.json]

* ``billion``: ``attnio.run(name, shape=..., M=65536, mode="count")`` (default tiling, so the
  tiling search is included) for every registered forward schedule, and for every registered
  backward schedule after flash2's forward (``backward=BackwardPass(algorithm=name)``; the
  backward's own count, ``backward_io``, with its default tiling), causal (bottom-right) and
  causal with window 4096, N = 10^9, d = 128; each count is checked against the closed form.
  Schedules that do not support the shape (a window, M), or whose count the runner refuses
  (a walk over the blocks estimated beyond its time budget), print why; a count still running
  after 60 s is reported as such.  CPU milliseconds
  (``time.process_time``), the median of ``--repeat`` runs with attnio's caches cleared before
  each.
* ``grid`` (``--grid``): the configurations of ``attnio sweep --N 256:65536:x2 --d
  16,32,64,128,256 --M 1024:16777216:x2 --causal none,bottom_right,top_left --algo all --mode
  count`` (22,275, of which 19,872 run) through the sweep's own count call
  (``attnio.experiments.row._measure``, no database; the run's certificate, the bounds, left
  out unless ``--with-certificates``: the count alone): CPU seconds per algorithm and in all,
  and the slowest configurations.  ``--grid-share K/J`` runs
  every J-th configuration from the K-th (to split the grid over processes: the sum of the
  shares' CPU is the grid's).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import sys
import time

from _cold import clear_attnio_caches

import attnio
from attnio.core.workload import Shape
from attnio.runner import BackwardPass

N = 10**9
GRID_ARGS = dict(N="256:65536:x2", d="16,32,64,128,256", M="1024:16777216:x2")


class _TooLong(Exception):
    pass


def _alarm(*_: object) -> None:
    raise _TooLong


TIMEOUT_S = 60  # a count still running after this is reported as such (a walk over the blocks)


def _cpu(fn, repeat: int):
    cpus, out = [], None
    for _ in range(repeat):
        clear_attnio_caches()
        signal.signal(signal.SIGALRM, _alarm)
        signal.alarm(TIMEOUT_S)
        try:
            c0 = time.process_time()
            out = fn()
            cpus.append(time.process_time() - c0)
        finally:
            signal.alarm(0)
    return statistics.median(cpus), out


def billion(repeat: int) -> list[dict]:
    rows = []
    cases = [("forward", n) for n in attnio.algorithms.names(exact=True)]
    cases += [("backward", n) for n in attnio.algorithms.backward_names()]
    for kind, name in cases:
        for window in (None, 4096):
            shape = Shape(N, N, 128, causal=True, window=window)
            row = {"kind": kind, "schedule": name, "window": window, "N": N, "d": 128,
                   "M": 65536}
            try:
                if kind == "forward":
                    alg = attnio.algorithms.get(name)
                    cpu, r = _cpu(lambda: attnio.run(name, shape=shape, M=65536, mode="count"),
                                  repeat)
                    io, pred = r.io, alg.cost(shape, r.tiling).io
                else:
                    bwd = attnio.algorithms.get_backward(name)
                    bp = BackwardPass(algorithm=name)
                    cpu, r = _cpu(lambda: attnio.run("flash2", shape=shape, M=65536,
                                                     mode="count", backward=bp), repeat)
                    io = r.backward_io
                    pred = bwd.cost(shape, bwd.coerce_tiling(shape, 65536, None)).io
            except _TooLong:
                row["skipped"] = f"still counting after {TIMEOUT_S} s"
                print(f"{kind:8s} {name:27s} W={window!s:5s}  {row['skipped']}")
                rows.append(row)
                continue
            except attnio.core.errors.AttnioError as e:  # unsupported shape, refused: say why
                row["skipped"] = str(e).splitlines()[0]
                print(f"{kind:8s} {name:27s} W={window!s:5s}  skipped: {row['skipped'][:90]}")
                rows.append(row)
                continue
            assert (io.reads, io.writes) == (pred.reads, pred.writes), (name, window)
            row.update(cpu_ms=cpu * 1e3, total=io.total, equals_closed_form=True)
            rows.append(row)
            print(f"{kind:8s} {name:27s} W={window!s:5s} {cpu * 1e3:9.2f} ms CPU  "
                  f"total {io.total:,}")
    return rows


def grid(share: tuple[int, int], certificates: bool) -> dict:
    from attnio.experiments.grid import Grid, iter_expand
    from attnio.experiments.row import _measure
    from attnio.experiments.values import parse_values
    from attnio.runner import execution

    if not certificates:  # the count alone: the run's certificate (the bounds) left out
        execution.certificate = lambda *a, **k: None  # type: ignore[assignment]

    g = Grid(N=parse_values("N", GRID_ARGS["N"]), d=parse_values("d", GRID_ARGS["d"]),
             M=parse_values("M", GRID_ARGS["M"]), algorithms=("all",),
             causal=(False, True, "top_left"))
    per: dict[str, float] = {}
    slow: list[tuple[float, str]] = []
    n = ran = 0
    k, j = share
    for cfg, why in iter_expand(g):
        n += 1
        if why or (n - 1) % j != k:
            continue
        alg = attnio.algorithms.get(cfg.algorithm)
        c0 = time.process_time()
        try:
            _measure(cfg, alg, False)
        except attnio.core.errors.AttnioError:
            pass  # stored as an error row by the sweep; its time counts all the same
        dt = time.process_time() - c0
        ran += 1
        per[cfg.algorithm] = per.get(cfg.algorithm, 0.0) + dt
        slow.append((dt, cfg.describe()))
    slow.sort(reverse=True)
    total = sum(per.values())
    print(f"grid: {n:,} configurations, {ran:,} counted (share {k}/{j}"
          f"{', with certificates' if certificates else ', counts alone'}): {total:.1f} s CPU")
    for name, s in sorted(per.items(), key=lambda x: -x[1]):
        print(f"  {name:18s} {s:8.2f} s CPU")
    print("  slowest:", *(f"{dt * 1e3:.0f} ms {d}" for dt, d in slow[:5]), sep="\n    ")
    return {"configurations": n, "counted": ran, "share": f"{k}/{j}", "cpu_s": total,
            "certificates": certificates,
            "per_algorithm_cpu_s": per, "slowest": slow[:10]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--grid", action="store_true", help="also the sweep grid's count part")
    ap.add_argument("--grid-share", default="0/1", help="K/J: every J-th configuration from K")
    ap.add_argument("--no-billion", action="store_true")
    ap.add_argument("--with-certificates", action="store_true",
                    help="grid: keep each run's certificate (default: the count alone)")
    ap.add_argument("--out", default=None)
    a = ap.parse_args(argv)
    out: dict = {}
    if not a.no_billion:
        out["billion"] = billion(a.repeat)
    if a.grid:
        k, j = (int(x) for x in a.grid_share.split("/"))
        out["grid"] = grid((k, j), a.with_certificates)
    if a.out:
        os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
        with open(a.out, "w") as f:
            json.dump(out, f, indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
