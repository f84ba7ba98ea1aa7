"""The red-blue pebble game on attention's computation DAG, solved exactly on tiny instances.

* :mod:`.dag`: the computation DAGs (attention with or without the row max, matmul, trees);
* :mod:`.game`: the rules, a move checker and the greedy schedule;
* :mod:`.astar` (exact A* search), :mod:`.cpsat_model` (time-expanded CP-SAT) and
  :mod:`.solver` (:func:`solve`, which combines greedy, A* and CP-SAT);
* :mod:`.compare`: optima next to simulated schedules and bounds (docs/pebbling.md);
* :mod:`.loops`: an exhaustive search of loop-order schedules on tiny instances, each run on the
  referee (docs/pebbling.md, "Searching loop orders").
"""

from . import dag, loops
from .astar import SearchResult, search
from .comparison import (
    MAX_TIME_LIMIT_S,
    TABLE_COLUMNS,
    TABLE_INSTANCES,
    Instance,
    compare,
    format_table,
    seed_bounds,
    simulated,
    table_row,
)
from .cpsat_model import cpsat
from .dag import DAG
from .game import (
    IllegalMoveError,
    Move,
    PebbleResult,
    Replay,
    greedy,
    parse_moves,
    replay,
    safe_horizon,
)
from .solver import SolveOptions, solve

__all__ = [
    "DAG",
    "MAX_TIME_LIMIT_S",
    "TABLE_COLUMNS",
    "TABLE_INSTANCES",
    "IllegalMoveError",
    "Instance",
    "Move",
    "PebbleResult",
    "Replay",
    "SearchResult",
    "SolveOptions",
    "compare",
    "cpsat",
    "dag",
    "loops",
    "format_table",
    "greedy",
    "parse_moves",
    "replay",
    "safe_horizon",
    "search",
    "seed_bounds",
    "simulated",
    "solve",
    "table_row",
]
