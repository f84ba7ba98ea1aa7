"""The referee and the vocabulary: the two-level memory, the workload, errors, the reference.

Everything else in attnio builds on this package, and it imports nothing else of attnio.

* :mod:`.memory`: :class:`TwoLevelMemory` (counts every word, enforces M), :class:`FastTile`,
  :class:`SlowArray`, :class:`IOStats` (a run's counts), :class:`IOCount` (a predicted count);
* :mod:`.workload`: :class:`Shape`, the one description of an attention problem (sizes, heads,
  GQA, batch, mask), validated once, and the mask geometry;
* :mod:`.masks`: the same geometry over blocks, for closed forms;
* :mod:`.blockmask`: :class:`BlockMask`, a block-sparse layout (validated once, hashable);
* :mod:`.errors` and :mod:`.checks`: the exceptions and the scalar validators;
* :mod:`.reference`: float64 attention and its gradients, the oracle every output is checked
  against;
* :mod:`.extras`: optional dependencies, with one message when one is missing.
"""

from .blockmask import BlockMask
from .checks import check_bool, check_choice, check_int, check_real
from .errors import (
    AttnioError,
    CapacityError,
    MissingExtraError,
    ParameterError,
    ScheduleError,
    UnknownNameError,
)
from .memory import ArrayIO, Block, FastTile, IOCount, IOStats, SlowArray, Tracer, TwoLevelMemory
from .workload import Shape, cdiv, kv_range, parse_causal, q_range

__all__ = [
    "ArrayIO",
    "AttnioError",
    "Block",
    "BlockMask",
    "CapacityError",
    "FastTile",
    "IOCount",
    "IOStats",
    "MissingExtraError",
    "ParameterError",
    "ScheduleError",
    "Shape",
    "SlowArray",
    "Tracer",
    "TwoLevelMemory",
    "UnknownNameError",
    "cdiv",
    "check_bool",
    "check_choice",
    "check_int",
    "check_real",
    "kv_range",
    "parse_causal",
    "q_range",
]
