"""attnio: the I/O complexity of attention.

Run attention schedules on a simulated two-level memory that counts every word moved
(:func:`run`), list them (:mod:`attnio.algorithms`), bound them (:mod:`attnio.bounds`), plan the
least-I/O one (:func:`plan`), and check outputs against
:mod:`attnio.reference` (:mod:`attnio.core.reference`).

The package tree is the architecture (README, "Architecture"): ``core`` (the referee and the
vocabulary) at the bottom, then ``approx``, then ``algorithms``/``blocks``/``bounds``, ``runner``,
``hardware``/``cachesim``/``pebble``/``torch_ops``, ``planner``, ``experiments`` and ``cli`` on
top; imports point down only.  ``import attnio`` loads the core API (numpy only); the layers
above it load on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from . import algorithms, bounds
from .algorithms import Algorithm
from .core import (
    AttnioError,
    Block,
    BlockMask,
    CapacityError,
    FastTile,
    IOCount,
    IOStats,
    MissingExtraError,
    ParameterError,
    ScheduleError,
    Shape,
    SlowArray,
    TwoLevelMemory,
    UnknownNameError,
    reference,
)
from .core.version import __version__
from .planner import Plan, plan
from .runner import BackwardPass, Limits, Result, run

if TYPE_CHECKING:  # the lazily loaded names, for type checkers and editors
    from . import blocks, cachesim, experiments, hardware, pebble, torch_ops
    from .cachesim import replay, trace

__all__ = [
    # the core vocabulary (attnio.core): the referee, the workload, the errors, the reference
    "TwoLevelMemory", "FastTile", "SlowArray", "Block", "IOStats", "IOCount", "Shape",
    "BlockMask",
    "AttnioError", "CapacityError", "MissingExtraError", "ParameterError", "ScheduleError",
    "UnknownNameError", "reference", "__version__",
    # the layers above it: schedules, bounds, runs and plans (loaded with attnio)
    "algorithms", "Algorithm", "bounds", "run", "Result", "Limits", "BackwardPass", "plan",
    "Plan",
    # loaded on first access (see _LAZY)
    "blocks", "cachesim", "trace", "replay", "experiments", "hardware", "pebble", "torch_ops",
]

#: Names loaded on first access: ``attnio.trace(...)`` imports the cache simulator only then.
_LAZY = {
    "blocks": ("attnio.blocks", None),
    "cachesim": ("attnio.cachesim", None),
    "experiments": ("attnio.experiments", None),
    "hardware": ("attnio.hardware", None),
    "pebble": ("attnio.pebble", None),
    "torch_ops": ("attnio.torch_ops", None),
    "replay": ("attnio.cachesim.caches", "replay"),
    "trace": ("attnio.cachesim.tracing", "trace"),
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        module, attr = _LAZY[name]
        mod = importlib.import_module(module)
        value = mod if attr is None else getattr(mod, attr)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'attnio' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
