"""The base classes that implement the Schedule protocol (:mod:`.protocol`) from a schedule's hooks.

A schedule module defines a frozen ``Tiling`` dataclass and one class with

* ``name`` (its registry key) and ``summary``;
* ``candidate_tilings(shape, M)``: the tilings worth considering (the mapspace's candidates);
* ``footprint(shape, tiling)`` and ``min_M(shape)``: the fast-memory words it needs;
* the closed form: ``_predict(shape, tiling)`` (one head; :class:`GroupedAlgorithm`:
  ``_group_count``), or ``_total`` (every head) for a :class:`BackwardSchedule`;
* the run: ``schedule(mem, Q, K, V, O, shape=, tiling=, scale=)`` (one head; grouped:
  ``schedule_group(mem, heads, shape=, tiling=, scale=)`` with ``heads`` a
  :class:`~.common.HeadGroup`), or ``one_kv_head`` / ``run_schedule`` for a backward schedule;
  ``run_schedule(mem, arrays, shape=, tiling=, scale=)`` (every head, the arrays by name) is the
  loop over heads, forward and backward alike.

From these the base classes give the protocol's three methods, ``mapspace(shape, M)``,
``cost(shape, tiling)`` and ``execute(mem, arrays, tiling, shape=, scale=)``, and the checks of a
user tiling (``coerce_tiling``).  Every search (the default tiling, the planner's candidates, the
backward schedule) is the mapper's (:mod:`.mapper`).  The workload (sizes, heads, mask) is one
:class:`~attnio.core.workload.Shape`, validated when it is built.
"""

from __future__ import annotations

import dataclasses
import functools
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar, cast

from ..core.checks import check_int
from ..core.errors import CapacityError, ParameterError
from ..core.memory import IOCount, SlowArray, TwoLevelMemory
from ..core.workload import MAX_SIZE, Shape
from . import mapper
from .common import (
    HeadGroup,
    block_sizes,
    default_scale,
    divisors_upto,
    largest_true,
    prefix_block_keys,
)
from .protocol import NO_BLOCK_MASK, NO_WINDOW, Cost, Field, Mapspace

if TYPE_CHECKING:
    from typing import Protocol

    from _typeshed import DataclassInstance

    class GroupedTiling(DataclassInstance, Protocol):
        """A tiling with a ``group`` field: the query heads of one K/V head run together."""

        @property
        def group(self) -> int: ...

__all__ = ["Algorithm", "BackwardSchedule", "GroupedAlgorithm", "HeadGroup", "TilingT", "block_sizes",
           "default_scale", "divisors_upto", "head_views", "kv_head_groups", "largest_true",
           "prefix_block_keys", "schema_of"]

#: A schedule's tiling type: a (frozen) dataclass of its tile parameters.
TilingT = TypeVar("TilingT", bound="DataclassInstance")
#: The tiling type of a :class:`GroupedAlgorithm`: it has a ``group`` field.
GroupedT = TypeVar("GroupedT", bound="GroupedTiling")


class TiledSchedule(ABC, Generic[TilingT]):
    """What a forward and a backward schedule share: the :class:`~.protocol.Schedule` protocol
    (:meth:`mapspace`, :meth:`cost`, :meth:`execute`) built from the hooks a schedule writes —
    a frozen ``Tiling`` (the type parameter), :meth:`candidate_tilings`, :meth:`footprint`,
    :meth:`min_M`, :meth:`steps` and the closed form (``_predict`` forward, per head;
    ``_total`` backward, every head)."""

    name: ClassVar[str]
    summary: ClassVar[str]
    Tiling: type[TilingT]  # set on each schedule's class (a ClassVar cannot hold a TypeVar)
    exact: ClassVar[bool] = True
    supports_window: ClassVar[bool] = False
    supports_block_mask: ClassVar[bool] = False
    #: The argument a user passes the tiling as (its fields are named ``<tiling_param>.<field>``
    #: in errors): ``tiling`` forward, ``backward_tiling`` backward.
    tiling_param: ClassVar[str] = "tiling"
    #: The declared tiling schema; None: read from ``Tiling``'s annotations (ints in
    #: [1, 2**50], ``int | None`` optional, floats, strings, booleans).
    fields: ClassVar[tuple[Field, ...] | None] = None
    _called: ClassVar[str] = ""  # what messages say before the name ("the backward schedule ")

    @abstractmethod
    def candidate_tilings(self, shape: Shape, M: int) -> Iterable[TilingT]:
        """Tilings worth considering for this workload (those that do not fit M are skipped)."""

    @abstractmethod
    def footprint(self, shape: Shape, tiling: TilingT) -> int:
        """Peak fast-memory words the schedule needs with this tiling."""

    @abstractmethod
    def min_M(self, shape: Shape) -> int:
        """The least M for which some tiling fits."""

    @abstractmethod
    def _total(self, shape: Shape, tiling: TilingT) -> IOCount:
        """Closed-form count of every head, exactly as the simulator counts it."""

    def steps(self, shape: Shape, tiling: TilingT) -> int:
        """Tile steps of one head (used to break ties toward fewer, larger steps)."""
        return 0

    def count_walk(self, shape: Shape, tiling: TilingT) -> int:
        """Blocks a bulk count-mode run walks one by one (the runner estimates its time from
        them, before running): 0 where runs of alike blocks execute once whatever the sizes."""
        return 0

    # -------------------------------------------------------------- the protocol
    def schema(self) -> tuple[Field, ...]:
        """The declared tiling fields (:attr:`fields`, or read from ``Tiling``)."""
        return self.fields if self.fields is not None else schema_of(self.Tiling)

    def validate_tiling(self, shape: Shape, tiling: TilingT) -> None:
        """Check every integer field of the schema (tile sizes, counts) is an integer in its
        range, [1, 2**50] by default (no size of a workload is larger,
        :data:`~attnio.core.workload.MAX_SIZE`; None allowed where the field is optional);
        subclasses add their own rules."""
        for f in self.schema():
            if f.kind != "int":
                continue
            v = getattr(tiling, f.name)
            if v is None and f.optional:
                continue
            check_int(f"{self.tiling_param}.{f.name}", v, minimum=int(f.low or 1),
                      maximum=int(f.high) if f.high is not None else MAX_SIZE)

    def covered_by(self, shape: Shape) -> str | None:
        """The registered schedule whose count equals this one's word for word on ``shape``
        (the planner then leaves it out: its search would only repeat that one's), or None."""
        return None

    def unsupported(self, shape: Shape, M: int | None = None) -> str | None:
        """Why this schedule cannot run ``shape`` (with M words, when given): the mask it does
        not support, or the least M it needs; None: it can.  :func:`.mapper.can_run` asks it."""
        if shape.window is not None and not self.supports_window:
            return NO_WINDOW
        if shape.block_mask is not None and not self.supports_block_mask:
            return NO_BLOCK_MASK
        if M is not None and (need := mapper.needs_M(self, shape, M)) is not None:
            return f"needs M >= {need:,}"
        return None

    def mapspace(self, shape: Shape, M: int, **options: Any) -> Mapspace[TilingT]:
        """The legal tilings for ``shape`` and M: the schema, why the workload cannot run
        (None: it can) and the candidates (``options``: a schedule's own, e.g. an approximate
        schedule's error target)."""
        return Mapspace(self.name, shape, M, self.schema, self.unsupported(shape, M),
                        lambda: self.mapspace_tilings(shape, M, **options))

    def mapspace_tilings(self, shape: Shape, M: int, **options: Any) -> Iterable[TilingT]:
        """The mapspace's candidates: :meth:`candidate_tilings` (a schedule with options
        overrides this)."""
        if options:
            raise ParameterError(f"{self.name} takes no tiling options, got {sorted(options)}")
        return self.candidate_tilings(shape, M)

    def cost(self, shape: Shape, tiling: TilingT) -> Cost:
        """The closed form of ``tiling`` (validated: :meth:`coerce_tiling`) for ``shape``."""
        return Cost(self._total(shape, tiling), self.steps(shape, tiling),
                    self.footprint(shape, tiling))

    def _least_io_tiling(self, shape: Shape, M: int) -> TilingT:
        """The least-I/O candidate tiling, the mapper's search over the mapspace (a
        ParameterError naming M when M < min_M)."""
        mapper.check_M(self, shape, M)
        found = mapper.least(self, shape, M)
        if found is None:  # pragma: no cover - min_M guarantees a candidate
            raise ParameterError(f"{self.name}: no tiling fits in M={M}", param="M")
        return cast(TilingT, found.tiling)

    def _check_fits(self, shape: Shape, M: int, tiling: TilingT) -> None:
        """A CapacityError when ``tiling`` needs more than M words of fast memory."""
        need = self.footprint(shape, tiling)
        if need > M:
            raise CapacityError(f"{self.name} with tiling {tiling}", 0, need, M)

    def _tiling_fields(self) -> list[str]:
        return sorted(f.name for f in dataclasses.fields(self.Tiling))


@functools.lru_cache(maxsize=None)
def schema_of(tiling: type) -> tuple[Field, ...]:
    """The fields of a tiling dataclass as a schema: ``int`` in [1, 2**50] (``int | None``:
    optional), ``float``, ``str``, ``bool``, by annotation."""
    out = []
    for f in dataclasses.fields(tiling):
        kind = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", "")
        optional = "None" in kind
        base = kind.replace("| None", "").replace("None |", "").strip()
        if base.startswith("int"):
            out.append(Field(f.name, "int", 1, MAX_SIZE, optional))
        else:
            out.append(Field(f.name, base or "object", None, None, optional))
    return tuple(out)


class Algorithm(TiledSchedule[TilingT]):
    """One schedule of attention on the two-level memory.

    Every method takes the workload as a :class:`~attnio.core.workload.Shape`, mask included:
    ``shape.causal``, ``shape.causal_align`` and ``shape.window`` say which scores are visible.
    A schedule writes :meth:`candidate_tilings`, :meth:`footprint`, :meth:`min_M`,
    :meth:`_predict` (one head) and :meth:`schedule` (one head); the rest follows.
    """

    supports_backward: ClassVar[bool] = False  # writes the logsumexp a backward schedule needs
    #: Its own backward schedule, the one ``backward=True`` estimates with (None: the registry's
    #: least-I/O one).
    backward: ClassVar[BackwardSchedule[Any] | None] = None
    #: The registered schedule that is its form for sliding windows (named when it refuses one).
    windowed_form: ClassVar[str | None] = None

    def slow_workspace(self, shape: Shape, tiling: TilingT) -> int | None:
        """Words of slow-memory workspace one head writes where that exceeds its counted writes
        (scores written on a band of a full matrix); None: no more than its writes."""
        return None

    # -------------------------------------------------------------- tilings
    @abstractmethod
    def _predict(self, shape: Shape, tiling: TilingT) -> IOCount:
        """Closed-form count of one head for a validated tiling."""

    def _lower_total(self, shape: Shape) -> Callable[[TilingT], float] | None:
        """A cheap lower bound on the every-head count for the tilings of ``shape`` (a function
        of the tiling), or None (the default: the mapper scores every candidate)."""
        return None

    def default_tiling(self, shape: Any, M: int, causal: object = None) -> TilingT:
        """The least-I/O candidate tiling; ties broken toward fewer steps (the mapper's)."""
        shape = Shape.coerce(shape).with_mask(causal)
        M = check_int("M", M, minimum=1)
        return self._least_io_tiling(shape, M)

    def coerce_tiling(self, shape: Shape, M: int, tiling: Any = None, inputs: Any = None
                      ) -> TilingT:
        """Validate a user tiling (a Tiling, a mapping of its fields, or None for the default).

        ``inputs`` is ``(Q, K, V)`` in compute mode (None in count mode), for algorithms whose
        parameters depend on the data (an entry bound, say); exact algorithms ignore it.
        """
        if tiling is None or tiling == "auto":
            return self.default_tiling(shape, M)
        if isinstance(tiling, Mapping):
            tiling = self._tiling_from_mapping(tiling)
        if not isinstance(tiling, self.Tiling):
            raise ParameterError(f"tiling for {self.name} must be a {self.Tiling.__name__} or a "
                                 f"mapping of its fields {self._tiling_fields()}", param="tiling")
        self.validate_tiling(shape, tiling)
        self._check_fits(shape, M, tiling)
        return tiling

    def estimate_tiling(self, tiling: Any, entry_bound: float | None) -> Any:
        """The tiling a run's estimate prices, before its inputs are drawn (with entries bounded
        by ``entry_bound``) or read (None): ``tiling`` itself, as given (an exact schedule's
        count does not depend on the data; an approximate one fills in what it does)."""
        return tiling

    def count_needs(self, tiling: Any) -> str | None:
        """The parameter a count-mode run of ``tiling`` (a user tiling: None, a mapping or a
        Tiling) lacks, there being no inputs to measure: None (the default: nothing)."""
        return None

    def _tiling_from_mapping(self, tiling: Mapping[str, Any], required: bool = True
                             ) -> TilingT:
        names = set(self._tiling_fields())
        unknown = set(tiling) - names
        if unknown:
            raise ParameterError(f"tiling for {self.name} has unknown field(s) {sorted(unknown)}; "
                                 f"its fields are {sorted(names)}", param="tiling")
        if required:
            missing = [f.name for f in dataclasses.fields(self.Tiling)
                       if f.default is dataclasses.MISSING
                       and f.default_factory is dataclasses.MISSING and f.name not in tiling]
            if missing:
                raise ParameterError(f"tiling for {self.name} is missing field(s) {missing}; its "
                                     f"fields are {sorted(names)}", param="tiling")
        return self.Tiling(**tiling)

    # -------------------------------------------------------------- counts
    def _total(self, shape: Shape, tiling: TilingT) -> IOCount:
        """Closed form over every head: heads are independent problems (``_predict`` is per head)."""
        return self._predict(shape, tiling).scaled(shape.n_heads)

    def cost(self, shape: Shape, tiling: TilingT, *, lse: bool = False) -> Cost:
        """The closed form of ``tiling``; ``lse``: the forward pass that also writes the
        logsumexp (Nq words a head) a backward schedule reads (``supports_backward`` only)."""
        c = super().cost(shape, tiling)
        if lse:
            if not self.supports_backward:
                raise ParameterError(f"{self.name} has no backward pass (it writes no "
                                     "logsumexp)", param="backward")
            c = dataclasses.replace(c, io=c.io + IOCount(0, shape.n_heads * shape.Nq))
        return c

    def predicted_io(self, shape: Any, M: int, *, tiling: Any = None,
                     causal: object = None) -> IOCount:
        """The user's shortcut: ``cost(shape, coerce_tiling(shape, M, tiling)).io`` for sizes
        given any way :meth:`Shape.coerce` takes (``causal`` merges a mask into them)."""
        shape = Shape.coerce(shape).with_mask(causal)
        M = check_int("M", M, minimum=1)
        return self.cost(shape, self.coerce_tiling(shape, M, tiling)).io

    # -------------------------------------------------------------- the run
    def execute(self, mem: TwoLevelMemory, arrays: Mapping[str, SlowArray], tiling: TilingT, *,
                shape: Shape, scale: float) -> None:
        """The run on the referee: ``arrays`` holds Q, K, V (inputs) and O (output), stacked by
        head, and L (the logsumexp, written when present)."""
        self.run_schedule(mem, arrays, shape=shape, tiling=tiling, scale=scale)

    def run_schedule(self, mem: TwoLevelMemory, arrays: Mapping[str, SlowArray], *,
                     shape: Shape, tiling: TilingT, scale: float) -> None:
        """Run every head: ``arrays`` holds Q and O (``batch x heads`` blocks of Nq rows), K and
        V (``batch x kv_heads`` blocks of Nkv rows) and, when the logsumexp is written for a
        backward pass, L (Nq words a head).  Each query head runs :meth:`schedule` on views of
        its own rows and of its key/value head's rows; schedules that share K/V tiles across a
        query group, or write the logsumexp, override this."""
        Q, K, V, O = arrays["Q"], arrays["K"], arrays["V"], arrays["O"]
        if arrays.get("L") is not None:
            raise ParameterError(f"{self.name} has no backward pass (it writes no logsumexp)")
        if shape.n_heads == 1:
            self.schedule(mem, Q, K, V, O, shape=shape, tiling=tiling, scale=scale)
            return
        for hb in mem.blocks(shape.n_heads, 1):
            q, k, v, o = head_views(mem, shape, hb.start, Q, K, V, O)
            self.schedule(mem, q, k, v, o, shape=shape, tiling=tiling, scale=scale)

    # -------------------------------------------------------------- the schedule
    @abstractmethod
    def schedule(self, mem: TwoLevelMemory, Q: SlowArray, K: SlowArray, V: SlowArray,
                 O: SlowArray, *, shape: Shape, tiling: TilingT, scale: float) -> None:
        """Run the schedule for one head: read Q, K, V through ``mem``, leave the output in O."""

    def __repr__(self) -> str:
        return f"<algorithm {self.name}: {self.summary}>"


class GroupedAlgorithm(Algorithm[GroupedT]):
    """A schedule that runs ``tiling.group`` query heads of one K/V head together, each K/V tile
    loaded once for the group: subclasses write :meth:`_group_count` (the words one group moves)
    and :meth:`schedule_group`; the per-head count, the total and the head loop follow."""

    def validate_tiling(self, shape: Shape, tiling: GroupedT) -> None:
        super().validate_tiling(shape, tiling)
        if shape.group % tiling.group:
            raise ParameterError(f"tiling.group must divide heads/kv_heads = {shape.group}, got "
                                 f"{tiling.group}", param="tiling")

    @abstractmethod
    def _group_count(self, shape: Shape, tiling: GroupedT) -> IOCount:
        """Words moved by one group of ``tiling.group`` query heads and their K/V head."""

    def _predict(self, shape: Shape, tiling: GroupedT) -> IOCount:
        """One head's count: the group's when ``group`` is 1 (the per-head view the bounds
        compare; GQA totals are :meth:`cost`'s)."""
        return self._group_count(shape, dataclasses.replace(tiling, group=1))

    def _total(self, shape: Shape, tiling: GroupedT) -> IOCount:
        return self._group_count(shape, tiling).scaled(shape.n_heads // tiling.group)

    def run_schedule(self, mem: TwoLevelMemory, arrays: Mapping[str, SlowArray], *,
                     shape: Shape, tiling: GroupedT, scale: float) -> None:
        """Every group of ``tiling.group`` query heads against its K/V head; ``arrays["L"]``
        (stacked by head, Nq words each; optional) receives the logsumexp of every row."""
        Q, K, V, O, lse = arrays["Q"], arrays["K"], arrays["V"], arrays["O"], arrays.get("L")
        if lse is not None and not self.supports_backward:
            raise ParameterError(f"{self.name} has no backward pass (it writes no logsumexp)")
        G, Nq = tiling.group, shape.Nq
        for gb in mem.blocks(shape.n_heads // G, 1):  # alike: bulk count mode runs one
            heads = [gb.start * G + g for g in range(G)]
            views = [head_views(mem, shape, h, Q, K, V, O) for h in heads]
            lses = None
            if lse is not None:
                lses = tuple(mem.view(lse, slice(h * Nq, (h + 1) * Nq)) for h in heads)
            group = HeadGroup(tuple(v[0] for v in views), views[0][1], views[0][2],
                              tuple(v[3] for v in views), lses)
            self.schedule_group(mem, group, shape=shape, tiling=tiling, scale=scale)

    def schedule(self, mem: TwoLevelMemory, Q: SlowArray, K: SlowArray, V: SlowArray,
                 O: SlowArray, *, shape: Shape, tiling: GroupedT, scale: float) -> None:
        self.schedule_group(mem, HeadGroup.one(Q, K, V, O), shape=shape,
                            tiling=dataclasses.replace(tiling, group=1), scale=scale)

    @abstractmethod
    def schedule_group(self, mem: TwoLevelMemory, heads: HeadGroup, *, shape: Shape,
                       tiling: GroupedT, scale: float) -> None:
        """Query heads ``heads.Qs`` (one group) against their K/V head ``heads.K``,
        ``heads.V``, outputs to ``heads.Os``; ``heads.lse`` (optional) receives each row's
        logsumexp."""


class BackwardSchedule(TiledSchedule[TilingT]):
    """One schedule of attention's backward pass on the two-level memory.

    Inputs in slow memory: Q, K, V, the forward output O, its gradient dO and the logsumexp L
    that a forward with ``supports_backward`` writes; outputs dQ, dK, dV (all stacked by head,
    as :func:`attnio.run` places them).  Every method takes the workload as a
    :class:`~attnio.core.workload.Shape`, mask and heads included; a schedule writes
    :meth:`candidate_tilings`, :meth:`footprint`, :meth:`min_M`, ``_total`` (every head) and
    :meth:`one_kv_head` or :meth:`run_schedule`.  The registry
    (:func:`attnio.algorithms.backward_names`) lists the schedules; the mapper
    (:func:`attnio.algorithms.mapper.best_backward`) picks the least-I/O one by closed form.
    """

    supports_window: ClassVar[bool] = True
    supports_block_mask: ClassVar[bool] = False
    tiling_param: ClassVar[str] = "backward_tiling"
    _called = "the backward schedule "

    def execute(self, mem: TwoLevelMemory, arrays: Mapping[str, SlowArray], tiling: TilingT, *,
                shape: Shape, scale: float) -> None:
        """The run on the referee: ``arrays`` holds Q, K, V, O, dO, L (inputs) and dQ, dK, dV
        (outputs), stacked by head."""
        self.run_schedule(mem, dict(arrays), shape=shape, tiling=tiling, scale=scale)

    def run_schedule(self, mem: TwoLevelMemory, arrays: dict[str, SlowArray], *, shape: Shape,
                     tiling: TilingT, scale: float) -> None:
        """``arrays``: Q, K, V, O, dO, L (inputs) and dQ, dK, dV (outputs), stacked by head.  By
        default one K/V head at a time (:func:`kv_head_groups`), by :meth:`one_kv_head`."""
        for qv, kv in kv_head_groups(mem, arrays, shape):
            self.one_kv_head(mem, qv, kv, shape=shape, tiling=tiling, scale=scale)

    def one_kv_head(self, mem: TwoLevelMemory, qv: dict[str, list[SlowArray]],
                    kv: dict[str, SlowArray], *, shape: Shape, tiling: TilingT,
                    scale: float) -> None:
        """One K/V head and its query heads (the views of :func:`kv_head_groups`); a schedule
        either writes this or overrides :meth:`run_schedule`."""
        raise NotImplementedError(f"{self.name} overrides run_schedule")

    def workspace(self, shape: Shape) -> int:
        """Words of slow-memory workspace the schedule allocates (every head)."""
        return 0

    def check_shape(self, shape: Shape) -> None:
        """Raise a ParameterError naming the mask this schedule does not support."""
        why = self.unsupported(shape)  # the mask (M is checked with the tiling)
        if why is not None:  # the user chose this schedule: name the choice, not the mask
            raise ParameterError(f"backward_algorithm={self.name!r} has {why}; flash2_backward "
                                 "supports every mask", param="backward_algorithm")

    def coerce_tiling(self, shape: Shape, M: int, tiling: Any = None) -> TilingT:
        """Validate a user tiling (a Tiling, a mapping of its fields, or None for the least-I/O
        candidate) against the shape and the capacity M."""
        self.check_shape(shape)
        if tiling is None or tiling == "auto":
            return self._least_io_tiling(shape, M)
        fields = self._tiling_fields()
        if isinstance(tiling, Mapping):
            if set(tiling) != set(fields):
                raise ParameterError(f"backward tiling for {self.name} needs exactly the fields "
                                     f"{fields}, got {sorted(tiling)}", param="backward_tiling")
            tiling = self.Tiling(**tiling)
        if not isinstance(tiling, self.Tiling):
            raise ParameterError(f"backward tiling for {self.name} must be a "
                                 f"{self.Tiling.__name__} or a mapping of its fields {fields}, "
                                 f"got {tiling!r}", param="backward_tiling")
        self.validate_tiling(shape, tiling)
        self._check_fits(shape, M, tiling)
        return tiling

    def __repr__(self) -> str:
        return f"<backward schedule {self.name}: {self.summary}>"


def head_views(mem: TwoLevelMemory, shape: Shape, qh: int, Q: SlowArray, K: SlowArray,
               V: SlowArray, O: SlowArray) -> tuple[SlowArray, SlowArray, SlowArray, SlowArray]:
    """Views of query head ``qh`` (0 <= qh < batch*heads) and of its key/value head."""
    b, h = divmod(qh, shape.heads)
    kv_per_batch = shape.heads // shape.group  # = shape.kv_heads, as an int
    kvh = b * kv_per_batch + h // shape.group
    qs = slice(qh * shape.Nq, (qh + 1) * shape.Nq)
    ks = slice(kvh * shape.Nkv, (kvh + 1) * shape.Nkv)
    return (mem.view(Q, qs, f"Q[{b},{h}]"), mem.view(K, ks, f"K[{b},{kvh % kv_per_batch}]"),
            mem.view(V, ks, f"V[{b},{kvh % kv_per_batch}]"), mem.view(O, qs, f"O[{b},{h}]"))


def kv_head_groups(
    mem: TwoLevelMemory, arrays: dict[str, SlowArray], shape: Shape,
    scratch_cols: Mapping[str, int] | None = None,
) -> Iterator[tuple[dict[str, list[SlowArray]], dict[str, SlowArray]]]:
    """The views a backward schedule works on, one K/V head at a time (alike heads: bulk count
    mode runs one): ``(qv, kv)`` with ``qv`` the group's query heads' Q, O, dO, dQ, L and the
    scratch D = rowsum(dO ∘ O), and ``kv`` that head's K, V, dK, dV.  ``arrays``: Q, K, V, O, dO,
    L (inputs) and dQ, dK, dV (outputs), stacked by head.  ``scratch_cols`` adds, per name, a
    scratch of that many columns a query row (also in ``qv``)."""
    Nq, Nkv = shape.Nq, shape.Nkv
    work = {"D": mem.scratch("D", (shape.n_heads * Nq,))}
    for name, cols in (scratch_cols or {}).items():
        work[name] = mem.scratch(name, (shape.n_heads * Nq, cols))
    named = [(n, arrays[n]) for n in ("Q", "O", "dO", "dQ", "L")] + list(work.items())
    for kvb in mem.blocks(shape.n_kv_heads, 1):
        kvh = kvb.start
        ks = slice(kvh * Nkv, (kvh + 1) * Nkv)
        q_heads = range(kvh * shape.group, (kvh + 1) * shape.group)
        qv = {name: [mem.view(arr, slice(h * Nq, (h + 1) * Nq)) for h in q_heads]
              for name, arr in named}
        yield qv, {n: mem.view(arrays[n], ks) for n in ("K", "V", "dK", "dV")}
