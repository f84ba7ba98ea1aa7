"""attnio: the I/O complexity of attention.

Run attention schedules on a simulated two-level memory that counts every word moved
(:func:`run`), list them (:func:`algorithms`), and check outputs against :mod:`attnio.reference`.
"""

from . import algorithms, bounds, dag, pebble, reference, report, store, sweep
from .algorithms.base import Algorithm, IOCount, Shape
from .cache import replay
from .errors import AttnioError, CapacityError, ParameterError, ScheduleError, UnknownNameError
from .memory import Block, FastTile, IOStats, SlowArray, TwoLevelMemory
from .planner import Plan, plan
from .runner import Result, run
from .trace import trace  # the function; use `from attnio.trace import ...` for the rest

__version__ = "0.1.0"

__all__ = [
    "Algorithm",
    "AttnioError",
    "Block",
    "CapacityError",
    "FastTile",
    "IOCount",
    "IOStats",
    "ParameterError",
    "Plan",
    "Result",
    "ScheduleError",
    "Shape",
    "SlowArray",
    "TwoLevelMemory",
    "UnknownNameError",
    "algorithms",
    "bounds",
    "dag",
    "pebble",
    "plan",
    "reference",
    "replay",
    "report",
    "run",
    "store",
    "sweep",
    "trace",
]
