"""The Schedule protocol, forward and backward alike, and the plain data it speaks in.

A schedule is three methods (Timeloop's mapspace, model and executor; opt_einsum's path handed as
plain data from its search to its executor):

* ``mapspace(shape, M)`` -> :class:`Mapspace`: the declared tiling schema (:class:`Field`: name,
  type, range), the reason the schedule cannot run this workload with M words (None: it can) and
  the candidate tilings the mapper (:mod:`attnio.algorithms.mapper`) searches;
* ``cost(shape, tiling)`` -> :class:`Cost`: the closed form of one tiling (reads and writes of
  every head, tile steps of one head, the fast-memory footprint, and for an approximate schedule
  its guaranteed error and feature dimension);
* ``execute(mem, arrays, tiling, *, shape, scale)``: the run on the referee
  (:class:`~attnio.core.memory.TwoLevelMemory`).

:class:`~attnio.algorithms.base.Algorithm` and :class:`~attnio.algorithms.base.BackwardSchedule`
implement the three from their hooks (``candidate_tilings``, ``footprint``, ``_predict`` ...).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

import numpy as np

from ..core.memory import IOCount, SlowArray, TwoLevelMemory
from ..core.workload import Shape

if TYPE_CHECKING:
    import numpy.typing as npt

__all__ = ["NO_BACKWARD", "NO_BLOCK_MASK", "NO_WINDOW", "Choice", "Cost", "Families", "Field", "Mapspace",
           "Phase", "Phases", "Schedule", "TilingRows"]

T = TypeVar("T")

#: The reasons :func:`attnio.algorithms.mapper.can_run` gives for a mask or a pass a schedule
#: lacks (the least M it needs reads ``needs M >= ...``).
NO_WINDOW = "no sliding-window support"
NO_BLOCK_MASK = "no block-sparse support"
NO_BACKWARD = "no backward pass"


@dataclass(frozen=True)
class Field:
    """One declared field of a tiling: its ``name``, its ``kind`` (``"int"``, ``"float"``,
    ``"str"`` or ``"bool"``), the closed range ``[low, high]`` of a number (None: unbounded
    there), whether None is allowed (``optional``: the schedule fills it in), the allowed
    strings (``choices``) and a one-line ``doc``."""

    name: str
    kind: str
    low: float | None = None
    high: float | None = None
    optional: bool = False
    choices: tuple[str, ...] = ()
    doc: str = ""


@dataclass(frozen=True)
class Cost:
    """The closed form of one tiling: ``io`` (reads and writes of every head, exactly as the
    simulator counts them), ``steps`` (tile steps of one head), ``footprint`` (peak fast-memory
    words), and for an approximate schedule ``error`` (its guaranteed error factor) and
    ``features`` (its feature dimension r); None for an exact one."""

    io: IOCount
    steps: int
    footprint: int
    error: float | None = None
    features: int | None = None


@dataclass(frozen=True)
class Choice(Generic[T]):
    """The best tiling the mapper found: its every-head count, its steps, and how many candidate
    tilings were considered (``tried``): those that fit, or, where the schedule hands its
    candidates in families (:class:`Families`), those of least count that the steps compared."""

    tiling: T
    predicted: IOCount
    steps: int
    tried: int


@dataclass(frozen=True)
class Families(Generic[T]):
    """A schedule's candidates in families, for the mapper's branch and bound (the schedule's
    ``_families`` hook): family i's tilings are ``members(i)``, listed only when the mapper
    scores them (in the mapspace's order; those that do not fit in M are the mapper's to skip),
    and ``lower[i]`` is a proven lower bound on every one's every-head count; optionally
    ``refined(i)``, a tighter bound the mapper asks, once a count is known, before listing the
    members (where it is dearer than ``lower``).  The mapper breaks ties between equal counts
    and steps toward the first in the families' order (family, then member), or, where the
    schedule gives ``order(i, j, tiling)`` (member j of family i), toward the least of that key
    (the mapspace's order where it is not the families').  Optionally ``member_lower(i,
    tiling)``, a bound on one member's count, non-decreasing along ``members(i)``: the mapper
    stops listing family i once it exceeds the least count found (a family that is a run of
    tilings sorted by their bounds: standard's grid)."""

    lower: Sequence[float]
    members: Callable[[int], Iterable[T]]
    refined: Callable[[int], float] | None = None
    order: Callable[[int, int, T], Any] | None = None
    member_lower: Callable[[int, T], float] | None = None


# ----------------------------------------------------------------------------- phases
@dataclass(frozen=True)
class Phase:
    """One phase of a phase-separable schedule (the schedule's ``_phases`` hook,
    :class:`Phases`): its choices (hashable, e.g. tuples of sides) and their cost, as plain data
    and hooks for the mapper's per-phase search (:func:`attnio.algorithms.mapper.phase_best`).

    * ``cost(choice) -> (count, steps)``: the phase's exact count (one head) and its tile steps;
    * ``footprint(choice)``: its fast-memory words (a choice above M is the mapper's to skip;
      None: every choice is built to fit, and the product's tilings are checked);
    * ``candidates()``: choices every one of which is scored (by branch and bound on
      ``lower(choice)``, a proven lower bound on the count, where given: the same best; or on
      ``lowers(choices)``, the same bounds for the whole pool in one call, e.g. numpy over
      the choices, where a call per choice would cost more than the scoring it saves);
    * ``ranked()``: a pool of ``(estimate, item)`` pairs the mapper first cuts to the ``keep``
      of least estimate (ties: the item), each item then listed as choices by ``expand(item)``
      (default: the item is a choice) and scored with the candidates.  The cut is a
      heuristic, not a bound: it is declared here so that it is seen;
    * ``seed(best)``: the coupling rule, more choices made from the phase's ``offer`` best so
      far (a second pass around them), scored too;
    * ``offer``: how many of the phase's best go into the product, ranked by (count, steps,
      ``order(choice)``; default the choice itself: ties go to the least choice);
    * ``rows()``: more candidates as the rows of an int64 array (n x k; the choice is the tuple
      of a row's integers), for a pool built over numpy, each row a choice built to fit
      (``footprint`` None) and ``order`` that of the rows themselves (the choice, or, as
      ``(len(choice), choice)``, the same for choices of one length); with either
      ``row_costs(rows) -> (counts, steps)``, their exact counts and steps at once (int64),
      or ``row_lowers(rows)``, their bounds (float64; the rows then join the candidates'
      branch and bound, ``lower`` or ``lowers``; with neither, the candidates, tuples of the
      rows' width, are bounded as rows too, in one call).  Rows may repeat each other or a
      candidate: a choice is scored once.
    """

    cost: Callable[[Any], tuple[int, int]]
    footprint: Callable[[Any], int] | None
    candidates: Callable[[], Iterable[Any]] = tuple
    lower: Callable[[Any], float] | None = None
    lowers: Callable[[list[Any]], Sequence[float] | npt.NDArray[np.float64]] | None = None
    ranked: Callable[[], Iterable[tuple[Any, Any]]] | None = None
    keep: int = 0
    expand: Callable[[Any], Iterable[Any]] | None = None
    seed: Callable[[list[Any]], Iterable[Any]] | None = None
    offer: int = 3
    order: Callable[[Any], Any] | None = None
    rows: Callable[[], npt.NDArray[np.int64]] | None = None
    row_costs: Callable[[npt.NDArray[np.int64]],
                        tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]] | None = None
    row_lowers: Callable[[npt.NDArray[np.int64]], npt.NDArray[np.float64]] | None = None

    def __post_init__(self) -> None:
        if self.offer < 1:
            raise ValueError(f"a Phase offers at least one choice, got offer={self.offer}")
        if self.rows is not None and (self.row_costs is None) == (self.row_lowers is None):
            raise ValueError("a Phase with rows gives their row_costs or their row_lowers "
                             "(one of them)")
        if self.row_costs is not None and self.footprint is not None:
            raise ValueError("rows scored at once are built to fit: footprint None")
        if self.lower is not None and self.lowers is not None:
            raise ValueError("a Phase declares its bound once: lower or lowers, not both")
        if self.ranked is not None and self.keep < 1:
            raise ValueError(f"a Phase that declares ranked keeps at least one item, got "
                             f"keep={self.keep}")


@dataclass(frozen=True)
class TilingRows(Generic[T]):
    """A schedule's candidate tilings as the rows of an int64 array (its ``_tiling_rows(shape,
    M)`` hook), in the order of its ``candidate_tilings``, for the mapper's search over numpy
    (:func:`attnio.algorithms.mapper.search`): ``make(*row)`` is the tiling of a row (made only
    for the rows scored), ``footprints(rows)`` their fast-memory words, and ``lowers(rows)``
    proven lower bounds on their every-head counts (float64; None: every row that fits is
    scored).  The same choice and ``tried`` as the search over the tilings themselves."""

    rows: npt.NDArray[np.int64]
    make: Callable[..., T]
    footprints: Callable[[npt.NDArray[np.int64]], npt.NDArray[np.int64]]
    lowers: Callable[[npt.NDArray[np.int64]], npt.NDArray[np.float64]] | None = None


@dataclass(frozen=True)
class Phases(Generic[T]):
    """A schedule whose count and steps are the SUMS of independent ``phases``' (no side of one
    enters another's count; they share only M), declared for the mapper (the schedule's
    ``_phases(shape, M, **options)`` hook): the mapper finds each phase's ``offer`` best
    (:class:`Phase`), and the candidates are their product, one choice per phase made into a
    tiling by ``combine(*choices)``, in the phases' order (the first phase's choice varying
    slowest).  The tiling's footprint is the largest of its phases'."""

    phases: tuple[Phase, ...]
    combine: Callable[..., T]


@dataclass(frozen=True)
class Mapspace(Generic[T]):
    """The legal tilings of one schedule for one workload and M: the declared ``fields``, the
    reason the schedule cannot run it (``unsupported``; None: it can), and the candidates
    (:meth:`tilings`, made on demand: nothing is enumerated for a workload it cannot run).
    The fields may be given as the function that makes them, called when they are read (the
    mapper's search reads only ``unsupported`` and the candidates)."""

    schedule: str
    shape: Shape
    M: int
    _fields: tuple[Field, ...] | Callable[[], tuple[Field, ...]] = field(repr=False)
    unsupported: str | None
    _tilings: Callable[[], Iterable[T]] = field(repr=False, compare=False, default=tuple)

    @property
    def fields(self) -> tuple[Field, ...]:
        """The declared tiling fields (the schema)."""
        f = self._fields
        return f if isinstance(f, tuple) else f()

    def tilings(self) -> Iterable[T]:
        """The candidate tilings (those that do not fit in M are the mapper's to skip)."""
        if self.unsupported is not None:
            return ()
        return self._tilings()

    def field_names(self) -> list[str]:
        return [f.name for f in self.fields]


class Schedule(Protocol):
    """What the mapper, the runner and the planner ask of a schedule, forward or backward."""

    @property
    def name(self) -> str: ...

    @property
    def exact(self) -> bool: ...

    def mapspace(self, shape: Shape, M: int, **options: Any) -> Mapspace[Any]: ...

    def cost(self, shape: Shape, tiling: Any) -> Cost: ...

    def execute(self, mem: TwoLevelMemory, arrays: dict[str, SlowArray], tiling: Any, *,
                shape: Shape, scale: float) -> None: ...

    # the hooks the mapper's loops read (cheaper than a whole Cost per candidate)
    def footprint(self, shape: Shape, tiling: Any) -> int: ...

    def steps(self, shape: Shape, tiling: Any) -> int: ...

    def _total(self, shape: Shape, tiling: Any) -> IOCount: ...
