"""The certificate's two factors: the planner's total over the best schedule a denser search
finds (the schedule slack), and that schedule over the best explicit bound (the bound slack).

A second search, separate from the ranking: it runs only when asked (``attnio plan --factors``,
:meth:`Plan.factors <attnio.planner.planner.Plan.factors>`), over every tiling of the dense
families instead of the planner's candidates (docs/bounds.md §13.2).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .. import algorithms as _alg
from ..algorithms import mapper
from ..core.resources import fmt_count
from ..core.workload import Shape
from .records import PlanRecord

__all__ = ["CertificateFactors", "certificate_factors"]


@dataclass(frozen=True)
class CertificateFactors:
    """The certificate total/bound split in two (issue 25): the planner's count over the best
    schedule found by any means on that shape (:attr:`schedule_factor`: slack in the planner's
    search), and that over the best explicit bound (:attr:`bound_factor`: slack in the bound or in
    every schedule known).  Their product is the plan's ratio; :attr:`how` says how "any means"
    searched, :attr:`complete` whether the search ran to its end (False: stopped at its time
    budget, the factors then from what was searched)."""

    total: int  #: the planner's predicted count
    best_found: int  #: the least count of any schedule found (<= total)
    best_found_by: str  #: the algorithm that found it ("loop search": attnio.pebble.loops)
    best_found_tiling: Any
    bound: float  #: the best explicit lower bound
    searched: int  #: tilings scored beyond the planner's own candidates
    loop_orders: int = 0  #: schedules of the loop-order search run on the referee (tiny shapes)
    how: str = ""  #: how "any means" searched, in words
    complete: bool = True  #: False when the time budget stopped the search

    @property
    def schedule_factor(self) -> float:
        return self.total / self.best_found if self.best_found else 1.0

    @property
    def bound_factor(self) -> float | None:
        return self.best_found / self.bound if self.bound > 0 else None

    def to_dict(self) -> dict[str, Any]:
        t = self.best_found_tiling
        t = (dataclasses.asdict(t) if dataclasses.is_dataclass(t) and not isinstance(t, type)
             else str(t))
        return {"schedule_factor": self.schedule_factor, "bound_factor": self.bound_factor,
                "total": self.total, "best_found": self.best_found,
                "best_found_by": self.best_found_by, "best_found_tiling": t,
                "bound": self.bound, "tilings_searched": self.searched,
                "loop_orders_searched": self.loop_orders, "how": self.how,
                "complete": self.complete}

    def lines(self) -> list[str]:
        """The two factors in words (``attnio plan`` prints them under the ratio)."""
        bf = self.bound_factor
        where = ("the planner's pick is the best schedule found" if self.best_found == self.total
                 else f"{self.best_found_by} {self.best_found_tiling} moves {self.best_found:,}")
        return [f"    Schedule slack:  {self.schedule_factor:.2f}x (planner total / best schedule "
                f"found by any means: {where})",
                "       Bound slack:  " + ("n/a" if bf is None else f"{bf:.2f}x") +
                " (best schedule found / best lower bound)",
                f"     Searched with:  {self.how}"]

    def __str__(self) -> str:
        bf = self.bound_factor
        return (f"planner {self.total:,} / best found {self.best_found:,} ({self.best_found_by} "
                f"{self.best_found_tiling}) = {self.schedule_factor:.3f}; best found / bound "
                f"{fmt_count(self.bound)} = " + ("n/a" if bf is None else f"{bf:.3f}"))


#: The loop-order search (:mod:`attnio.pebble.loops`) joins "any means" on its tiny shapes when
#: it has at most this many schedules (``loop_search=None``; about 1 s), always with ``True``.
LOOP_SEARCH_AUTO = 800


def _loop_search_fits(shape: Shape, M: int) -> int:
    """How many schedules the loop-order search has for this shape (0: not a shape it covers:
    one head, no mask, Nq, Nkv <= 8, d <= 3)."""
    from ..pebble import loops

    lim = loops.LIMITS
    if (shape.causal or shape.window is not None or shape.block_mask is not None
            or shape.batch * shape.heads != 1 or max(shape.Nq, shape.Nkv) > lim["N"]
            or shape.d > lim["d"] or M > lim["M"]):
        return 0
    return sum(1 for _ in loops.enumerate_schedules(shape.Nq, shape.Nkv, shape.d))


def certificate_factors(p: PlanRecord, *, cheap: int = 64, budget_s: float | None = None,
                        loop_search: bool | None = None,
                        progress: Callable[[int, int], None] | None = None) -> CertificateFactors:
    """The plan's certificate as two factors (docs/bounds.md §13): the planner's count over the
    best schedule found by any means, and that over the best explicit bound.

    "Any means": the least count of the planner's candidates, and a denser search over every
    registered exact algorithm whose tiling is made of query rows ``Br``, key rows ``Bc``, a
    query-head ``group`` and a score chunk ``Bs`` — every size when the axis has at most
    ``cheap`` rows (exhaustive), the fewest-blocks sizes and a 2^(1/4) grid otherwise — scored by
    closed form (every count equals the simulator's); on tiny shapes (one head, no mask,
    Nq, Nkv <= 8, d <= 3) also the exhaustive loop-order search of :mod:`attnio.pebble.loops`
    (every schedule run on the referee): with ``loop_search=None`` when it has at most
    :data:`LOOP_SEARCH_AUTO` schedules, with True always, with False never.  ``budget_s`` stops
    the search after that many seconds (``complete=False``); ``progress(done, total)`` is told
    after each algorithm.  Not cached; the planner does not call it (its cold time is
    unchanged).  None of this applies to an approximate plan (the schedule factor is then 1)."""
    shape, M = p.shape, p.memory.M
    best = (p.chosen.predicted.total, p.chosen.algorithm, p.chosen.tiling)
    searched, n_loops, complete = 0, 0, True
    t0 = time.perf_counter()
    algs_run: list[str] = []
    n_loop = 0
    if p.chosen.exact:
        n_loop = _loop_search_fits(shape, M)
        if loop_search is False or (loop_search is None and n_loop > LOOP_SEARCH_AUTO):
            n_loop = 0
        algs = [a for a in _alg.all_algorithms(exact=True) if mapper.dense_searchable(a)]
        total_work = len(algs) + (1 if n_loop else 0)
        for k, alg in enumerate(algs):
            if budget_s is not None and time.perf_counter() - t0 > budget_s:
                complete = False
                break
            tilings = mapper.dense_tilings(alg, shape, M, cheap)
            if tilings is None:  # a mask it does not support, or M below its least
                continue
            found = mapper.search(alg, shape, M, tilings)
            algs_run.append(alg.name)
            if progress is not None:
                progress(k + 1, total_work)
            if found is None:
                continue
            searched += found.tried
            if found.predicted.total < best[0]:
                best = (found.predicted.total, alg.name, found.tiling)
        if n_loop and complete:
            from ..pebble import loops

            res = loops.search(shape.Nq, shape.Nkv, shape.d, M)
            n_loops = n_loop
            if res and res[0].io < best[0]:
                best = (res[0].io, "loop search", res[0].schedule.short())
            if progress is not None:
                progress(total_work, total_work)
    if not p.chosen.exact:
        how = "nothing (an approximate plan: exact schedules and bounds do not compare to it)"
    else:
        how = (f"the planner's {len(p.candidates)} candidates; {searched:,} tilings of "
               f"{', '.join(algs_run) or 'no algorithm'} by closed form (every size on axes of "
               f"<= {cheap} rows, the fewest-blocks sizes and a 2^(1/4) grid beyond)")
        if n_loops:
            how += (f"; {n_loops:,} loop orders tried on the simulator (attnio.pebble.loops, "
                    "exhaustive on this tiny shape)")
        if not complete:
            how += f"; stopped at the {budget_s:g} s budget"
    return CertificateFactors(p.chosen.predicted.total, best[0], best[1], best[2],
                              p.certificate.best_bound.value, searched, n_loops, how, complete)
