"""Cross-check the explicit model against hardware-like caches.

:func:`verify` runs a schedule's explicit count, records its element trace
(:func:`attnio.trace`) and replays it through LRU, FIFO and Belady's OPT (:func:`attnio.replay`) at
capacities M and 2M:

>>> v = verify("flash2", 64, 8, 800)
>>> v.explicit.total, v.count("opt", 800) <= v.explicit.total
(3072, True)
>>> print(v.table())  # doctest: +ELLIPSIS
flash2  N=64 d=8 M=800  tiling {...}  trace 46,848 events
...

:func:`pycachesim_replay` replays a trace through pycachesim (RRZE-HPC, AGPL-3.0: the optional
extra ``attnio[validate]``, imported only when called) for the cross-check of our LRU/FIFO.
:func:`grid` and :func:`write_report` produce ``docs/validation.md`` and its plot.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .. import algorithms as _alg
from ..algorithms import mapper
from ..core.checks import check_int, check_real
from ..core.errors import ParameterError
from ..core.extras import figure, require
from ..core.memory import IOCount
from ..core.progress import ProgressCallback
from ..core.resources import Cost, Limits
from ..core.workload import MAX_M, Shape
from .caches import POLICIES, ReplayResult, replay
from .tracing import (
    OPT_BYTES_PER_EVENT,
    REPLAY_SECONDS_PER_EVENT,
    Trace,
    estimate_trace,
    trace,
    workload_of,
)

__all__ = ["Verification", "VerifyOptions", "estimate_verify", "grid", "pycachesim_replay", "verify",
           "write_report"]


@dataclass(frozen=True)
class Verification:
    """The explicit count of one configuration next to cache replays of its element trace."""

    algorithm: str
    N: int
    d: int
    M: int
    causal: bool
    tiling: dict
    explicit: IOCount
    events: int
    replays: dict = field(default_factory=dict)  # (policy, capacity) -> ReplayResult
    workload: str = ""  # Shape.describe() of the workload (heads and mask included)

    def count(self, policy: str, capacity: int) -> int:
        return self.replays[(policy, capacity)].total

    def ratio(self, policy: str, capacity: int) -> float:
        return self.count(policy, capacity) / self.explicit.total

    def rows(self) -> list[dict]:
        out = [{"model": "explicit", "capacity": self.M, "reads": self.explicit.reads,
                "writes": self.explicit.writes, "total": self.explicit.total, "ratio": 1.0}]
        for (p, c), r in self.replays.items():
            out.append({"model": p, "capacity": c, "reads": r.reads, "writes": r.writes,
                        "total": r.total, "ratio": r.total / self.explicit.total})
        return out

    def as_dict(self) -> dict:
        return {"algorithm": self.algorithm, "N": self.N, "d": self.d, "M": self.M,
                "causal": self.causal, "workload": self.workload, "tiling": self.tiling,
                "events": self.events, "rows": self.rows()}

    def table(self) -> str:
        size = self.workload or f"N={self.N} d={self.d}{' causal' if self.causal else ''}"
        head = (f"{self.algorithm}  {size} M={self.M}  tiling {self.tiling}  "
                f"trace {self.events:,} events")
        lines = [head, f"  {'model':9s} {'capacity':>9s} {'reads':>12s} {'writes':>12s} "
                       f"{'total':>12s} {'/explicit':>9s}"]
        for r in self.rows():
            lines.append(f"  {r['model']:9s} {r['capacity']:>9,} {r['reads']:>12,} "
                         f"{r['writes']:>12,} {r['total']:>12,} {r['ratio']:>9.3f}")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.table()


def estimate_verify(name: str, shape: Any, M: int, *, tiling: Any = None,
                    policies: Sequence[str] = POLICIES, factors: Sequence[float] = (1, 2)
                    ) -> tuple[int, Cost]:
    """(events, cost) of :func:`verify`: recording the trace, then one replay per policy and
    capacity (an OPT replay holds every event at once); from closed forms."""
    alg = _alg.get(name)
    shp = Shape.coerce(shape)
    t = alg.coerce_tiling(shp, check_int("M", M, minimum=1, maximum=MAX_M), tiling)
    events, rec = estimate_trace(alg, shp, M, t)
    per_event = sum(REPLAY_SECONDS_PER_EVENT[p] for p in policies)
    seconds = rec.seconds + len(tuple(factors)) * per_event * events
    peak = rec.bytes + (OPT_BYTES_PER_EVENT * events if "opt" in policies else 0)
    return events, Cost(peak, seconds, "the trace and its replays")


@dataclass(frozen=True)
class VerifyOptions:
    """What :func:`verify` replays and within which limits, validated on construction: each
    policy of ``policies`` (``"lru"``, ``"fifo"``, ``"opt"``; at least one) at every capacity
    ``factor * M`` of ``factors`` (positive), the whole estimated first and refused beyond
    ``limits`` (a :class:`~attnio.core.resources.Limits`)."""

    policies: Sequence[str] = POLICIES
    factors: Sequence[float] = (1, 2)
    limits: Limits = field(default_factory=Limits)

    def __post_init__(self) -> None:
        policies = tuple(self.policies)
        if not policies:
            raise ParameterError("policies must name at least one of " + ", ".join(POLICIES),
                                 param="policies")
        for p in policies:
            if p not in POLICIES:
                raise ParameterError(f"policy must be one of {', '.join(POLICIES)}, got {p!r}",
                                     param="policies")
        factors = tuple(check_real("factors", f, lo=0, lo_open=True) for f in self.factors)
        if not factors:
            raise ParameterError("factors must hold at least one capacity factor",
                                 param="factors")
        if not isinstance(self.limits, Limits):
            raise ParameterError(f"limits must be an attnio.core.resources.Limits, got "
                                 f"{type(self.limits).__name__}", param="limits")
        object.__setattr__(self, "policies", policies)
        object.__setattr__(self, "factors", factors)


def verify(name: str, N: int | None = None, d: int | None = None, M: int | None = None, *,
           shape: Any = None, tiling: Any = None, options: VerifyOptions | None = None,
           progress: ProgressCallback | None = None) -> Verification:
    """Explicit count of ``name`` at (N, d, M) and replays of its trace at ``factor * M`` words.

    ``shape`` (a :class:`~attnio.core.workload.Shape` or a tuple) replaces N and d for
    non-square, multi-head or masked workloads.  The trace is recorded with the tiling the
    explicit schedule uses at M; each policy of ``options.policies`` replays it (word lines,
    write-back, write-no-fetch) at every capacity ``factor * M`` of ``options.factors``
    (:class:`VerifyOptions`; default: LRU, FIFO and OPT at M and 2M).

    The memory and time are estimated first (:func:`estimate_verify`) and refused beyond
    ``options.limits``: more than ``max_memory`` bytes (default: what the machine has
    available) or, unless ``force``, more than ``budget_s`` seconds.  ``progress(done, total)``
    reports the recording's tile steps, then the events replayed.
    """
    shp = workload_of("verify", N, d, shape)
    if M is None:
        raise ParameterError("verify: M (fast-memory words) is required", param="M")
    M = check_int("M", M, minimum=1, maximum=MAX_M)
    opts = VerifyOptions() if options is None else options
    if not isinstance(opts, VerifyOptions):
        raise ParameterError(f"options must be an attnio.cachesim.VerifyOptions, got "
                             f"{type(opts).__name__}", param="options")
    _, cost = estimate_verify(name, shp, M, tiling=tiling, policies=opts.policies,
                              factors=opts.factors)
    opts.limits.check(cost, subject=f"verifying {_alg.get(name).name} on {shp.describe()}",
                      instead="use a smaller N (or attnio.run mode='count' for the explicit "
                              "count)")
    tr = trace(name, M=M, shape=shp, tiling=tiling,
               limits=Limits(None, max_memory=opts.limits.max_memory), progress=progress)
    return _verification(tr, shp, M, opts, progress)


def _verification(tr: Trace, shp: Shape, M: int, opts: VerifyOptions,
                  progress: ProgressCallback | None = None) -> Verification:
    """The replays of the recorded trace ``tr`` of ``shp`` at M: each policy at each factor."""
    ex = tr.meta["explicit"]
    reps: dict = {}
    n_rep = len(opts.factors) * len(opts.policies)
    k = 0
    for f in opts.factors:
        cap = int(round(f * M))
        for p in opts.policies:
            done = k * len(tr)
            cb = None if progress is None else (
                lambda i, _t, done=done: progress(done + i, n_rep * len(tr)))
            reps[(p, cap)] = replay(tr, cap, p, progress=cb)
            k += 1
    return Verification(tr.meta["algorithm"], shp.Nq, shp.d, M, shp.causal, tr.meta["tiling"],
                        IOCount(ex["reads"], ex["writes"]), len(tr), reps, shp.describe())


# --------------------------------------------------------------------------- pycachesim
def pycachesim_replay(trace_obj, capacity_words: int, policy: str = "lru", *,
                      line_words: int = 1, ways: int | None = None) -> ReplayResult:
    """Replay through pycachesim (write-back, write-allocate); every dirty line flushed at the end.

    Addresses are word addresses given to pycachesim as bytes (``cl_size = line_words``).
    ``reads = line_words * MISS_count``, ``writes = line_words * EVICT_count`` after
    ``force_write_back()``.  Raises AttnioError when pycachesim is not installed.
    """
    pcs = require("cachesim", "validate", "the pycachesim cross-check")
    Cache, CacheSimulator, MainMemory = pcs.Cache, pcs.CacheSimulator, pcs.MainMemory
    if policy not in ("lru", "fifo"):
        raise ParameterError(f"pycachesim cross-check policy must be 'lru' or 'fifo', got {policy!r}"
                             " (its MRU is broken and it has no OPT)", param="policy")
    capacity_words = check_int("capacity_words", capacity_words, minimum=1)
    line_words = check_int("line_words", line_words, minimum=1)
    lines = capacity_words // line_words
    ways = lines if ways is None else check_int("ways", ways, minimum=1)
    sets = lines // ways
    if sets * ways * line_words != capacity_words:
        raise ParameterError(f"capacity_words={capacity_words} is not sets*ways*line_words", param="capacity_words")
    mem = MainMemory()
    l1 = Cache("L1", sets, ways, line_words, policy.upper(), write_back=True,
               write_allocate=True)
    mem.load_to(l1)
    mem.store_from(l1)
    cs = CacheSimulator(l1, mem)
    tr = trace_obj if isinstance(trace_obj, Trace) else Trace.from_arrays(*trace_obj)
    n = 0
    for addr, kind in tr.raw_chunks():
        n += len(addr)
        # runs of equal kind go to pycachesim's C loop in one call each
        cut = np.flatnonzero(np.diff(kind.astype(np.int8))) + 1
        bounds = np.concatenate(([0], cut, [len(addr)]))
        al = addr.tolist()
        for s, e in zip(bounds[:-1].tolist(), bounds[1:].tolist()):
            if kind[s]:
                l1.iterstore(al[s:e], length=1)
            else:
                l1.iterload(al[s:e], length=1)
    cs.force_write_back()
    st = l1.stats()
    return ReplayResult(f"pycachesim-{policy}", capacity_words, line_words,
                        None if ways == lines else ways, True, n, st["HIT_count"],
                        st["MISS_count"], 0, 0, st["EVICT_count"])


# --------------------------------------------------------------------------- grid and report
def grid(sizes: Sequence[tuple[int, int]] = ((64, 8), (64, 32), (128, 16)), Ms: Any = None,
         algorithms: Sequence[str] | None = None, causal: object = False,
         progress: Callable[[Verification], None] | None = None) -> list[dict[str, Any]]:
    """Verification rows over ``sizes`` (N, d) and capacities ``Ms`` (a list, or a function of
    (N, d); default powers of 2 from 8d to 2Nd): LRU, FIFO and OPT at M, LRU at 2M."""
    algs = algorithms or _alg.names(exact=True)
    out = []
    for N, d in sizes:
        caps = Ms(N, d) if callable(Ms) else (Ms or _default_Ms(N, d))
        for name in algs:
            alg = _alg.get(name)
            for M in caps:
                shape = Shape.make(N, d, causal=causal)
                if mapper.can_run(alg, shape, M) is not None:
                    continue
                tr = trace(name, M=M, shape=shape)
                v = _verification(tr, shape, M, VerifyOptions(factors=(1,)))
                v.replays[("lru", 2 * M)] = replay(tr, 2 * M, "lru")
                out.append(v.as_dict())
                if progress:
                    progress(v)
    return out


def _default_Ms(N: int, d: int) -> list[int]:
    lo, hi = 8 * d, 2 * N * d
    Ms, m = [], 1
    while m < lo:
        m *= 2
    while m <= hi:
        Ms.append(m)
        m *= 2
    return Ms


def _total(r: dict, model: str, cap: int) -> int:
    """A validation row's total for ``model`` ("explicit", "lru", ...) at capacity ``cap``."""
    for x in r["rows"]:
        if x["model"] == model and x["capacity"] == cap:
            return int(x["total"])
    raise KeyError((model, cap))


def _plot(rows: list[dict], img_path: Any) -> None:
    """Explicit vs LRU vs OPT across M, one panel per (N, d)."""
    get = _total
    algs = sorted({r["algorithm"] for r in rows})
    sizes = sorted({(r["N"], r["d"]) for r in rows})
    fig = figure((4.2 * len(sizes), 3.8), "the validation plot")
    axes = fig.subplots(1, len(sizes), squeeze=False)
    colors = {a: f"C{i % 10}" for i, a in enumerate(algs)}
    for ax, (N, d) in zip(axes[0], sizes):
        for a in algs:
            rs = sorted((r for r in rows if r["algorithm"] == a and (r["N"], r["d"]) == (N, d)),
                        key=lambda r: r["M"])
            if not rs:
                continue
            Ms = [r["M"] for r in rs]
            ax.plot(Ms, [get(r, "explicit", r["M"]) for r in rs], "-o", color=colors[a],
                    label=f"{a} explicit", ms=3)
            ax.plot(Ms, [get(r, "lru", r["M"]) for r in rs], "--s", color=colors[a],
                    label=f"{a} LRU(M)", ms=3, alpha=0.8)
            ax.plot(Ms, [get(r, "opt", r["M"]) for r in rs], ":^", color=colors[a],
                    label=f"{a} OPT(M)", ms=3, alpha=0.8)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_title(f"N={N}, d={d}")
        ax.set_xlabel("M (words)")
        ax.set_ylabel("slow-memory I/O (words)")
        ax.grid(True, which="both", alpha=0.3)
    axes[0][-1].legend(fontsize=6, loc="upper right", ncol=1)
    fig.tight_layout()
    fig.savefig(img_path, dpi=120)


def _method_lines(command: str) -> list[str]:
    """The report's title, how the trace is built, and the results table's header."""
    return ["# Validation: the explicit model against hardware-like caches", "",
            f"Generated by `{command}` (do not edit by hand).", "",
            "Each row runs one schedule's explicit count at M words, records its element trace",
            "(`attnio.trace`, alias model described in `attnio/cachesim/tracing.py`) and replays it through a",
            "fully associative write-back cache with 1-word lines (`attnio.replay`): LRU, FIFO and",
            "Belady's OPT at M, and LRU at 2M.  Ratios are cache count / explicit count.", "",
            "## How the element trace is built", "",
            "- a tile loaded from `X[region]` is an alias of those `X` words (the load emits nothing);",
            "- `compute(fn, *tiles, writes=k)` reads every word of every tile, then writes every word",
            "  of the first k tiles; `alloc(shape, fill)` writes the fill;",
            "- writes of a tile (and its later reads) touch the words of the store that ends the",
            "  tile's epoch (O_i is accumulated in O's words); values that die with `free` live in",
            "  scratch arrays `~label` (one per tile label and concurrent slot, sized for the",
            "  largest such tile), which are not written back at the end;",
            "- with this model the explicit schedule is itself a replacement strategy of M words, so",
            "  OPT(M) <= explicit.", "",
            "## Results", "",
            "| algorithm | N | d | M | tiling | events | explicit | LRU(M) | FIFO(M) | OPT(M) |"
            " LRU(2M) | LRU/expl | OPT/expl | LRU(2M)/expl |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]


def write_report(rows: list[dict], md_path: Any, img_path: Any, img_rel: str, command: str
                 ) -> None:
    """Markdown tables, a plot (explicit vs LRU vs OPT across M) and computed conclusions."""
    get = _total
    algs = sorted({r["algorithm"] for r in rows})
    _plot(rows, img_path)
    L = _method_lines(command)
    for r in rows:
        M = r["M"]
        e = get(r, "explicit", M)
        lru, fifo, opt, lru2 = (get(r, "lru", M), get(r, "fifo", M), get(r, "opt", M),
                                get(r, "lru", 2 * M))
        til = ", ".join(f"{k}={v}" for k, v in r["tiling"].items())
        L.append(f"| {r['algorithm']} | {r['N']} | {r['d']} | {M} | {til} | {r['events']:,} | "
                 f"{e:,} | {lru:,} | {fifo:,} | {opt:,} | {lru2:,} | {lru / e:.2f} | "
                 f"{opt / e:.2f} | {lru2 / e:.2f} |")
    L += ["", f"![explicit vs LRU vs OPT across M]({img_rel})", "", "## Checks on this grid", ""]
    n = len(rows)
    ok_opt = sum(get(r, "opt", r["M"]) <= get(r, "explicit", r["M"]) for r in rows)
    ok_lru = sum(get(r, "opt", r["M"]) <= min(get(r, "lru", r["M"]), get(r, "fifo", r["M"]))
                 for r in rows)
    ok_st = sum(get(r, "lru", 2 * r["M"]) <= 2 * get(r, "opt", r["M"]) + r["M"] for r in rows)
    L += [f"- OPT(M) <= explicit: {ok_opt} of {n} configurations.",
          f"- OPT(M) <= LRU(M) and OPT(M) <= FIFO(M): {ok_lru} of {n}.",
          f"- LRU(2M) <= 2·OPT(M) + M (Sleator–Tarjan): {ok_st} of {n}.", "",
          "## Conclusions (computed from the table above)", ""]
    for a in algs:
        rs = [r for r in rows if r["algorithm"] == a]
        lr = [get(r, "lru", r["M"]) / get(r, "explicit", r["M"]) for r in rs]
        fr = [get(r, "fifo", r["M"]) / get(r, "explicit", r["M"]) for r in rs]
        l2 = [get(r, "lru", 2 * r["M"]) / get(r, "explicit", r["M"]) for r in rs]
        op = [get(r, "opt", r["M"]) / get(r, "explicit", r["M"]) for r in rs]
        worst = rs[int(np.argmax(lr))]
        L.append(f"- **{a}**: LRU(M)/explicit from {min(lr):.2f} to {max(lr):.2f} (worst at "
                 f"N={worst['N']}, d={worst['d']}, M={worst['M']}); with twice the cache, "
                 f"LRU(2M)/explicit <= {max(l2):.2f}; FIFO(M)/explicit up to {max(fr):.2f}; "
                 f"OPT(M)/explicit from {min(op):.2f} to {max(op):.2f}.")
    L += ["",
          "Reading the numbers: a ratio LRU(M)/explicit near 1 means the schedule's tiling is",
          "robust under an LRU cache of the same size (the count the library reports is what a",
          "hardware-like cache would move); a ratio well above 1 means LRU thrashes at that M",
          "(the working set of one step is close to M, so LRU evicts words the next step",
          "needs), and LRU(2M)/explicit shows how much extra cache restores the explicit count.",
          "OPT(M)/explicit below 1 is the room an optimal replacement policy finds beyond the",
          "schedule's own decisions (repeated loads of the same words, initialisation writes).",
          "Algorithms whose schedules are the same at these sizes (flash2 and flash_decoding with",
          "one split) draw the same lines.", "",
          "## Limits", "",
          "- OPT is Belady's MIN for the word model: it minimises reads and skips write-backs of",
          "  dead values (overwritten before read, or scratch at the end), which the explicit",
          "  model also never pays; it is not guaranteed to minimise reads + writes together",
          "  (OPT(M) <= explicit and OPT <= LRU, FIFO are checked, here and in the tests).",
          "- Sleator–Tarjan bounds faults; on total I/O with write-no-fetch it is a check, and the",
          "  test suite exhibits write-heavy random traces where the total form fails while the",
          "  fault form holds.",
          "- pycachesim does not refresh LRU recency on a store that hits; `attnio.replay(trace,",
          "  attnio.cachesim.Cache(..., write_hit_refresh=False))` reproduces it exactly (tests",
          "  and the benchmark agree).",
          "- The alias model is one reading of the schedule as a program; a tile loaded while",
          "  another tile's epoch writes the same words would share addresses (no schedule in the",
          "  registry does this).", ""]
    with open(md_path, "w") as f:
        f.write("\n".join(L))


def _jsonable(rows) -> str:
    return json.dumps(rows, default=lambda o: dataclasses.asdict(o)
                      if dataclasses.is_dataclass(o) and not isinstance(o, type) else str(o))
