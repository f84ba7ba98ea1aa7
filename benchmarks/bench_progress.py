"""What progress reporting costs the simulator: ``python benchmarks/bench_progress.py``.

The simulator's block loop tests one integer per block (``steps >= next report``) so that a
progress callback can be told about every 1/500 of the work.  This measures, in one process,
the best of 15 rounds in which the variants run in turn, the step-by-step count (``bulk=False``, the loop at its hottest: no arithmetic)
of FlashAttention-2 at N=4096, d=64, M=16384 and of the standard algorithm at N=2048, d=64,
M=4096:

* ``baseline``: the same loop without the test (a copy of ``TwoLevelMemory.blocks`` without the
  two lines), i.e. the simulator before progress reporting;
* ``none``: no callback (what every count pays now);
* ``callback``: a callback that does nothing;
* ``bar``: an :class:`attnio.core.progress.Progress` that is switched off (``--quiet``);

the compute-mode run of flash2 at N=1024, d=64, M=16384 without and with a callback; and the
block loop alone (an empty body), which isolates the cost of the test itself.
Writes ``benchmarks/results/progress.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time

import numpy as np

import attnio
from attnio.core.memory import Block, ScheduleError, TwoLevelMemory
from attnio.core.progress import Progress

HERE = os.path.dirname(os.path.abspath(__file__))


def _blocks_without_hook(self, total, size, *, lo=0, hi=None, uniform=True):
    """TwoLevelMemory.blocks as it was before progress reporting (the baseline)."""
    if size < 1:
        raise ScheduleError(f"block size must be >= 1, got {size}")
    hi = total if hi is None else min(hi, total)
    lo = max(lo, 0)
    if hi <= lo:
        return
    first = lo // size
    last = (hi - 1) // size
    nfull_end = total // size
    if not (self.bulk and uniform):
        for j in range(first, last + 1):
            self._steps += self._mult
            yield Block(j, j * size, min(total, (j + 1) * size))
        return
    runs = []
    full_last = min(last, nfull_end - 1)
    if full_last >= first:
        runs.append((first, full_last - first + 1))
    if last >= nfull_end:
        runs.append((last, 1))
    for j, count in runs:
        saved, occ = self._mult, self._occ
        self._mult = saved * count
        self._steps += self._mult
        try:
            yield Block(j, j * size, min(total, (j + 1) * size))
        finally:
            self._mult = saved
        if self._occ != occ:
            raise ScheduleError("a uniform loop body changed fast-memory occupancy")


def interleaved(variants: dict, rounds: int) -> dict:
    """Best time of each variant, running them in turn each round (so that the load of a shared
    machine drifts over all of them alike)."""
    best = {k: float("inf") for k in variants}
    for _ in range(rounds):
        for k, (setup, fn, teardown) in variants.items():
            setup()
            t0 = time.perf_counter()
            fn()
            best[k] = min(best[k], time.perf_counter() - t0)
            teardown()
    return best


def count_case(name: str, N: int, d: int, M: int, rounds: int) -> dict:
    shape = attnio.Shape(N, N, d)
    steps = attnio.run(name, shape=shape, M=M, mode="count", bulk=False).io.steps
    hooked = TwoLevelMemory.blocks
    calls: list[int] = []
    bar = Progress("bench", enabled=False)

    def run(progress=None):
        return lambda: attnio.run(name, shape=shape, M=M, mode="count", bulk=False,
                                  progress=progress)

    def unhook():
        TwoLevelMemory.blocks = _blocks_without_hook

    def rehook():
        TwoLevelMemory.blocks = hooked

    def nothing():
        return None

    t = interleaved({
        "baseline": (unhook, run(), rehook),
        "none": (nothing, run(), nothing),
        "callback": (nothing, run(lambda done, total: calls.append(done)), nothing),
        "quiet_bar": (nothing, run(bar), nothing),
    }, rounds)
    out = {"algorithm": name, "N": N, "d": d, "M": M, "steps": steps,
           "reports_per_run": len(calls) // rounds, **{f"{k}_s": v for k, v in t.items()}}
    for k in ("none", "callback", "quiet_bar"):
        out[f"{k}_overhead_pct"] = 100.0 * (t[k] / t["baseline"] - 1.0)
    return out


def bare_loop(rounds: int, n: int = 200_000) -> dict:
    """The block loop alone (an empty body), with and without the test: the hook's own cost."""
    hooked = TwoLevelMemory.blocks

    def loop():
        for _ in TwoLevelMemory(100, mode="count", bulk=False).blocks(n, 1):
            pass

    def unhook():
        TwoLevelMemory.blocks = _blocks_without_hook

    def rehook():
        TwoLevelMemory.blocks = hooked

    def nothing():
        return None

    t = interleaved({"baseline": (unhook, loop, rehook), "none": (nothing, loop, nothing)},
                    rounds)
    return {"blocks": n, "baseline_ns_per_block": 1e9 * t["baseline"] / n,
            "none_ns_per_block": 1e9 * t["none"] / n,
            "hook_ns_per_block": 1e9 * (t["none"] - t["baseline"]) / n}


def compute_case(rounds: int) -> dict:
    rng = np.random.default_rng(0)
    Q, K, V = (rng.standard_normal((1024, 64)) for _ in range(3))

    def nothing():
        return None

    t = interleaved({
        "none": (nothing, lambda: attnio.run("flash2", Q, K, V, M=16384), nothing),
        "callback": (nothing, lambda: attnio.run("flash2", Q, K, V, M=16384,
                                                 progress=lambda d, t: None), nothing),
    }, rounds)
    return {"N": 1024, "d": 64, "M": 16384, "none_s": t["none"], "callback_s": t["callback"],
            "callback_overhead_pct": 100.0 * (t["callback"] / t["none"] - 1.0)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.join(HERE, "results", "progress.json"))
    ap.add_argument("--rounds", type=int, default=15)
    args = ap.parse_args(argv)
    res = {
        "machine": {"python": platform.python_version(), "numpy": np.__version__,
                    "platform": platform.platform(), "cpus": os.cpu_count(),
                    "note": f"shared 2-core machine; best of {args.rounds}, variants interleaved"},
        "count": [count_case("flash2", 4096, 64, 16384, args.rounds),
                  count_case("standard", 2048, 64, 4096, args.rounds)],
        "compute": compute_case(args.rounds),
        "bare_loop": bare_loop(args.rounds),
    }
    for c in res["count"]:
        print(f"{c['algorithm']:9s} {c['steps']:>8,} steps: baseline {c['baseline_s'] * 1e3:.1f} ms"
              f", no callback {c['none_overhead_pct']:+.1f}%, callback "
              f"{c['callback_overhead_pct']:+.1f}%, quiet bar {c['quiet_bar_overhead_pct']:+.1f}%")
    c = res["compute"]
    print(f"compute flash2 N=1024: {c['none_s']:.3f} s, with a callback "
          f"{c['callback_overhead_pct']:+.1f}%")
    b = res["bare_loop"]
    per_step = min(c["baseline_s"] / c["steps"] for c in res["count"]) * 1e9
    res["hook_share_of_a_step_pct"] = 100.0 * b["hook_ns_per_block"] / per_step
    print(f"bare block loop: {b['baseline_ns_per_block']:.0f} ns/block, the test adds "
          f"{b['hook_ns_per_block']:.0f} ns = {res['hook_share_of_a_step_pct']:.2f}% of the "
          f"cheapest tile step ({per_step / 1e3:.1f} us)")
    with open(args.out, "w") as f:
        json.dump(res, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
