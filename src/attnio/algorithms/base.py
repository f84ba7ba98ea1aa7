"""The ``Algorithm`` protocol every schedule implements, and the shapes and counts it speaks in.

An algorithm is a stateless object with

* ``name`` (its registry key) and ``summary``;
* ``Tiling``: a frozen dataclass of its tile parameters (the protocol is generic over it:
  ``class Flash2(Algorithm[Flash2Tiling])``, so every method that takes a tiling says which);
* ``candidate_tilings(shape, M)``: the tilings it considers (the planner scores them);
* ``footprint(shape, tiling)``: the peak fast-memory words the schedule needs;
* ``predicted_io(shape, M, tiling=None)``: the closed-form count, exactly as the simulator counts
  it;
* ``schedule(mem, Q, K, V, O, shape=, tiling=, scale=)``: the schedule itself, on a
  :class:`~attnio.core.memory.TwoLevelMemory`.

The workload (sizes, heads, mask) is one :class:`~attnio.core.workload.Shape`, validated when it
is built.  :meth:`Algorithm.search` picks, among the candidates that fit in M, the one with the
least predicted I/O, ties broken toward fewer, larger steps (the default tiling, and what the
planner scores).
"""

from __future__ import annotations

import dataclasses
import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

from ..core.checks import check_int, check_real
from ..core.errors import CapacityError, ParameterError
from ..core.memory import IOCount, SlowArray, TwoLevelMemory
from ..core.workload import MAX_SIZE, Shape, cdiv

if TYPE_CHECKING:
    from typing import Protocol

    from _typeshed import DataclassInstance

    class GroupedTiling(DataclassInstance, Protocol):
        """A tiling with a ``group`` field: the query heads of one K/V head run together."""

        @property
        def group(self) -> int: ...

__all__ = ["Algorithm", "BackwardSchedule", "GroupedAlgorithm", "TilingT", "block_sizes", "default_scale", "divisors_upto", "head_views",
           "kv_head_groups", "prefix_block_keys"]

#: A schedule's tiling type: a (frozen) dataclass of its tile parameters.
TilingT = TypeVar("TilingT", bound="DataclassInstance")
#: The tiling type of a :class:`GroupedAlgorithm`: it has a ``group`` field.
GroupedT = TypeVar("GroupedT", bound="GroupedTiling")


@dataclass(frozen=True)
class Choice(Generic[TilingT]):
    """The best tiling an algorithm found for a workload: its closed-form count and steps."""

    tiling: TilingT
    predicted: IOCount
    steps: int
    tried: int  # candidate tilings that fit and were scored


class TiledSchedule(ABC, Generic[TilingT]):
    """What a forward and a backward schedule share: a frozen ``Tiling`` (the type parameter),
    its fast-memory footprint, the one best-tiling loop and the checks of a tiling against M."""

    name: ClassVar[str]
    summary: ClassVar[str]
    Tiling: type[TilingT]  # set on each schedule's class (a ClassVar cannot hold a TypeVar)
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

    def steps(self, shape: Shape, tiling: TilingT) -> int:
        """Tile steps of one head (used to break ties toward fewer, larger steps)."""
        return 0

    def count_walk(self, shape: Shape, tiling: TilingT) -> int:
        """Blocks a bulk count-mode run walks one by one (the runner estimates its time from
        them, before running): 0 where runs of alike blocks execute once whatever the sizes."""
        return 0

    def _least_io(self, shape: Shape, M: int, tilings: Iterable[TilingT],
                  count: Callable[[Shape, TilingT], IOCount]) -> Choice[TilingT] | None:
        """The least-(I/O, steps) tiling among ``tilings`` that fits in M, its every-head count
        by ``count``, or None when none fits.  The one best-tiling loop of the library."""
        best: Choice[TilingT] | None = None
        best_key: tuple[int, int] | None = None
        tried = 0
        for t in tilings:
            if self.footprint(shape, t) > M:
                continue
            tried += 1
            io = count(shape, t)
            steps = self.steps(shape, t)
            key = (io.total, steps)
            if best_key is None or key < best_key:
                best, best_key = Choice(t, io, steps, 0), key
        if best is None:
            return None
        return dataclasses.replace(best, tried=tried)

    def _check_min_M(self, shape: Shape, M: int) -> None:
        m = self.min_M(shape)
        if M < m:
            raise ParameterError(f"M={M} is too small for {self._called}{self.name} with "
                                 f"d={shape.d}: it needs M >= {m} words", param="M")

    def _least_io_tiling(self, shape: Shape, M: int,
                         count: Callable[[Shape, TilingT], IOCount]) -> TilingT:
        """The least-I/O candidate tiling (a ParameterError naming M when M < min_M)."""
        self._check_min_M(shape, M)
        found = self._least_io(shape, M, self.candidate_tilings(shape, M), count)
        if found is None:  # pragma: no cover - min_M guarantees a candidate
            raise ParameterError(f"{self.name}: no tiling fits in M={M}", param="M")
        return found.tiling

    def _check_fits(self, shape: Shape, M: int, tiling: TilingT) -> None:
        """A CapacityError when ``tiling`` needs more than M words of fast memory."""
        need = self.footprint(shape, tiling)
        if need > M:
            raise CapacityError(f"{self.name} with tiling {tiling}", 0, need, M)

    def _tiling_fields(self) -> list[str]:
        return sorted(f.name for f in dataclasses.fields(self.Tiling))


class Algorithm(TiledSchedule[TilingT]):
    """One schedule of attention on the two-level memory.

    Every method takes the workload as a :class:`~attnio.core.workload.Shape`, mask included:
    ``shape.causal``, ``shape.causal_align`` and ``shape.window`` say which scores are visible.
    """

    exact: ClassVar[bool] = True
    supports_window: ClassVar[bool] = False
    supports_backward: ClassVar[bool] = False  # writes the logsumexp a backward schedule needs
    supports_block_mask: ClassVar[bool] = False  # skips the blocks of a block-sparse layout

    # -------------------------------------------------------------- tilings
    @abstractmethod
    def _predict(self, shape: Shape, tiling: TilingT) -> IOCount:
        """Closed-form count of one head for a validated tiling."""

    def planner_tilings(self, shape: Shape, M: int, *, eps: float | None = None,
                        entry_bound: float | None = None) -> Iterable[TilingT]:
        """The tilings the planner scores: the candidates (approximate algorithms use ``eps``
        and ``entry_bound`` to resolve theirs)."""
        return self.candidate_tilings(shape, M)

    def search(self, shape: Shape, M: int, tilings: Iterable[TilingT] | None = None
               ) -> Choice[TilingT] | None:
        """The least-(I/O, steps) tiling among ``tilings`` (default: the candidates) that fits
        in M, or None when none fits; by branch and bound (:meth:`_least_io_bounded`) where the
        algorithm bounds its count (:meth:`_lower_total`), the same choice."""
        if tilings is None:
            tilings = self.candidate_tilings(shape, M)
        lower = self._lower_total(shape)
        if lower is None:
            return self._least_io(shape, M, tilings, self.predict_total)
        return self._least_io_bounded(shape, M, tilings, lower)

    def _lower_total(self, shape: Shape) -> Callable[[TilingT], float] | None:
        """A cheap lower bound on :meth:`predict_total` for the tilings of ``shape`` (a function
        of the tiling), or None (the default: :meth:`search` scores every candidate)."""
        return None

    def _least_io_bounded(self, shape: Shape, M: int, tilings: Iterable[TilingT],
                          lower: Callable[[TilingT], float]) -> Choice[TilingT] | None:
        """:meth:`_least_io` by branch and bound: the tilings that fit, in order of ``lower``,
        scored exactly until the bound exceeds the least count found.  A tiling left unscored
        has a bound, so a count, above the least: it can neither win nor tie, and the choice
        is the least (count, steps, position among ``tilings``), as :meth:`_least_io`'s.
        ``tried`` counts the tilings that fit (as there)."""
        fit = [t for t in tilings if self.footprint(shape, t) <= M]
        if not fit:
            return None
        lows = [lower(t) * (1 - 1e-9) for t in fit]  # a margin far above float rounding
        best: tuple[int, int, int] | None = None
        found: dict[int, IOCount] = {}
        for i in sorted(range(len(fit)), key=lows.__getitem__):
            if best is not None and lows[i] > best[0]:
                break
            io = self.predict_total(shape, fit[i])
            key = (io.total, self.steps(shape, fit[i]), i)
            found[i] = io
            if best is None or key < best:
                best = key
        assert best is not None
        _, steps, i = best
        return Choice(fit[i], found[i], steps, len(fit))

    def default_tiling(self, shape: Any, M: int, causal: object = None) -> TilingT:
        """The least-I/O candidate tiling; ties broken toward fewer steps."""
        shape = Shape.coerce(shape).with_mask(causal)
        M = check_int("M", M, minimum=1)
        return self._least_io_tiling(shape, M, self.predict_total)

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

    def validate_tiling(self, shape: Shape, tiling: TilingT) -> None:
        """Check every integer field (tile sizes, counts) is an integer in [1, 2**50] (no size of
        a workload is larger, :data:`~attnio.core.workload.MAX_SIZE`; None allowed where the
        field is optional); subclasses add their own rules."""
        for f in dataclasses.fields(tiling):
            kind = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", "")
            if not kind.startswith("int"):
                continue
            v = getattr(tiling, f.name)
            if v is None and "None" in kind:
                continue
            check_int(f"tiling.{f.name}", v, minimum=1, maximum=MAX_SIZE)

    # -------------------------------------------------------------- counts
    def predicted_io(self, shape: Any, M: int, *, tiling: Any = None,
                     causal: object = None) -> IOCount:
        """The closed-form count of reads and writes, exactly as the simulator counts them.

        ``causal`` (optional) merges a mask into ``shape`` (see :meth:`Shape.with_mask`).
        """
        shape = Shape.coerce(shape).with_mask(causal)
        M = check_int("M", M, minimum=1)
        t = self.coerce_tiling(shape, M, tiling)
        return self.predict_total(shape, t)

    def predict_total(self, shape: Shape, tiling: TilingT) -> IOCount:
        """Closed form over every head: heads are independent problems (``_predict`` is per head)."""
        return self._predict(shape, tiling).scaled(shape.n_heads)

    def predict_with_lse(self, shape: Shape, tiling: TilingT) -> IOCount:
        """The forward pass that also writes the logsumexp (Nq words a head) a backward schedule
        reads: :meth:`predict_total` plus those writes (``supports_backward`` algorithms only)."""
        if not self.supports_backward:
            raise ParameterError(f"{self.name} has no backward pass (it writes no logsumexp)",
                                 param="backward")
        return self.predict_total(shape, tiling) + IOCount(0, shape.n_heads * shape.Nq)

    def run_schedule(self, mem: TwoLevelMemory, Q: SlowArray, K: SlowArray, V: SlowArray,
                     O: SlowArray, *, shape: Shape, tiling: TilingT, scale: float,
                     lse: SlowArray | None = None) -> None:
        """Run every head: Q and O stack ``batch x heads`` blocks of Nq rows, K and V stack
        ``batch x kv_heads`` blocks of Nkv rows.  Each query head runs :meth:`schedule` on views of
        its own rows and of its key/value head's rows; schedules that share K/V tiles across a
        query group, or write the logsumexp ``lse`` for a backward pass, override this."""
        if lse is not None:
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
        compare; GQA totals are :meth:`predict_total`)."""
        return self._group_count(shape, dataclasses.replace(tiling, group=1))

    def predict_total(self, shape: Shape, tiling: GroupedT) -> IOCount:
        return self._group_count(shape, tiling).scaled(shape.n_heads // tiling.group)

    def run_schedule(self, mem: TwoLevelMemory, Q: SlowArray, K: SlowArray, V: SlowArray,
                     O: SlowArray, *, shape: Shape, tiling: GroupedT, scale: float,
                     lse: SlowArray | None = None) -> None:
        """Every group of ``tiling.group`` query heads against its K/V head; ``lse`` (stacked by
        head, Nq words each) receives the logsumexp of every row when given."""
        if lse is not None and not self.supports_backward:
            raise ParameterError(f"{self.name} has no backward pass (it writes no logsumexp)")
        G, Nq = tiling.group, shape.Nq
        for gb in mem.blocks(shape.n_heads // G, 1):  # alike: bulk count mode runs one
            heads = [gb.start * G + g for g in range(G)]
            views = [head_views(mem, shape, h, Q, K, V, O) for h in heads]
            lses = None
            if lse is not None:
                lses = [mem.view(lse, slice(h * Nq, (h + 1) * Nq)) for h in heads]
            self.schedule_group(mem, [v[0] for v in views], views[0][1], views[0][2],
                                [v[3] for v in views], shape=shape, tiling=tiling, scale=scale,
                                lse=lses)

    def schedule(self, mem: TwoLevelMemory, Q: SlowArray, K: SlowArray, V: SlowArray,
                 O: SlowArray, *, shape: Shape, tiling: GroupedT, scale: float) -> None:
        self.schedule_group(mem, [Q], K, V, [O], shape=shape,
                            tiling=dataclasses.replace(tiling, group=1), scale=scale)

    @abstractmethod
    def schedule_group(self, mem: TwoLevelMemory, Qs: list[SlowArray], K: SlowArray,
                       V: SlowArray, Os: list[SlowArray], *, shape: Shape, tiling: GroupedT,
                       scale: float, lse: list[SlowArray] | None = None) -> None:
        """Query heads ``Qs`` (one group) against one K/V head; ``lse`` (optional) receives each
        row's logsumexp."""


class BackwardSchedule(TiledSchedule[TilingT]):
    """One schedule of attention's backward pass on the two-level memory.

    Inputs in slow memory: Q, K, V, the forward output O, its gradient dO and the logsumexp L
    that a forward with ``supports_backward`` writes; outputs dQ, dK, dV (all stacked by head,
    as :func:`attnio.run` places them).  Every method takes the workload as a
    :class:`~attnio.core.workload.Shape`, mask and heads included; :meth:`predict` counts every
    head.  The registry (:func:`attnio.algorithms.backward_names`) lists the schedules; the
    runner and the planner pick the least-I/O one by closed form.
    """

    supports_window: ClassVar[bool] = True
    supports_block_mask: ClassVar[bool] = False
    _called = "the backward schedule "

    @abstractmethod
    def predict(self, shape: Shape, tiling: TilingT) -> IOCount:
        """Closed-form count of every head, exactly as the simulator counts it."""

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

    def unsupported(self, shape: Shape) -> str | None:
        """Why this schedule cannot run ``shape`` (None: it can)."""
        if shape.window is not None and not self.supports_window:
            return "no sliding-window support"
        if shape.block_mask is not None and not self.supports_block_mask:
            return "no block-sparse support"
        return None

    def check_shape(self, shape: Shape) -> None:
        """Raise a ParameterError naming the mask this schedule does not support."""
        why = self.unsupported(shape)
        if why is not None:  # the user chose this schedule: name the choice, not the mask
            raise ParameterError(f"backward_algorithm={self.name!r} has {why}; flash2_backward "
                                 "supports every mask", param="backward_algorithm")

    def search(self, shape: Shape, M: int) -> tuple[TilingT, IOCount] | None:
        """The least-(I/O, steps) candidate tiling that fits in M and its count, or None."""
        if M < self.min_M(shape) or self.unsupported(shape) is not None:
            return None
        found = self._least_io(shape, M, self.candidate_tilings(shape, M), self.predict)
        return None if found is None else (found.tiling, found.predicted)

    def coerce_tiling(self, shape: Shape, M: int, tiling: Any = None) -> TilingT:
        """Validate a user tiling (a Tiling, a mapping of its fields, or None for the least-I/O
        candidate) against the shape and the capacity M."""
        self.check_shape(shape)
        if tiling is None or tiling == "auto":
            return self._least_io_tiling(shape, M, self.predict)
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
        for f in fields:
            check_int(f"backward_tiling.{f}", getattr(tiling, f), minimum=1)
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


def default_scale(d: int, scale: object | None) -> float:
    """``scale`` as a finite float (None: 1/sqrt(d))."""
    if scale is None:
        return 1.0 / math.sqrt(d)
    return check_real("scale", scale)


def block_sizes(n: int, most: int, *, more: int = 4, powers: bool = True) -> list[int]:
    """Row-block sizes worth scoring for n rows with at most ``most`` rows a block, ascending:
    the sizes of the fewest blocks (⌈n/t⌉ for t = ⌈n/most⌉ .. + ``more``) and, if ``powers``, the
    powers of two below ``most`` ([] when most < 1)."""
    if most < 1:
        return []
    tr = -(-n // most)
    out = {-(-n // x) for x in range(tr, min(n, tr + more) + 1)}
    k = 1
    while powers and k < most:
        out.add(k)
        k *= 2
    return sorted(b for b in out if b <= most)


def largest_true(pred: Callable[[int], bool], lo: int, hi: int) -> int:
    """The largest x in [lo, hi] with ``pred(x)``, for a predicate true up to some point and false
    after it, by bisection (``pred(lo)`` is taken as true and never asked: ``lo`` is returned
    when no larger x has it)."""
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if pred(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo


def divisors_upto(n: int, most: int) -> list[int]:
    """The divisors of n that are <= most, ascending, in O(min(most, sqrt(n))) steps (a group
    of 2**40 query heads per key/value head is as quick as one of 4): n's prime factors up to
    ``most`` by trial division (a divisor <= most has no larger one), their products <= most."""
    if most <= 64:
        return [k for k in range(1, most + 1) if n % k == 0]
    out, m, p = [1], n, 2
    while p <= most and p * p <= m:
        if m % p == 0:
            k = 0
            while m % p == 0:
                m //= p
                k += 1
            out = [y for x in out for e in range(k + 1) if (y := x * p ** e) <= most]
        p += 1 if p == 2 else 2
    if 1 < m <= most and p * p > m:  # what is left is one prime, small enough
        out += [x * m for x in out if x * m <= most]
    return sorted(out)


def prefix_block_keys(Nkv: int, off: int, n: int, B: int) -> float | None:
    """A lower bound, in O(1), on ``Σ_i hi_i`` over T = ⌈n/B⌉ blocks of n consecutive query
    rows under a causal mask (no window) where row k of them sees the keys [0, k + 1 + off),
    none clipped (``0 <= off <= Nkv - n``; None otherwise): T - 1 blocks of B rows and a last
    of r = n - (T - 1)·B holding the last row, block i streaming the keys [0, hi_i) its rows
    see (hi_i at least its last row's count).

    A block of m rows sees at most ``m·hi_i - m(m - 1)/2`` pairs (its rows see distinct
    counts, all <= hi_i); the rows see ``P = n·off + n(n + 1)/2`` pairs; so with
    ``X = P + (T - 1)·B(B - 1)/2 + r(r - 1)/2``, ``B·Σ_{i<T-1} hi_i + r·hi_last >= X`` and
    ``Σ_i hi_i >= X/B + (1 - r/B)·hi_last``, ``hi_last >= n + off``."""
    if not 0 <= off <= Nkv - n or n < 1:
        return None
    T = cdiv(n, B)
    r = n - (T - 1) * B
    X = n * off + n * (n + 1) // 2 + (T - 1) * B * (B - 1) // 2 + r * (r - 1) // 2
    return X / B + (1 - r / B) * (n + off)


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
