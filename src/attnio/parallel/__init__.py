"""Attention across P processors (context parallelism): the referee, the schemes, their
closed forms, the lower bounds and the planner.  Proofs and derivations: docs/parallel.md.

* :mod:`.cluster`: the referee (:class:`Cluster`: who holds which row, every word sent and
  received per processor and per link, the work per processor) and the layouts
  (:class:`Layout`: sequence-sharded contiguous, zigzag, striped; head-sharded);
* one module per scheme, each with ``mapspace``, ``cost`` (closed form), ``layout`` and
  ``execute`` (on the referee): :mod:`.ring`, :mod:`.zigzag`, :mod:`.striped`,
  :mod:`.ulysses`, :mod:`.usp` (Ulysses x ring; the shared engine is :mod:`.sequence`) and
  :mod:`.grid` (the 2-D grid, partial outputs merged by log-sum-exp, optionally with heads
  split), :mod:`.window_ring` (the ring cut short by a sliding window);
* :mod:`.geometry`: closed-form pair counts under causal and windowed masks;
* :mod:`.bounds`: lower bounds with explicit constants, memory-independent and for a local
  memory of L words, forward and backward; :func:`footprint` the memory each scheme uses;
* :mod:`.planner`: the scheme and parameters of least critical-path words, with the ratio to
  the bound;
* :mod:`.backward`: the backward pass (its referee; every scheme's schedule and closed form);
* :mod:`.timing`: link presets and a time estimate (communication against compute at the
  device's peak);
* :mod:`.distributed`: the schemes run with ``torch.distributed`` under torchrun, bytes counted
  per rank (``attnio cp run``; torch is imported there only).

>>> from attnio.core.workload import Shape
>>> cost("ring", Shape(1024, 1024, 64, heads=8), 4).words_per_device
1572864
"""

from __future__ import annotations

from types import ModuleType
from typing import TYPE_CHECKING, Any

import numpy as np

from ..core.errors import UnknownNameError
from ..core.lazy import lazy_names
from ..core.workload import Shape
from . import grid, ring, striped, ulysses, usp, window_ring, zigzag
from .base import CommCost, Mapspace, check_P
from .bounds import bound, busiest_bound, group_bound, linear_bound, memory_bound
from .cluster import Cluster, CommStats, Layout

if TYPE_CHECKING:  # the lazily loaded names, for type checkers
    from .backward import cost_backward
    from .distributed import launch
    from .planner import CPBounds, bounds_of, plan

__all__ = ["SCHEMES", "CPBounds", "Cluster", "CommCost", "CommStats", "Layout", "Mapspace",
           "bound", "bounds_of", "busiest_bound", "check_P", "cost", "execute", "footprint", "get", "group_bound",
           "cost_backward", "launch", "linear_bound", "mapspace", "memory_bound", "names", "plan"]

#: The schemes, by name.
SCHEMES: dict[str, ModuleType] = {m.NAME: m for m in (ring, zigzag, striped, ulysses, usp, grid,
                                                       window_ring)}


def names() -> list[str]:
    return list(SCHEMES)


def get(name: str) -> ModuleType:
    """The scheme module called ``name``."""
    try:
        return SCHEMES[name]
    except (KeyError, TypeError):
        raise UnknownNameError("scheme", str(name), SCHEMES, param="scheme") from None


def mapspace(name: str, shape: Any, P: int) -> Mapspace:
    return get(name).mapspace(Shape.coerce(shape), check_P(P))


def cost(name: str, shape: Any, P: int, params: dict[str, Any] | None = None, *,
         work: bool = True) -> CommCost:
    """The closed form of scheme ``name`` on ``shape`` over P processors."""
    return get(name).cost(Shape.coerce(shape), check_P(P), params, work=work)


def footprint(name: str, shape: Any, P: int, params: dict[str, Any] | None = None, *,
              backward: bool = False) -> tuple[int, ...]:
    """The most words of input rows each processor of scheme ``name`` holds at any time (the
    referee's ``CommStats.memory``), forward or ``backward``: the local memory L at which
    Theorem 4 (:func:`~attnio.parallel.bounds.memory_bound`) applies to the scheme."""
    shape = Shape.coerce(shape)
    P = check_P(P)
    mod = get(name)
    if hasattr(mod, "footprint"):
        return tuple(mod.footprint(shape, P, params, backward=backward))
    from .backward import scheme_u_kind
    from .sequence import seq_footprint

    params = mod.mapspace(shape, P).check(params)
    return seq_footprint(shape, P, scheme_u_kind(mod.NAME, P, params)[0], backward)


def execute(name: str, shape: Any, P: int, params: dict[str, Any] | None = None, *,
            data: tuple[Any, Any, Any] | None = None
            ) -> tuple[CommStats, np.ndarray | None]:
    """Run scheme ``name`` on the referee: its counts, and the output (with ``data``)."""
    shape = Shape.coerce(shape)
    P = check_P(P)
    mod = get(name)
    lay = mod.layout(shape, P, params)
    cl = Cluster(shape, lay, data)
    mod.execute(cl, params)
    stats = cl.finish()
    return stats, (cl.output() if data is not None else None)



#: Names loaded on first use (torch only in :mod:`.distributed`): name -> (module, its name).
_LAZY = {"plan": ("planner", "plan"), "bounds_of": ("planner", "bounds_of"),
         "CPBounds": ("planner", "CPBounds"), "launch": ("distributed", "launch"),
         "cost_backward": ("backward", "cost_backward")}


__getattr__ = lazy_names(__name__, _LAZY, globals())
