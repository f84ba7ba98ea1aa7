"""Tiny instances solved exactly, next to what attnio's schedules and bounds say about them.

:func:`compare` puts the pebbling optimum (:mod:`.solver`) of a tiny attention or matmul DAG
(:mod:`.dag`) beside every exact schedule's simulated count and every bound of
:mod:`attnio.bounds`; ``docs/pebbling.md`` is its table (``benchmarks/pebble_table.py``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .. import algorithms, bounds
from ..algorithms import mapper
from ..blocks.matmul import ALGORITHM as MATMUL
from ..blocks.matmul import run_matmul
from ..core.errors import ParameterError
from ..core.workload import Shape
from ..runner import run
from . import dag as dag_
from .dag import DAG
from .game import PebbleResult
from .solver import SolveOptions, solve

__all__ = ["MAX_TIME_LIMIT_S", "TABLE_COLUMNS", "TABLE_INSTANCES", "Instance", "compare", "format_table",
           "seed_bounds", "simulated", "table_row"]


@dataclass(frozen=True)
class Instance:
    """A tiny problem: ``kind`` "attention" (sizes (Nq, Nkv, d)) or "matmul" (sizes (m, k, n))."""

    kind: str
    sizes: tuple[int, ...]
    rowmax: bool = True
    normalize: str = "P"

    def dag(self) -> DAG:
        if self.kind == "matmul":
            return dag_.matmul(*self.sizes)
        if self.kind == "attention":
            Nq, Nkv, d = self.sizes
            return dag_.attention(Nq, d, Nkv=Nkv, rowmax=self.rowmax, normalize=self.normalize)
        raise ParameterError(f"kind must be 'attention' or 'matmul', got {self.kind!r}", param="kind")

    @property
    def label(self) -> str:
        if self.kind == "matmul":
            return "matmul {}x{}x{}".format(*self.sizes)
        Nq, Nkv, d = self.sizes
        size = f"N={Nq}" if Nq == Nkv else f"Nq={Nq} Nkv={Nkv}"
        extra = ("" if self.rowmax else " no-max") + ("" if self.normalize == "P" else " norm=O")
        return f"attention {size} d={d}{extra}"


def simulated(inst: Instance, M: int) -> list[tuple[str, int | None, str]]:
    """Every exact registered algorithm (the blocked matmul for a matmul instance) run in count
    mode at this M.

    Returns ``(name, total I/O or None, note)``; None with ``"cannot run: <reason>"`` when the
    algorithm cannot run the instance with M words (the mapper's
    :func:`~attnio.algorithms.mapper.can_run`: ``needs M >= m`` when its least M exceeds M).
    """
    out: list[tuple[str, int | None, str]] = []
    if inst.kind == "matmul":
        need = MATMUL.min_M()
        if M < need:
            return [(MATMUL.name, None, f"cannot run: needs M >= {need}")]
        return [(MATMUL.name, run_matmul(shape=inst.sizes, M=M).io.total, "")]
    shape = Shape(*inst.sizes)
    for alg in algorithms.all_algorithms(exact=True):
        why = mapper.can_run(alg, shape, M)
        if why is not None:
            out.append((alg.name, None, f"cannot run: {why}"))
            continue
        out.append((alg.name, run(alg.name, shape=shape, M=M, mode="count").io.total, ""))
    return out


def seed_bounds(inst: Instance, M: int) -> list[tuple[str, float, bool]]:
    """The seed bounds of :mod:`attnio.bounds` at this size: ``(name, value, explicit)``."""
    if inst.kind == "matmul":
        m, k, n = inst.sizes
        bs = [bounds.matmul(m=m, k=k, n=n, M=M), bounds.matmul_cosma(m=m, k=k, n=n, M=M)]
    else:
        Nq, Nkv, d = inst.sizes
        if Nq == Nkv:
            bs = bounds.applicable(N=Nq, d=d, M=M)
        else:
            bs = bounds.applicable(N=Nq, d=d, M=M, Nkv=Nkv)
    return [(b.name, float(b.value), bool(b.explicit)) for b in bs]


#: The longest a comparison may solve (a day): the instances are tiny, and a larger limit is a
#: mistake (``--time-limit 1e300`` ran on without end).
MAX_TIME_LIMIT_S = 86_400


def compare(inst: Instance, M: int, *, time_limit: float = 60.0, sliding: bool = True,
            sliding_time_limit: float | None = None, workers: int = 2,
            on_phase: Callable[[str], None] | None = None) -> dict:
    """The optimum (standard game, and the sliding variant) next to simulated counts and bounds.

    ``time_limit`` is the seconds for both solves together: the standard game gets two thirds
    of it when the sliding variant is solved too, and the sliding variant what is left
    (``sliding_time_limit`` sets its share instead).  ``on_phase(text)`` is told when each solve
    starts (a progress display's label).
    """
    if not (isinstance(time_limit, (int, float)) and not isinstance(time_limit, bool)
            and 0 < time_limit <= MAX_TIME_LIMIT_S):
        raise ParameterError(f"time_limit must be a number of seconds in (0, "
                             f"{MAX_TIME_LIMIT_S:,}] (a day), got {time_limit!r}",
                             param="time_limit")
    g = inst.dag()
    t0 = time.perf_counter()
    first = time_limit if not sliding else (
        time_limit - sliding_time_limit if sliding_time_limit else time_limit * 2 / 3)
    if on_phase is not None:
        on_phase(f"red-blue game, M={M}")
    res = solve(g, M, time_limit=max(0.1, first), options=SolveOptions(workers=workers))
    sl = None
    if sliding:
        if on_phase is not None:
            on_phase(f"sliding variant, M={M}")
        rest = max(0.1, time_limit - (time.perf_counter() - t0))
        sl = solve(g, M, time_limit=rest, sliding=True)
    return {"instance": inst, "dag": g, "M": M, "result": res, "sliding": sl,
            "simulated": simulated(inst, M), "bounds": seed_bounds(inst, M)}


def _fmt_opt(r: PebbleResult | None) -> str:
    if r is None:
        return "—"
    if r.globally_optimal:
        return str(r.io)
    best = "none" if r.io is None else str(r.io)
    return f"[{r.lower_bound}, {best}]"


_SHORT = {"standard": "std", "flash1": "fa1", "flash2": "fa2", "flash_decoding": "fdec",
          "square_tiling": "sq", "matmul": "mm"}


def table_row(c: dict) -> dict:
    """One row of the docs table (strings), from :func:`compare`."""
    r = c["result"]
    sims = ", ".join(f"{_SHORT.get(n, n)} {v}" for n, v, _ in c["simulated"] if v is not None)
    explicit = [(n, v) for n, v, e in c["bounds"] if e]
    best_b = max(explicit, key=lambda x: x[1]) if explicit else None
    return {
        "instance": c["instance"].label,
        "M": str(c["M"]),
        "nodes": str(len(c["dag"])),
        "OPT": _fmt_opt(r),
        "how": r.method,
        "OPT sliding": _fmt_opt(c["sliding"]),
        "simulated (runnable)": sims or "none runnable",
        "trivial (DAG)": str(c["dag"].trivial_bound()),
        "best explicit bound": f"{best_b[1]:g} ({best_b[0]})" if best_b else "—",
        "s": f"{r.seconds + (c['sliding'].seconds if c['sliding'] else 0):.1f}",
    }


TABLE_COLUMNS = ("instance", "M", "nodes", "OPT", "how", "OPT sliding", "simulated (runnable)",
                 "trivial (DAG)", "best explicit bound", "s")


def format_table(rows: Sequence[dict]) -> str:
    """A Markdown table of :func:`table_row` rows."""
    lines = ["| " + " | ".join(TABLE_COLUMNS) + " |",
             "|" + "|".join("---" for _ in TABLE_COLUMNS) + "|"]
    for row in rows:
        lines.append("| " + " | ".join(row[k] for k in TABLE_COLUMNS) + " |")
    return "\n".join(lines)


#: The instances of docs/pebbling.md, smallest first (``benchmarks/pebble_table.py`` runs them).
TABLE_INSTANCES: tuple[tuple[Instance, int], ...] = (
    *((Instance("matmul", (2, 2, 2)), M) for M in (7, 6, 5, 4, 3)),
    *((Instance("attention", (2, 2, 1)), M) for M in (8, 6, 5, 4, 3)),
    *((Instance("attention", (2, 2, 1), normalize="O"), M) for M in (5, 4)),
    *((Instance("attention", (2, 2, 1), rowmax=False), M) for M in (5, 4)),
    *((Instance("attention", (2, 2, 2)), M) for M in (12, 8, 6, 4)),
    *((Instance("attention", (3, 3, 1)), M) for M in (12, 8, 6, 4)),
    *((Instance("matmul", (3, 3, 3)), M) for M in (12, 8, 6)),
    *((Instance("attention", (3, 3, 2)), M) for M in (16, 12, 8)),
)
