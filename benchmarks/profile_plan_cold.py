"""Where a cold ``attnio.plan`` spends its time (issue 31): cProfile over the three target
shapes, every ``functools`` cache of attnio cleared before each plan.

Run:  python benchmarks/profile_plan_cold.py [--backward] [--repeat 5] [--top 40]
                                             [--sort tottime|cumulative] [--shape 0,1,2]
                                             [--split]
      python benchmarks/profile_plan_cold.py --bounds [--repeat 41] [--shape 0,1,2]

Prints the profile's ``--top`` lines (sorted by ``--sort``) over ``--repeat`` cold plans of each
chosen shape (forward, or ``backward=True`` with ``--backward``), then each shape's median cold
CPU ms without the profiler.  A diagnosis tool: its figures are the profiler's (slower than the
plain call); quote ``bench_speed.py --compare``'s for speed claims.

``--bounds``: no profiler; the forward certificate's bounds one by one, in ``applicable_to``'s
order, every cache cleared before each certificate (the parameter tables read again too), CPU
ms per bound: the least and the median over ``--repeat`` certificates (the least is the one a
busy machine disturbs least), and the whole certificate's.

``--split``: no profiler; instead each shape's cold CPU ms split into the certificate (the
bounds: :func:`attnio.runner.certificate`) and each schedule's search (``mapper.search`` or
``mapper.best_of`` as the planner calls it), means over ``--repeat`` cold plans, and "the
rest" (the plan less those).
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from _cold import clear_attnio_caches  # noqa: E402

SHAPES = [
    dict(N=4096, d=64, M=65536),
    dict(N=3000, d=40, M=60000),
    dict(N=8192, d=128, M=65536, heads=32, kv_heads=8, causal=True),
]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backward", action="store_true")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--top", type=int, default=40)
    ap.add_argument("--sort", default="tottime", choices=("tottime", "cumulative"))
    ap.add_argument("--shape", default="0,1,2", help="indices into the three shapes")
    ap.add_argument("--bounds", action="store_true",
                    help="CPU ms per bound of the forward certificate, no profiler")
    ap.add_argument("--split", action="store_true",
                    help="per-schedule and certificate CPU ms instead of a profile")
    a = ap.parse_args(argv)
    import attnio

    if a.bounds:
        return _bounds([SHAPES[int(i)] for i in a.shape.split(",")], a.repeat)

    shapes = [SHAPES[int(i)] for i in a.shape.split(",")]
    attnio.plan(1024, 64, 65536, causal=True)  # imports and first-call work out of the way
    if a.split:
        return split(shapes, a.repeat, a.backward)
    prof = cProfile.Profile()
    for kw in shapes:
        for _ in range(a.repeat):
            clear_attnio_caches()
            prof.enable()
            attnio.plan(**kw, backward=a.backward)
            prof.disable()
    pstats.Stats(prof).sort_stats(a.sort).print_stats(a.top)
    for kw in shapes:
        cpus = []
        for _ in range(a.repeat):
            clear_attnio_caches()
            c0 = time.process_time()
            attnio.plan(**kw, backward=a.backward)
            cpus.append((time.process_time() - c0) * 1e3)
        print(f"{kw}: cold {statistics.median(cpus):.2f} ms CPU (median of {a.repeat})")
    return 0


def _bounds(shapes: list[dict], repeat: int) -> int:
    """Per bound of ``applicable_to``'s forward list, cold CPU ms (least, median)."""
    import attnio
    from attnio.bounds import base, exact, forward, levelled, reread
    from attnio.bounds.asymptotic import standard_matmul_for

    order = [("trivial", lambda s, M: exact.trivial_for(s)),
             ("pv_segment (A)", forward.pv_segment_for),
             ("qkpv_pooled (B)", forward.qkpv_pooled_for),
             ("qkpv_levelled (B')", levelled.qkpv_levelled_for),
             ("reread_cut (F)", reread.reread_cut_for),
             ("large_cache", exact.large_cache_for),
             ("small_cache", exact.small_cache_for),
             ("standard_matmul", standard_matmul_for)]
    attnio.plan(1024, 64, 65536, causal=True)  # imports out of the way
    for kw in shapes:
        kw = dict(kw)
        M = kw.pop("M")
        shape = base.attention_shape(kw.pop("N"), kw.pop("d"), **kw)
        per: dict[str, list[float]] = {name: [] for name, _ in order}
        total = []
        for _ in range(repeat):
            clear_attnio_caches()
            t0 = time.process_time()
            for name, fn in order:
                c0 = time.process_time()
                fn(shape, M)
                per[name].append((time.process_time() - c0) * 1e3)
            total.append((time.process_time() - t0) * 1e3)
        print(f"M={M} {shape}: certificate's bounds cold, CPU ms, least / median of {repeat}: "
              f"{min(total):.2f} / {statistics.median(total):.2f}")
        for name, _ in order:
            print(f"  {name:20s} {min(per[name]):6.3f} / {statistics.median(per[name]):6.3f}")
    return 0


def split(shapes: list[dict], repeat: int, backward: bool) -> int:
    """Each shape's cold plan split by timing wrappers around the planner's calls of
    ``mapper.search`` and ``mapper.best_of`` (per schedule) and ``certificate`` (the bounds)."""
    import types

    import attnio
    from attnio.algorithms import mapper
    from attnio.planner import planner

    acc: dict[str, float] = {}

    def timed(name_of, fn):
        def wrapper(*args, **kwargs):
            c0 = time.process_time()
            try:
                return fn(*args, **kwargs)
            finally:
                key = name_of(args)
                acc[key] = acc.get(key, 0.0) + time.process_time() - c0
        return wrapper

    proxy = types.SimpleNamespace(**{k: getattr(mapper, k) for k in dir(mapper)
                                     if not k.startswith("__")})
    proxy.search = timed(lambda args: args[0].name, mapper.search)
    proxy.best_of = timed(lambda args: args[0].name, mapper.best_of)  # (the planner's search)
    saved = planner.mapper, planner.certificate
    planner.mapper = proxy  # type: ignore[assignment]
    planner.certificate = timed(lambda args: "<certificate>", planner.certificate)
    try:
        for kw in shapes:
            acc.clear()
            cpus = []
            for _ in range(repeat):
                clear_attnio_caches()
                c0 = time.process_time()
                attnio.plan(**kw, backward=backward)
                cpus.append((time.process_time() - c0) * 1e3)
            parts = {k: v * 1e3 / repeat for k, v in acc.items()}
            total = statistics.mean(cpus)
            cert = parts.pop("<certificate>", 0.0)
            searches = sum(parts.values())
            print(f"{kw}: cold {total:.2f} ms CPU (mean of {repeat}): certificate {cert:.2f}, "
                  f"searches {searches:.2f}, the rest {total - cert - searches:.2f}")
            print("    " + ", ".join(f"{k} {v:.2f}" for k, v in
                                     sorted(parts.items(), key=lambda kv: -kv[1])))
    finally:
        planner.mapper, planner.certificate = saved
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
