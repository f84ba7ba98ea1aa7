"""The attention schedules, one per module, and their registry: name -> :class:`Algorithm`.

The CLI, the planner and the sweeps iterate this registry instead of naming algorithms.  A
schedule follows the :class:`Schedule` protocol (``mapspace``, ``cost``, ``execute``:
:mod:`.protocol`; the base classes of :mod:`.base` build it from a module's hooks), the
:mod:`.mapper` chooses its tilings (every search over a schedule's tilings is the mapper's:
docs/contributing.md), and a new one is one module plus one line in the registration
below (or a call to :func:`register`: docs/contributing.md).  Building
blocks that are not attention (the blocked matmul) live in :mod:`attnio.blocks`, not here.

Backward schedules have their own registry (:func:`backward_names`, :func:`get_backward`): any
of them runs after a forward that writes the logsumexp (``supports_backward``), and the runner
and the planner pick the least-I/O one by closed form.

>>> names()[:3]
['standard', 'flash1', 'flash2']
>>> get("flash2").summary.startswith("FlashAttention-2")
True
>>> backward_names()  # doctest: +NORMALIZE_WHITESPACE
['flash2_backward', 'small_cache_backward', 'split_backward', 'group_split_backward',
 'fused_small_cache_backward', 'group_spill_backward']
"""

from __future__ import annotations

from typing import Any, Protocol, TypeVar, cast

from ..core.errors import UnknownNameError
from ..core.workload import Shape
from . import (
    approx_poly,
    flash1,
    flash2,
    flash2_backward,
    flash_decoding,
    fused_small_cache_backward,
    group_spill_backward,
    group_split_backward,
    kv_stationary,
    mapper,
    q_split,
    q_stationary_min,
    row_hybrid,
    small_cache_backward,
    split_backward,
    square_tiling,
    standard,
    stream_tiling,
    window_cache,
    window_square,
    window_stream,
)
from .base import Algorithm, BackwardSchedule
from .protocol import Choice, Cost, Field, Mapspace, Schedule

__all__ = ["Algorithm", "BackwardSchedule", "Choice", "Cost", "Field", "Mapspace", "Schedule",
           "all_algorithms", "all_backwards", "backward_names", "choose_backward", "get",
           "get_backward", "mapper", "names", "register", "register_backward"]

class _Named(Protocol):
    @property
    def name(self) -> str: ...


_T = TypeVar("_T", bound=_Named)


class _Registry(dict[str, _T]):
    """Name -> registered instance of ``kind``, in registration order (the forward registry and
    the backward one are two of these)."""

    def __init__(self, kind: type, what: str, param: str, adder: str) -> None:
        super().__init__()
        self.kind = kind  # Algorithm or BackwardSchedule (abstract: no type[_T] for mypy)
        self.what = what  # its name in messages
        self.param = param  # the argument that takes its name (UnknownNameError)
        self.adder = adder  # the public function that registers one

    def add(self, item: _T) -> _T:
        """Add ``item`` under ``item.name`` (replacing none)."""
        if not isinstance(item, self.kind):
            article = "an" if self.kind.__name__[0] in "AEIOU" else "a"
            raise TypeError(f"{self.adder} takes {article} {self.kind.__name__} instance, "
                            f"got {item!r}")
        if item.name in self:
            raise ValueError(f"{self.what} {item.name!r} is already registered")
        self[item.name] = item
        return item

    def lookup(self, name: object) -> _T:
        """``name`` itself when it is an instance, else the one registered under it."""
        if isinstance(name, self.kind):
            return cast(_T, name)
        if isinstance(name, str) and name in self:
            return self[name]
        raise UnknownNameError(self.param, str(name), self)


_REGISTRY: _Registry[Algorithm[Any]] = _Registry(Algorithm, "algorithm", "algorithm", "register")
_BACKWARDS: _Registry[BackwardSchedule[Any]] = _Registry(BackwardSchedule, "backward schedule",
                                                    "backward_algorithm", "register_backward")


def register(alg: Algorithm[Any]) -> Algorithm[Any]:
    """Add an algorithm to the registry under ``alg.name`` (replacing none)."""
    return _REGISTRY.add(alg)


def get(name: str | Algorithm[Any]) -> Algorithm[Any]:
    """The registered algorithm called ``name`` (UnknownNameError suggests close names)."""
    return _REGISTRY.lookup(name)


def names(*, exact: bool | None = None) -> list[str]:
    """Registered names in registration order (``exact=True``/``False``: only those)."""
    return [n for n, a in _REGISTRY.items() if exact is None or a.exact == exact]


def all_algorithms(*, exact: bool | None = None) -> list[Algorithm[Any]]:
    """Registered algorithms in registration order (``exact=True``/``False``: only those)."""
    return [_REGISTRY[n] for n in names(exact=exact)]


for _mod in (standard, flash1, flash2, flash_decoding, square_tiling, approx_poly, kv_stationary,
             q_stationary_min, row_hybrid, stream_tiling, q_split, window_cache,
             window_square, window_stream):
    register(_mod.ALGORITHM)
del _mod


# ----------------------------------------------------------------------------- backward schedules
def register_backward(bwd: BackwardSchedule[Any]) -> BackwardSchedule[Any]:
    """Add a backward schedule to the registry under ``bwd.name`` (replacing none)."""
    return _BACKWARDS.add(bwd)


def get_backward(name: str | BackwardSchedule[Any]) -> BackwardSchedule[Any]:
    """The registered backward schedule called ``name`` (UnknownNameError suggests close names)."""
    return _BACKWARDS.lookup(name)


def backward_names() -> list[str]:
    """Registered backward schedules, in registration order."""
    return list(_BACKWARDS)


def all_backwards() -> list[BackwardSchedule[Any]]:
    """Registered backward schedules, in registration order."""
    return list(_BACKWARDS.values())


for _bwd in (flash2_backward.BACKWARD, small_cache_backward.BACKWARD, split_backward.BACKWARD,
             group_split_backward.BACKWARD, fused_small_cache_backward.BACKWARD,
             group_spill_backward.BACKWARD):
    register_backward(_bwd)
del _bwd


def choose_backward(shape: Shape, M: int, name: str | BackwardSchedule[Any] | None = None,
                    tiling: object = None) -> tuple[BackwardSchedule[Any], object]:
    """The backward schedule and tiling to run: ``name``'s (with ``tiling`` validated, or its
    least-I/O tiling), or, when ``name`` is None, the schedule whose Tiling ``tiling`` is (a
    Tiling instance, or a mapping of exactly its fields), or else the least-I/O registered
    schedule (ties: registration order) by closed form."""
    import dataclasses

    from ..core.errors import ParameterError

    if name is not None:
        bwd = get_backward(name)
        return bwd, bwd.coerce_tiling(shape, M, tiling)
    if tiling is not None and tiling != "auto":
        for bwd in all_backwards():
            fields = {f.name for f in dataclasses.fields(bwd.Tiling)}
            if isinstance(tiling, bwd.Tiling) or (isinstance(tiling, dict)
                                                  and set(tiling) == fields):
                return bwd, bwd.coerce_tiling(shape, M, tiling)
        known = {b.name: sorted(f.name for f in dataclasses.fields(b.Tiling))
                 for b in all_backwards()}
        raise ParameterError(f"backward tiling {tiling!r} is no backward schedule's tiling; their "
                             f"fields: {known}", param="backward_tiling")
    scored, skipped = mapper.best_backward(all_backwards(), shape, M)
    if not scored:
        raise ParameterError(f"M={M}: no backward schedule runs {shape.describe()} "
                             f"({'; '.join(f'{n}: {why}' for n, why in skipped)})", param="M")
    _, bwd, found = scored[0]
    return bwd, found.tiling
