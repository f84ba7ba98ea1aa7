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
* :mod:`.extras`: optional dependencies, with one message when one is missing;
* :mod:`.resources`: :class:`Limits` (time and memory budgets) and the refusals beyond them,
  :mod:`.progress` (the progress bar), :mod:`.paths` (input and output files checked before
  use).

``__all__`` is the package's public API (docs/api.md): the command line imports these names from
``attnio.core``, never from its modules.
"""

from .blockmask import BlockMask, LayoutRequest, default_block_size
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
from .paths import check_input_file, check_output_path, written_whole
from .progress import Progress
from .resources import DEFAULT_BUDGET_S, Limits, ResourceError, check_cost, fmt_count, parse_bytes
from .version import __version__
from .workload import ALIGNMENTS, FastMemory, Shape, cdiv, kv_range, parse_causal, q_range

__all__ = [
    "ALIGNMENTS",
    "DEFAULT_BUDGET_S",
    "ArrayIO",
    "AttnioError",
    "Block",
    "BlockMask",
    "CapacityError",
    "FastMemory",
    "FastTile",
    "IOCount",
    "IOStats",
    "LayoutRequest",
    "Limits",
    "MissingExtraError",
    "ParameterError",
    "Progress",
    "ResourceError",
    "ScheduleError",
    "Shape",
    "SlowArray",
    "Tracer",
    "TwoLevelMemory",
    "UnknownNameError",
    "__version__",
    "cdiv",
    "check_bool",
    "check_cost",
    "check_choice",
    "check_input_file",
    "check_int",
    "check_output_path",
    "check_real",
    "default_block_size",
    "fmt_count",
    "kv_range",
    "parse_bytes",
    "parse_causal",
    "q_range",
    "written_whole",
]
