"""``--algo plan``: the planner's choice as a series of its own in sweeps and reports.

A sweep's algorithm names are registry names, plus ``plan``: for each configuration the planner
(:func:`attnio.planner.plan_shape`, exact algorithms only, by closed form) picks the schedule and
tiling, the row runs exactly that choice (count or compute mode, as the grid says) and stores it
under the algorithm ``plan`` with the chosen schedule in its tiling (``{"schedule": NAME, ...the
tiling's fields}``; ``sweep export`` flattens it into a ``tiling_schedule`` column).  Its counts
are the chosen schedule's and its closed form that schedule's, so a ``plan`` row is checked like
any other (counts equal to the prediction, never below a proven bound), and it is drawn and
fitted as one more series: the least-I/O envelope of the registered schedules.

>>> series("plan").name, series("flash2").name
('plan', 'flash2')
"""

from __future__ import annotations

from typing import Any, ClassVar

from .. import algorithms as _alg
from ..algorithms import mapper
from ..algorithms.protocol import NO_BLOCK_MASK
from ..core.errors import ParameterError
from ..core.memory import IOCount
from ..core.workload import Shape
from ..planner import plan_shape

__all__ = ["PLAN", "PlanSeries", "chosen", "series"]

#: The name of the planner's series in a grid (``--algo plan``) and in the store.
PLAN = "plan"


class PlanSeries:
    """What a grid and a row ask of an algorithm, for the planner's choice: its name, that it is
    exact, which masks it takes (every mask some registered exact schedule runs) and its least
    workable M (the least over the registered exact schedules that run the workload)."""

    name: ClassVar[str] = PLAN
    summary: ClassVar[str] = "the planner's choice: the least-I/O registered exact schedule"
    exact: ClassVar[bool] = True
    supports_window: ClassVar[bool] = True
    supports_backward: ClassVar[bool] = True  # the planner then scores forwards that can
    supports_block_mask: ClassVar[bool] = False  # sweeps carry no block masks

    def min_M(self, shape: Shape) -> int:
        """The least M at which some registered exact schedule runs ``shape``."""
        need = [a.min_M(shape) for a in _alg.all_algorithms(exact=True)
                if mapper.can_run(a, shape) is None]
        if not need:  # pragma: no cover - flash2 runs every mask
            raise ParameterError(f"no registered schedule runs {shape.describe()}",
                                 param="algo")
        return min(need)

    def unsupported(self, shape: Shape, M: int | None = None) -> str | None:
        """Why the planner's series cannot run ``shape`` (with M words, when given): a block
        mask (sweeps carry none), or an M below every registered exact schedule's least; None:
        it can (what :func:`attnio.algorithms.mapper.can_run` asks a schedule)."""
        if shape.block_mask is not None:
            return NO_BLOCK_MASK
        if M is not None and (need := mapper.needs_M(self, shape, M)) is not None:
            return f"needs M >= {need:,}"
        return None

    def __repr__(self) -> str:
        return f"<series {self.name}: {self.summary}>"


_SERIES = PlanSeries()


def series(name: str) -> Any:
    """The registered algorithm called ``name``, or the planner's series for ``plan``."""
    return _SERIES if name == PLAN else _alg.get(name)


def chosen(shape: Shape, M: int, backward: bool = False) -> tuple[Any, Any, IOCount]:
    """The planner's pick for a workload: (algorithm, tiling, its forward closed form; with
    ``backward`` the forward that writes the logsumexp).  A ParameterError (no schedule fits)
    skips the row."""
    p = plan_shape(shape, M, backward=backward)
    alg = _alg.get(p.chosen.algorithm)
    t = p.chosen.tiling
    pred = alg.cost(shape, t, lse=backward).io
    return alg, t, pred
