"""The mapper: the search over a schedule's mapspace, and the one answer to "can it run".

Timeloop's mapper is a search that calls the model; attnio's is this module.  It works on any
object with the :class:`~attnio.algorithms.protocol.Schedule` protocol (forward or backward) and
owns:

* :func:`can_run` — the one answer to "can schedule X run workload S with M words" (None, or the
  reason), used by the runner, the planner, the sweep's skip reasons and the tests; with its
  parts for messages: :func:`supports` (the mask or pass a reason names, whatever the workload),
  :func:`needs_M` (the least M, when M is below it) and :func:`check_M` (that as an error naming
  M); and :func:`least_over` (the least count over several schedules, the tests' helper);
* :func:`search` — the least-(I/O, steps) tiling among the candidates (the planner's candidates,
  the backward search, and the default tiling), by branch and bound where a schedule bounds its
  count, the same choice: per tiling (``_lower_total``: q_stationary_min, flash2 over given
  tilings; ``_lower_totals``, the bounds of all the candidates in one call: q_split) or per family
  of tilings listed only when scored (``_families``: flash2 under a causal mask or a window,
  square_tiling, standard under a mask, small_cache_backward and
  fused_small_cache_backward), or over its candidates given as numpy rows (``_tiling_rows``,
  a :class:`~attnio.algorithms.protocol.TilingRows`: q_split); :func:`best_of`, the same
  without options, cached for a plan (the planner's, and flash_decoding's flash2 tile);
* :func:`phase_tilings` and :func:`phase_best` — the phase-separable search, for a schedule
  whose count and steps are sums of independent phases (``_phases``: stream_tiling,
  window_square, window_stream): each phase's best by itself (its declared cut, bound and seed applied), the
  candidates their product, whose first :func:`search` takes;
* :func:`pruned_tilings` — the candidates of least count, for a schedule that offers another's
  tilings among its own (window_cache streams flash2's);
* :func:`default_tiling` — what a run uses when no tiling is given;
* :func:`best_backward` — the least-I/O backward schedule and tiling for a workload;
* :func:`dense_tilings` — the denser grid behind the certificate's schedule factor.

It also applies the reductions a schedule declares its mapspace into (the proof that one keeps
the least stays in the schedule's docstring): :func:`dominated` (the largest value that fits
along a field whose count and steps never rise with it: standard's bn and square_tiling's key
slices unmasked),
:func:`completion` (the least of a partial tiling's remaining sides: standard's bm per (bk,
onepass) unmasked, small_cache_backward's output block, group_spill_backward's) and
:func:`preranked` (a declared pre-ranking cut: square_tiling's Phase-1 choices,
group_spill_backward's best 8, split_backward's and group_split_backward's best 3 of each pass)
and :func:`least_few` (the same cut by branch and bound on a proven lower bound:
square_tiling's best Phase-1 choices under a causal mask).

Ties go to fewer, larger steps, then to the first candidate.  No schedule keeps a search of its
own (docs/contributing.md, "Searches still inside schedules"; tests/test_architecture.py)."""

from __future__ import annotations

import bisect
import dataclasses
import functools
import heapq
import itertools
import operator
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import numpy as np

from ..core.errors import ParameterError
from ..core.memory import IOCount
from ..core.workload import Shape
from .common import divisors_upto, largest_true
from .protocol import (
    NO_BACKWARD,
    NO_BLOCK_MASK,
    NO_WINDOW,
    Choice,
    Families,
    Phase,
    Phases,
    Schedule,
    TilingRows,
)

if TYPE_CHECKING:
    import numpy.typing as npt

__all__ = ["best_backward", "best_of", "can_run", "check_M", "completion", "completions",
           "default_tiling", "dense_groups", "dense_searchable", "dense_sizes", "dense_tilings",
           "dominated", "least", "least_few", "least_over", "needs_M", "phase_best",
           "phase_tilings", "preranked", "pruned_tilings", "search", "supports"]

#: The attribute that says whether a schedule runs what each reason of :func:`can_run` names
#: (declared on :class:`~attnio.algorithms.base.TiledSchedule` and ``Algorithm``).
_SUPPORTS = {NO_WINDOW: "supports_window", NO_BLOCK_MASK: "supports_block_mask",
             NO_BACKWARD: "supports_backward"}


def can_run(schedule: Any, shape: Shape, M: int | None = None, *, backward: bool = False,
            **options: Any) -> str | None:
    """Why ``schedule`` cannot run ``shape`` with M words of fast memory (None: it can): the
    mask or shape it does not support, the backward pass it lacks (``backward``: the forward
    must write the logsumexp), or the least M it needs (its :meth:`mapspace`'s
    ``unsupported``).  ``M=None``: the workload alone (the reasons that no M would lift).
    ``options``: the schedule's own mapspace options (an approximate schedule's error target),
    which may rule it out too (its mapspace with them says why)."""
    why: str | None = schedule.unsupported(shape)  # the mask first
    if why is None and backward and not supports(schedule, NO_BACKWARD):
        return NO_BACKWARD
    if why is not None or M is None:
        return why
    if options:
        return schedule.mapspace(shape, M, **options).unsupported  # type: ignore[no-any-return]
    later: str | None = schedule.unsupported(shape, M)  # = its mapspace's ``unsupported``
    return later


def supports(schedule: Any, why: str) -> bool:
    """Whether ``schedule`` runs what the reason ``why`` of :func:`can_run` names, whatever the
    workload: a sliding window (:data:`~.protocol.NO_WINDOW`), a block mask
    (:data:`~.protocol.NO_BLOCK_MASK`) or a backward pass (:data:`~.protocol.NO_BACKWARD`; a
    backward schedule is one).  For the lists of messages ("the algorithms that do") and the
    checks made before a workload is known."""
    return bool(getattr(schedule, _SUPPORTS[why], True))


def needs_M(schedule: Any, shape: Shape, M: int, **options: Any) -> int | None:
    """The least M ``schedule`` needs for ``shape`` when M is below it, else None: the M part of
    :func:`can_run`, as a number for the messages that name it (``options``: the schedule's
    own, e.g. square tiling's ``stable``)."""
    need: int = schedule.min_M(shape, **options)
    return need if M < need else None


def check_M(schedule: Any, shape: Shape, M: int, **options: Any) -> None:
    """A ParameterError naming M when M is below the least ``schedule`` needs for ``shape``
    (:func:`needs_M`): ``M=.. is too small for <name> with d=..: it needs M >= .. words``."""
    need = needs_M(schedule, shape, M, **options)
    if need is not None:
        said = "".join(f" ({k}={v})" for k, v in options.items())
        raise ParameterError(f"M={M} is too small for {_called(schedule)}{schedule.name}{said} "
                             f"with d={shape.d}: it needs M >= {need} words", param="M")


def least_over(schedules: Iterable[Any], shape: Shape, M: int, **options: Any
               ) -> tuple[int, Any, Any] | None:
    """The least every-head count over ``schedules`` that can run ``shape`` with M words
    (:func:`can_run`), each at its least tiling (:func:`search`, ``options`` passed to its
    mapspace): ``(count, schedule, tiling)``, the first on ties, or None when none can."""
    best: tuple[int, Any, Any] | None = None
    for s in schedules:
        if can_run(s, shape, M) is not None:
            continue
        found = search(s, shape, M, **options)
        if found is not None and (best is None or found.predicted.total < best[0]):
            best = (found.predicted.total, s, found.tiling)
    return best


def search(schedule: Schedule, shape: Shape, M: int, tilings: Iterable[Any] | None = None,
           **options: Any) -> Choice[Any] | None:
    """The least-(I/O, steps) tiling among ``tilings`` (default: the mapspace's candidates,
    ``options`` passed to :meth:`mapspace`) that fits in M, or None when none fits (or the
    schedule cannot run the workload).  Where the schedule bounds its count, by branch and
    bound: the same choice (:func:`_best`)."""
    if tilings is None:
        space = schedule.mapspace(shape, M, **options)
        if space.unsupported is not None:
            return None
        return _best(schedule, shape, M, space.tilings, options)
    return _best(schedule, shape, M, lambda: tilings, None)


@functools.lru_cache(maxsize=256)
def best_of(schedule: Schedule, shape: Shape, M: int) -> Choice[Any] | None:
    """:func:`search` over the mapspace, without tiling options, cached (the choice is
    immutable): a plan asks flash2's twice on one head, for its own row and for
    flash_decoding's tile."""
    return search(schedule, shape, M)


def _best(schedule: Schedule, shape: Shape, M: int, tilings: Callable[[], Iterable[Any]],
          options: dict[str, Any] | None) -> Choice[Any] | None:
    """The search of :func:`search` on a workload the schedule can run.  ``options`` None: over
    ``tilings()`` as given (bounded per tiling where the schedule declares ``_lower_total``);
    else over the mapspace, by the schedule's families where it declares them
    (``_families(shape, M, **options)``, :func:`_least_families`), the mapspace's candidates
    ``tilings()`` otherwise."""
    if options is not None:
        families_of = getattr(schedule, "_families", None)
        if families_of is not None:
            ties: Sequence[tuple[Any, Any, IOCount]] | None
            if not options:
                ties = _default_ties(schedule, shape, M)  # type: ignore[arg-type]
            else:
                families = families_of(shape, M, **options)
                ties = None if families is None else _family_ties(schedule, shape, M, families)
            if ties is not None:
                return _least_ties(schedule, shape, ties)
        phases = _phases_of(schedule, shape, M, options)
        if phases is not None:
            return _least_phases(schedule, shape, M, phases)
    rows_of = getattr(schedule, "_tiling_rows", None) if options == {} else None
    rows = rows_of(shape, M) if rows_of is not None else None
    if rows is not None:
        return _least_rows(schedule, shape, M, rows)
    tilings_ = tilings()
    lowers_of = getattr(schedule, "_lower_totals", None)
    lowers = lowers_of(shape) if lowers_of is not None else None
    if lowers is not None:
        return _least_bounded(schedule, shape, M, tilings_, None, lowers)
    lower_of = getattr(schedule, "_lower_total", None)
    lower = lower_of(shape) if lower_of is not None else None
    if lower is None:
        return _least(schedule, shape, M, tilings_)
    return _least_bounded(schedule, shape, M, tilings_, lower)


def least(schedule: Any, shape: Shape, M: int, **options: Any) -> Choice[Any] | None:
    """:func:`search` over the mapspace of a schedule with tiling ``options`` (its
    ``mapspace_tilings(shape, M, **options)`` and ``_families(shape, M, **options)``), for a
    caller that has checked the workload itself (square_tiling's literal variant needs less M
    than its mapspace's ``unsupported`` asks of the stable one)."""
    return _best(schedule, shape, M, lambda: schedule.mapspace_tilings(shape, M, **options),
                 options)


def default_tiling(schedule: Schedule, shape: Shape, M: int, tilings: Iterable[Any] | None = None
                   ) -> Any:
    """The least-I/O tiling among ``tilings`` (default: the mapspace's candidates, searched as
    :func:`search` does; a ParameterError naming M, with the reason, when the schedule cannot
    run the workload)."""
    if tilings is None:
        space = schedule.mapspace(shape, M)
        if space.unsupported is not None:
            raise ParameterError(f"{_called(schedule)}{schedule.name} cannot run "
                                 f"{shape.describe()} with M={M}: {space.unsupported}",
                                 param="M")
        found = _best(schedule, shape, M, space.tilings, {})
    else:
        found = _least(schedule, shape, M, tilings)
    if found is None:  # pragma: no cover - min_M guarantees a candidate
        raise ParameterError(f"{schedule.name}: no tiling fits in M={M}", param="M")
    return found.tiling


def _called(schedule: Any) -> str:
    return str(getattr(schedule, "_called", ""))


def _least(schedule: Schedule, shape: Shape, M: int, tilings: Iterable[Any],
           total: Callable[[Shape, Any], IOCount] | None = None) -> Choice[Any] | None:
    """The least-(I/O, steps) tiling among ``tilings`` that fits in M, or None: the one
    best-tiling loop of the library (``total``: the count, default the schedule's)."""
    best: Any = None
    best_key: tuple[int, int] | None = None
    best_io: IOCount | None = None
    tried = 0
    if total is None:
        total = schedule._total
    for t in tilings:
        if schedule.footprint(shape, t) > M:
            continue
        tried += 1
        io = total(shape, t)
        steps = schedule.steps(shape, t)
        key = (io.total, steps)
        if best_key is None or key < best_key:
            best, best_key, best_io = t, key, io
    if best_key is None:
        return None
    assert best_io is not None
    return Choice(best, best_io, best_key[1], tried)


def _least_bounded(schedule: Schedule, shape: Shape, M: int, tilings: Iterable[Any],
                   lower: Callable[[Any], float] | None,
                   lowers: Callable[[list[Any]], Any] | None = None) -> Choice[Any] | None:
    """:func:`_least` by branch and bound: the tilings that fit, in order of ``lower``, scored
    exactly until the bound exceeds the least count found.  A tiling left unscored has a bound,
    so a count, above the least: it can neither win nor tie, and the choice is the least
    (count, steps, position among ``tilings``), as :func:`_least`'s.  ``tried`` counts the
    tilings that fit (as there).  ``lowers`` (``lower`` None): the bounds of a list of
    tilings in one call (a schedule's ``_lower_totals``: numpy over the candidates)."""
    fit = [t for t in tilings if schedule.footprint(shape, t) <= M]
    if not fit:
        return None
    visit: Iterable[int]
    if lowers is not None:
        low_ = np.asarray(lowers(fit), dtype=np.float64) * (1 - 1e-9)  # a margin
        at = np.argsort(low_, kind="stable")
        lows = low_.tolist()
        visit = at.tolist()
    else:
        assert lower is not None
        lows = [lower(t) * (1 - 1e-9) for t in fit]  # a margin far above float rounding
        visit = sorted(range(len(fit)), key=lows.__getitem__)
    best: tuple[int, int, int] | None = None
    found: dict[int, IOCount] = {}
    for i in visit:
        if best is not None and lows[i] > best[0]:
            break
        io = schedule._total(shape, fit[i])
        key = (io.total, schedule.steps(shape, fit[i]), i)
        found[i] = io
        if best is None or key < best:
            best = key
    assert best is not None
    _, steps, i = best
    return Choice(fit[i], found[i], steps, len(fit))


def _least_rows(schedule: Schedule, shape: Shape, M: int, rows: TilingRows[Any]
                ) -> Choice[Any] | None:
    """:func:`_least` (``rows.lowers`` None) or :func:`_least_bounded` over the candidates
    given as rows (:class:`~attnio.algorithms.protocol.TilingRows`): the rows that fit, by
    their footprints at once, each made a tiling only when scored; the same choice, the least
    (count, steps, position among the rows that fit), and ``tried``, the rows that fit."""
    R = rows.rows
    fit = R[rows.footprints(R) <= M] if len(R) else R
    if not len(fit):
        return None
    make, total, steps_of = rows.make, schedule._total, schedule.steps
    best: tuple[int, int, int] | None = None
    found: dict[int, tuple[Any, IOCount]] = {}
    if rows.lowers is None:
        visit: Iterable[tuple[float, int]] = ((0.0, i) for i in range(len(fit)))
    else:
        lows = np.asarray(rows.lowers(fit), dtype=np.float64) * (1 - 1e-9)  # a margin
        at = np.argsort(lows, kind="stable")
        visit = zip(lows[at].tolist(), at.tolist())
    for lo, i in visit:
        if best is not None and rows.lowers is not None and lo > best[0]:
            break
        t = make(*fit[i].tolist())
        io = total(shape, t)
        key = (io.total, steps_of(shape, t), i)
        found[i] = (t, io)
        if best is None or key < best:
            best = key
    assert best is not None
    _, steps, i = best
    return Choice(found[i][0], found[i][1], steps, len(fit))


def _least_families(schedule: Schedule, shape: Shape, M: int, families: Families[Any]
                    ) -> Choice[Any] | None:
    """The least-(I/O, steps) tiling of ``families`` that fits in M, by branch and bound: the
    families in order of their ``lower`` bound (stable), each refined (``refined(i)``, once a
    count is known) and listed only while its bound is at most the least count found (member by
    member where the families bound each, ``member_lower``); every member listed that fits is
    scored exactly.  A family passed over has a bound, so every member a
    count, above the least: none can win or tie.  Among the members of least count the choice
    is that of fewest steps, then the first in the families' order (family, then member; or by
    the families' ``order``).  ``tried`` counts the members of least count (the tilings the
    steps compared)."""
    return _least_ties(schedule, shape, _family_ties(schedule, shape, M, families))


def _least_ties(schedule: Schedule, shape: Shape, ties: Sequence[tuple[Any, Any, IOCount]]
                ) -> Choice[Any] | None:
    """:func:`_least_families`' choice among the members of least count ``ties``."""
    if not ties:
        return None
    steps, _, t, io = min(((schedule.steps(shape, t), at, t, io) for at, t, io in ties),
                          key=lambda c: c[:2])
    return Choice(t, io, steps, len(ties))


def pruned_tilings(schedule: Any, shape: Shape, M: int) -> list[Any]:
    """The candidates :func:`search` compares by steps: where the schedule declares families
    (``_families``), the members of least count (in the families' order), found by
    :func:`_least_families`' branch and bound; otherwise every candidate of the mapspace
    (``mapspace_tilings``: the caller has checked the workload).
    A schedule that offers another's tilings among its own (window_cache streams flash2's)
    takes them from here."""
    has = getattr(schedule, "_families", None) is not None
    ties = _default_ties(schedule, shape, M) if has else None
    if ties is None:
        return list(schedule.mapspace_tilings(shape, M))
    return [t for _, t, _ in ties]


@functools.lru_cache(maxsize=256)
def _default_ties(schedule: Any, shape: Shape, M: int
                  ) -> tuple[tuple[Any, Any, IOCount], ...] | None:
    """:func:`_family_ties` of the schedule's families without tiling options (None where it
    declares none for the workload), cached: a plan asks twice for flash2's, once for its own
    search and once for window_cache's streamed tilings (:func:`pruned_tilings`); the ties and
    their counts are immutable."""
    families = schedule._families(shape, M)
    return None if families is None else tuple(_family_ties(schedule, shape, M, families))


def _family_ties(schedule: Schedule, shape: Shape, M: int, families: Families[Any]
                 ) -> list[tuple[Any, Any, IOCount]]:
    """The branch and bound of :func:`_least_families`: the members of least count that fit,
    as ``(place, tiling, count)`` in the families' order (``place``: (family, member), or the
    families' ``order``; empty: none fits)."""
    visit: Iterable[int]
    if len(families.lower) > 64:  # numpy's sort (the same floats: IEEE products, stable)
        low_ = np.asarray(families.lower, dtype=np.float64) * (1 - 1e-9)
        lows, visit = low_.tolist(), np.argsort(low_, kind="stable").tolist()
    else:
        lows = [lb * (1 - 1e-9) for lb in families.lower]  # a margin far above float rounding
        visit = sorted(range(len(lows)), key=lows.__getitem__)
    refined, order, member_lower = families.refined, families.order, families.member_lower
    footprint, total = schedule.footprint, schedule._total
    best: int | None = None
    scored: list[tuple[int, int, Any, IOCount]] = []
    for i in visit:
        if best is not None and lows[i] > best:
            break
        if best is not None and refined is not None and refined(i) * (1 - 1e-9) > best:
            continue
        for j, t in enumerate(families.members(i)):
            if (best is not None and member_lower is not None
                    and member_lower(i, t) * (1 - 1e-9) > best):
                break  # the family's later members are bounded above it too
            if footprint(shape, t) > M:
                continue
            io = total(shape, t)
            scored.append((i, j, t, io))
            if best is None or io.total < best:
                best = io.total
    return sorted((((i, j) if order is None else order(i, j, t), t, io)  # ties' places only
                   for i, j, t, io in scored if io.total == best), key=lambda c: c[0])


# ------------------------------------------------------------------------- phase-separable search
def _phases_of(schedule: Any, shape: Shape, M: int, options: dict[str, Any]
               ) -> Phases[Any] | None:
    """The schedule's phases (its ``_phases(shape, M, **options)`` hook), or None."""
    phases_of = getattr(schedule, "_phases", None)
    return None if phases_of is None else phases_of(shape, M, **options)


def phase_tilings(schedule: Any, shape: Shape, M: int, **options: Any) -> list[Any]:
    """The candidates of a phase-separable schedule (one that declares ``_phases``, a
    :class:`~attnio.algorithms.protocol.Phases`), for its ``candidate_tilings``: the product of
    each phase's best (:func:`phase_best`), in the phases' order.  The phases' counts and steps
    add up, so the least of the product is the first (each phase's least), and :func:`search`
    picks it; the product is what the mapspace lists.  Empty for a schedule without phases (the
    caller has checked the workload)."""
    phases = _phases_of(schedule, shape, M, options)
    return [] if phases is None else _phase_product(phases, M)


def _phase_product(phases: Phases[Any], M: int) -> list[Any]:
    best = [phase_best(p, M) for p in phases.phases]
    return [phases.combine(*c) for c in itertools.product(*best)]


def _least_phases(schedule: Schedule, shape: Shape, M: int, phases: Phases[Any]
                  ) -> Choice[Any] | None:
    """:func:`_least` over the product of the phases' best (:func:`_phase_product`), the same
    choice without scoring it all: the counts and steps add up and each phase's best come
    least first, so the product's first tiling is its least (count, steps), and the first on
    ties.  ``tried`` counts the product's tilings that fit (those :func:`_least` would
    score)."""
    tilings = _phase_product(phases, M)
    fit = [t for t in tilings if schedule.footprint(shape, t) <= M]
    if not fit or fit[0] is not tilings[0]:  # (a phase's choice too big: score them all)
        return _least(schedule, shape, M, fit)
    t = fit[0]
    return Choice(t, schedule._total(shape, t), schedule.steps(shape, t), len(fit))


def phase_best(phase: Phase, M: int) -> list[Any]:
    """The ``offer`` best choices of one phase that fit in M, by (count, steps, ``order``),
    least first (:class:`~attnio.algorithms.protocol.Phase`): the ``candidates`` and, cut to
    the ``keep`` of least estimate (the declared heuristic cut), the ``ranked`` pool's items
    ``expand``-ed, all scored (by branch and bound where the phase has a ``lower``
    bound, or ``lowers`` for the pool at once: the choices in order of it, scored until it
    passes the ``offer``-th least count, so a choice left unscored can neither be among the
    best nor tie them); the ``rows`` (numpy) likewise: by their ``row_costs``, the ``offer``
    distinct rows of least (count, steps, row) (any other has ``offer`` rows ahead of it: it
    can be neither among the best nor tie them), or joining the branch and bound by their
    ``row_lowers``; then the ``seed`` choices made from those best, scored, and the
    ``offer`` best of all.  A choice given twice (a row and a candidate) is scored once."""
    cost, footprint, order = phase.cost, phase.footprint, phase.order
    scored: dict[Any, tuple[int, int, Any]] = {}

    def score(c: Any) -> bool:
        """Score choice c once (False: it does not fit in M)."""
        if c in scored:
            return True
        if footprint is not None and footprint(c) > M:
            return False
        count, steps = cost(c)
        scored[c] = (count, steps, c if order is None else order(c))
        return True

    k = phase.offer
    counts: list[int] = []  # the counts scored, ascending (for the branch and bound)
    rows = phase.rows() if phase.rows is not None else None
    if rows is not None and phase.row_costs is not None:
        if len(rows):
            rc, rs = phase.row_costs(rows)
            for i in _least_k_rows(rows, rc, rs, k):
                c = tuple(rows[i].tolist())
                scored[c] = (int(rc[i]), int(rs[i]), c if order is None else order(c))
                counts.append(int(rc[i]))
        rows = None
    pool = dict.fromkeys(phase.candidates())
    if phase.ranked is not None:
        kept = heapq.nsmallest(phase.keep, phase.ranked())  # the declared cut
        if phase.expand is None:
            pool.update(dict.fromkeys(r for _, r in kept))
        else:
            for _, r in kept:
                pool.update(dict.fromkeys(phase.expand(r)))
    if phase.lowers is not None or rows is not None:  # the pool's bounds at once (numpy)
        items = list(pool)
        parts = []
        if rows is not None and phase.lower is None and phase.lowers is None:
            # the candidates as rows too (tuples of the rows' width): one call bounds all
            if items:
                rows = np.concatenate([np.array(items, dtype=np.int64).reshape(len(items), -1),
                                       rows])
            items = []
        if items:
            if phase.lowers is not None:
                parts.append(np.asarray(phase.lowers(items), dtype=np.float64))
            else:
                assert phase.lower is not None
                parts.append(np.array([phase.lower(c) for c in items], dtype=np.float64))
        if rows is not None and len(rows):
            assert phase.row_lowers is not None
            parts.append(np.asarray(phase.row_lowers(rows), dtype=np.float64))
        lows = (np.concatenate(parts) if parts else np.zeros(0)) * (1 - 1e-9)  # a margin
        at = np.argsort(lows, kind="stable")
        n = len(items)
        for lo, i in zip(lows[at].tolist(), at.tolist()):
            if len(counts) >= k and lo > counts[k - 1]:
                break
            c = items[i] if i < n else tuple(rows[i - n].tolist())  # type: ignore[index]
            if c not in scored and score(c):
                bisect.insort(counts, scored[c][0])
    elif phase.lower is None:  # every candidate scored
        for c in pool:
            score(c)
    else:
        lower = phase.lower
        for lo, c in sorted([(lower(c) * (1 - 1e-9), c) for c in pool],  # a float margin
                            key=operator.itemgetter(0)):
            if len(counts) >= k and lo > counts[k - 1]:
                break
            if c not in scored and score(c):
                bisect.insort(counts, scored[c][0])

    def best() -> list[Any]:  # (nsmallest: sorted(...)[:k], stable on ties)
        return [c for c, _ in heapq.nsmallest(k, scored.items(), key=operator.itemgetter(1))]

    if phase.seed is None:
        return best()
    for c in phase.seed(best()):
        score(c)
    return best()


def _least_k_rows(rows: npt.NDArray[np.int64], counts: npt.NDArray[np.int64],
                steps: npt.NDArray[np.int64], k: int) -> list[int]:
    """The indices of the ``k`` distinct rows of least (count, steps, row), least first (one
    index for rows repeated): sorted over the rows whose count is at most the k-th least
    count (with repeats: all of them when those hold fewer than k distinct rows), which hold
    the k least distinct rows."""
    n = len(rows)
    sub = np.flatnonzero(counts <= np.partition(counts, k - 1)[k - 1]) if n > k else None
    for pick in (sub, None):
        at = np.arange(n) if pick is None else pick
        R = rows[at]
        at = at[np.lexsort((*R.T[::-1], steps[at], counts[at]))]
        R = rows[at]
        distinct = np.ones(len(at), dtype=bool)
        distinct[1:] = (R[1:] != R[:-1]).any(axis=1)  # (repeats sort together)
        at = at[distinct]
        if len(at) >= k or pick is None:
            break
    out: list[int] = at[:k].tolist()
    return out


# ----------------------------------------------------------------------------- reductions
# The reductions a schedule declares its mapspace into and the mapper applies (Timeloop's split:
# the mapspace declares, the mapper searches).  The proof that a reduction keeps the least is a
# fact of the mapspace and stays in the schedule's docstring; the search is here.

T = TypeVar("T")
K = TypeVar("K", bound="_Ordered")  # a count, or a (count, steps) key


class _Ordered(Protocol):
    def __lt__(self, other: Any, /) -> bool: ...


def dominated(values: Sequence[int], most: int) -> int | None:
    """A dominated-dimension reduction: along a field whose count and steps never rise as it
    grows, while its footprint never falls, the least is at the largest value that fits.  The
    schedule gives the field's candidate ``values`` (ascending) and the ``most`` that fits (from
    its footprint); the mapper returns the largest value at most that, by bisection, or None
    when none is."""
    n = bisect.bisect_right(values, most)
    return values[n - 1] if n else None


def completion(sides: Iterable[T], score: Callable[[T], K],
               lower: Callable[[T], float] | None = None) -> tuple[K, T] | None:
    """A completion: the remaining sides of a partial tiling, as the schedule lists them (those
    that fit), and the least by ``score`` (a count, or a (count, steps, ...) key): ``(score,
    side)``, the first of ``sides`` on ties; None when there is none.

    With ``lower`` (a proven lower bound on a side's count, the first element of its key), by
    branch and bound: the sides in order of their bound, scored until the bound passes the least
    count found (with a float margin), so a side left unscored can neither be the least nor tie
    it.  The visiting order then differs from ``sides``: give a ``score`` whose key breaks
    every tie itself (e.g. ending with the side)."""
    best: tuple[K, T] | None = None
    if lower is None:
        for side in sides:
            key = score(side)
            if best is None or key < best[0]:
                best = (key, side)
        return best
    for lo, side in sorted([(lower(s) * (1 - 1e-9), s) for s in sides],
                           key=operator.itemgetter(0)):
        if best is not None and lo > _first(best[0]):
            break
        key = score(side)
        if best is None or key < best[0]:
            best = (key, side)
    return best


def completions(counts: npt.NDArray[np.int64], steps: npt.NDArray[np.int64],
                valid: npt.NDArray[np.bool_]) -> list[int]:
    """Many completions at once (:func:`completion` without a bound, keyed by (count, steps)):
    row i of the int64 arrays holds partial tiling i's sides' counts and steps (columns: the
    sides, in the schedule's order), ``valid`` those it lists; the column of the least (count,
    steps) among the valid ones of each row, the first on ties (as :func:`completion`'s), or -1
    where none is."""
    top = np.iinfo(np.int64).max
    c = np.where(valid, counts, top)
    least = valid & (c == c.min(axis=1, keepdims=True))
    s = np.where(least, steps, top)
    first = np.argmax(least & (s == s.min(axis=1, keepdims=True)), axis=1)
    out: list[int] = np.where(valid.any(axis=1), first, -1).tolist()
    return out


def _first(key: Any) -> Any:
    """A completion key's count: the key itself, or its first element."""
    return key[0] if isinstance(key, tuple) else key


def preranked(items: Iterable[T], estimate: Callable[[T], Any] | None, keep: int) -> list[T]:
    """A declared pre-ranking cut: the ``keep`` items of least ``estimate``, least first (ties
    in the order of ``items``), i.e. ``sorted(items, key=estimate)[:keep]``; ``estimate`` None:
    the items themselves compared (e.g. ``(count, sides...)`` tuples: a pass's exact count, ties
    by its sides).  The estimate is the schedule's (not a bound: a heuristic cut of its
    mapspace, which the mapspace then is)."""
    if keep <= 0:
        return []
    if estimate is None:
        return heapq.nsmallest(keep, items)  # type: ignore[type-var]  # (items compare)
    return heapq.nsmallest(keep, items, key=estimate)


def least_few(items: Sequence[T], key: Callable[[T], K], lower: Callable[[T], float] | None,
              keep: int, *, lowers: Sequence[float] | npt.NDArray[np.float64] | None = None
              ) -> list[T]:
    """The ``keep`` items of least ``key`` (a count, or a (count, ...) key), least first (ties
    in the order of ``items``), i.e. ``sorted(items, key=key)[:keep]``, by branch and bound on
    ``lower`` (a proven lower bound on an item's count): the items in order of their bound,
    keyed until the bound passes the ``keep``-th least count found (with a float margin), so an
    item left unkeyed has a count above ``keep`` keyed ones and can be neither among the least
    nor tie them.  ``lowers`` (with ``lower`` None): the items' bounds given at once, e.g. a
    numpy array over a grid of choices whose exact counts cost a call each (square_tiling's
    Phase-1 grid, ranked by its counts taken in float64)."""
    if keep <= 0:
        return []
    keyed: dict[int, K] = {}
    counts: list[Any] = []  # the counts keyed, ascending
    if lowers is not None:
        lows_ = np.asarray(lowers, dtype=np.float64) * (1 - 1e-9)  # a margin
        at = np.argsort(lows_, kind="stable")
        visit: Iterable[tuple[float, int]] = zip(lows_[at].tolist(), at.tolist())
    else:
        assert lower is not None
        lows = [lower(t) * (1 - 1e-9) for t in items]  # a margin far above float rounding
        visit = ((lows[i], i) for i in sorted(range(len(items)), key=lows.__getitem__))
    for lo, i in visit:
        if len(counts) >= keep and lo > counts[keep - 1]:
            break
        keyed[i] = key(items[i])
        bisect.insort(counts, _first(keyed[i]))
    return [items[i] for i in heapq.nsmallest(keep, keyed, key=lambda i: (keyed[i], i))]


# ----------------------------------------------------------------------------- backward
def best_backward(schedules: Sequence[Any], shape: Shape, M: int
                  ) -> tuple[list[tuple[tuple[int, int, int], Any, Choice[Any]]],
                             list[tuple[str, str]]]:
    """Every backward schedule of ``schedules`` searched for ``shape`` and M: the scored ones as
    ``(key, schedule, choice)`` sorted by key = (I/O, steps, position), and the skipped ones as
    ``(name, reason)``."""
    scored, skipped = [], []
    for i, bwd in enumerate(schedules):
        why = can_run(bwd, shape, M)
        found = None if why else search(bwd, shape, M)
        if found is None:
            skipped.append((bwd.name, why or "no candidate tiling fits in M"))
            continue
        scored.append(((found.predicted.total, found.steps, i), bwd, found))
    scored.sort(key=lambda s: s[0])
    return scored, skipped


# ----------------------------------------------------------------------------- dense search
def dense_sizes(n: int, cheap: int) -> list[int]:
    """Block sizes for an axis of n rows: all of 1..n when n <= ``cheap``, else the sizes of
    the fewest blocks (⌈n/t⌉, t <= ``cheap``) and a geometric grid of ratio 2^(1/4)."""
    if n <= cheap:
        return list(range(1, n + 1))
    out = {-(-n // t) for t in range(1, cheap + 1)}
    k = 0
    while (v := round(2 ** (k / 4))) <= n:
        out.add(v)
        k += 1
    return sorted(out)


#: The tiling fields the dense search knows how to fill (query rows, key rows, query-head group,
#: score chunk).
DENSE_FIELDS = frozenset({"Br", "Bc", "group", "Bs"})


def dense_searchable(schedule: Any) -> bool:
    """Whether the dense search covers ``schedule``: its tiling is made of ``Br`` and the
    :data:`DENSE_FIELDS`."""
    fields = {f.name for f in dataclasses.fields(schedule.Tiling)}
    return "Br" in fields and bool(fields <= DENSE_FIELDS)


def dense_groups(schedule: Any, shape: Shape, M: int, fields: set[str]) -> list[int]:
    """The query-head groups of the dense search: the divisors of the group whose least tiling
    (every other side 1) fits in M.  The dense algorithms' footprints grow with every side and
    with the group (tests/planner/test_plan_factors.py checks it): the largest group g* whose
    least tiling fits is found by bisection, and the divisors up to it
    (:func:`~attnio.algorithms.common.divisors_upto`, O(min(g*, √group)) steps) are the groups
    with a tiling that fits."""
    def fits(G: int) -> bool:
        need: int = schedule.footprint(shape, schedule.Tiling(
            **{f: G if f == "group" else 1 for f in fields}))
        return need <= M

    return divisors_upto(shape.group, largest_true(fits, 0, shape.group))


def dense_tilings(schedule: Any, shape: Shape, M: int, cheap: int) -> list[Any] | None:
    """The certificate's denser grid of ``schedule``'s tilings that fit in M (None: a schedule
    whose tiling is not made of ``Br`` and the :data:`DENSE_FIELDS`, or that cannot run the
    workload): every size on axes of at most ``cheap`` rows, the fewest-blocks sizes and a
    2^(1/4) grid beyond; every query-head group whose least tiling fits; the score chunk
    ``Bs`` = 1.  The dense algorithms' footprints grow with every side
    (tests/planner/test_plan_factors.py), so a sweep of Bc (ascending) stops at the first that
    does not fit, and one of Br at the first whose least Bc does not: the grid's tilings that
    fit, in the grid's order, without building the others (a search over them scores the same
    tilings and counts the same ``tried``)."""
    fields = {f.name for f in dataclasses.fields(schedule.Tiling)}
    if not dense_searchable(schedule):
        return None
    if can_run(schedule, shape, M) is not None:
        return None

    groups: list[int | None] = [None]
    if "group" in fields:
        groups = list(dense_groups(schedule, shape, M, fields))
    brs = dense_sizes(shape.Nq, cheap)
    bcs: list[int | None] = list(dense_sizes(shape.Nkv, cheap)) if "Bc" in fields else [None]
    out = []
    footprint, Tiling = schedule.footprint, schedule.Tiling
    for G in groups:
        for Br in brs:
            first = True
            for Bc in bcs:
                kw: dict[str, int] = {"Br": Br}
                if Bc is not None:
                    kw["Bc"] = Bc
                if G is not None:
                    kw["group"] = G
                if "Bs" in fields:
                    kw["Bs"] = 1
                t = Tiling(**kw)
                if footprint(shape, t) > M:
                    break  # the larger Bc do not fit either
                out.append(t)
                first = False
            if first:
                break  # not even the least Bc fits: nor does any larger Br
    return out
