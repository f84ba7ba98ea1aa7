"""The red-blue pebble game, solved exactly on tiny DAGs (A* state search and OR-Tools CP-SAT).

Rules (Hong & Kung 1981, with recomputation).  A *state* is a set of red nodes (in fast memory)
and a set of blue nodes (in slow memory).  At the start the inputs are blue and nothing is red.
A schedule is a list of moves, each one of

* ``R v`` (read): v is blue; v becomes red as well.  Costs 1.
* ``W v`` (write): v is red; v becomes blue as well.  Costs 1.
* ``C v`` (compute): v is not an input and every predecessor of v is red; v becomes red.  Free.
  Recomputation is allowed: a node may be computed any number of times.
* ``D v`` (delete): v is red; its red pebble is removed.  Free.  (Blue pebbles are never removed:
  slow memory is unbounded.)

After every move at most ``M`` nodes are red.  At the end every output is blue.  The I/O of a
schedule is its number of R and W moves.  A move that has no effect (reading or computing a node
that is already red, writing one that is already blue) is legal but useless; the checker
:func:`replay` accepts it and counts it.  :func:`replay` checks a move list against these rules
independently of the solver and raises :class:`IllegalMoveError` naming the first illegal move.

Sliding variant (``sliding=True``, off by default): one more move, ``S v u``: every operand of v
is red and u is one of them; u's red pebble moves onto v (u stops being red).  It models an
in-place update such as ``acc += a*b`` in the simulator, which needs no extra word for the result.

The solvers (:func:`~attnio.pebble.solver.solve` and the three it combines: :func:`greedy` here,
:func:`~attnio.pebble.astar.search` and :func:`~attnio.pebble.cpsat_model.cpsat`) are described
in :mod:`attnio.pebble.solver`.

>>> from attnio.pebble import dag
>>> moves = greedy(dag.binary_tree(4), 3)
>>> replay(dag.binary_tree(4), moves, 3).io
7
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from ..core.checks import check_int
from ..core.errors import ParameterError, ScheduleError
from .dag import DAG

__all__ = [
    "IllegalMoveError",
    "Move",
    "PebbleResult",
    "Replay",
    "greedy",
    "parse_moves",
    "replay",
    "safe_horizon",
]

_OPS = ("R", "W", "C", "D", "S")


class Move(NamedTuple):
    """One move: ``op`` in "R", "W", "C", "D" (or "S", sliding games only) and the node's name.

    ``src`` is used by "S" only: the operand whose red pebble slides onto ``node``.
    """

    op: str
    node: str
    src: str = ""

    def __str__(self) -> str:
        return f"{self.op} {self.node}" + (f" {self.src}" if self.src else "")


class IllegalMoveError(ScheduleError):
    """A move list broke a rule of the game; ``index`` is the 0-based position of the first bad move."""

    def __init__(self, index: int, move: object, reason: str):
        self.index = index
        self.move = move
        self.reason = reason
        super().__init__(f"move {index} ({move}): {reason}")


@dataclass(frozen=True)
class Replay:
    """What :func:`replay` measured: reads, writes, io, peak red pebbles, moves and computes."""

    reads: int
    writes: int
    peak: int
    moves: int
    computes: int

    @property
    def io(self) -> int:
        return self.reads + self.writes


def parse_moves(lines: Iterable[str | Sequence[str]]) -> list[Move]:
    """Moves from strings like ``"R Q[0,0]"`` or pairs ``("R", "Q[0,0]")``."""
    out = []
    for k, item in enumerate(lines):
        if isinstance(item, str):
            parts = item.split()
        else:
            parts = list(item)
        if len(parts) not in (2, 3) or (len(parts) == 3) != (str(parts[0]) == "S"):
            raise IllegalMoveError(k, item, "a move is an operation R/W/C/D and a node name "
                                            "(S: a node and the operand that slides)")
        out.append(Move(*(str(x) for x in parts)))
    return out


def replay(dag: DAG, moves: Iterable[Move | str | Sequence[str]], M: int, *,
           sliding: bool = False) -> Replay:
    """Replay ``moves`` under the rules of the module docstring; raise IllegalMoveError on the first bad one.

    ``sliding=True`` also allows ``S v u`` (the sliding variant of the game).
    """
    M = check_int("M", M, minimum=1)
    blue = [dag.is_input(v) for v in range(len(dag))]
    red = [False] * len(dag)
    nred = reads = writes = peak = computes = n = 0
    for k, mv in enumerate(moves):
        n += 1
        if isinstance(mv, str) or not isinstance(mv, Move):
            mv = parse_moves([mv])[0]
        if mv.op not in _OPS:
            raise IllegalMoveError(k, mv, f"unknown operation {mv.op!r} (allowed: R, W, C, D"
                                          f"{', S' if sliding else ''})")
        try:
            v = dag.index(mv.node)
        except ParameterError:
            raise IllegalMoveError(k, mv, f"no node named {mv.node!r}") from None
        if mv.op == "R":
            if not blue[v]:
                raise IllegalMoveError(k, mv, f"read of {mv.node} which is not blue")
            reads += 1
            if not red[v]:
                red[v] = True
                nred += 1
        elif mv.op == "W":
            if not red[v]:
                raise IllegalMoveError(k, mv, f"write of {mv.node} which is not red")
            writes += 1
            blue[v] = True
        elif mv.op in ("C", "S"):
            if mv.op == "S":
                if not sliding:
                    raise IllegalMoveError(k, mv, "S (sliding compute) is not a move of this game; "
                                                  "replay with sliding=True")
                if not dag.is_input(v) and mv.src not in dag.preds_of(mv.node):
                    raise IllegalMoveError(k, mv, f"{mv.src!r} is not an operand of {mv.node}")
            if dag.is_input(v):
                raise IllegalMoveError(k, mv, f"{mv.node} is an input: it cannot be computed")
            missing = [dag.names[u] for u in dag.preds[v] if not red[u]]
            if missing:
                raise IllegalMoveError(
                    k, mv, f"compute of {mv.node} with non-red predecessor(s) {', '.join(missing)}")
            computes += 1
            if mv.op == "S":
                u = dag.index(mv.src)
                red[u] = False
                nred -= 1
            if not red[v]:
                red[v] = True
                nred += 1
        else:  # D
            if not red[v]:
                raise IllegalMoveError(k, mv, f"delete of {mv.node} which is not red")
            red[v] = False
            nred -= 1
        if nred > M:
            raise IllegalMoveError(k, mv, f"{nred} red pebbles exceed M={M}")
        peak = max(peak, nred)
    missing = [dag.names[o] for o in dag.outputs if not blue[o]]
    if missing:
        raise IllegalMoveError(n, "end", f"output(s) not blue at the end: {', '.join(missing)}")
    return Replay(reads, writes, peak, n, computes)


# ---------------------------------------------------------------------- greedy schedule
def greedy(dag: DAG, M: int) -> list[Move]:
    """A legal schedule without recomputation: topological order, Belady (furthest next use) eviction.

    A victim that is needed later and not yet blue is written before it is deleted; outputs are
    written as soon as they are computed.  An upper bound on the optimum, and the solver's hint.
    """
    M = check_int("M", M, minimum=1)
    _check_M(dag, M)
    order = [v for v in range(len(dag)) if not dag.is_input(v)]
    uses: list[list[int]] = [[] for _ in range(len(dag))]
    for pos, v in enumerate(order):
        for u in dag.preds[v]:
            uses[u].append(pos)
    nxt = [0] * len(dag)  # index into uses[v] of the next use
    outputs = set(dag.outputs)
    blue = [dag.is_input(v) for v in range(len(dag))]
    red: set[int] = set()
    moves: list[Move] = []
    name = dag.names

    def next_use(u: int) -> float:
        return uses[u][nxt[u]] if nxt[u] < len(uses[u]) else math.inf

    def make_room(pinned: set[int]) -> None:
        while len(red) >= M:
            victim = max((u for u in red if u not in pinned), key=lambda u: (next_use(u), u))
            if next_use(victim) < math.inf and not blue[victim]:
                moves.append(Move("W", name[victim]))
                blue[victim] = True
            moves.append(Move("D", name[victim]))
            red.discard(victim)

    for v in order:
        pinned = set(dag.preds[v])
        for u in dag.preds[v]:
            if u not in red:
                make_room(pinned)
                moves.append(Move("R", name[u]))
                red.add(u)
        make_room(pinned)
        moves.append(Move("C", name[v]))
        red.add(v)
        for u in dag.preds[v]:
            nxt[u] += 1
        if v in outputs and not blue[v]:
            moves.append(Move("W", name[v]))
            blue[v] = True
        for u in list(dag.preds[v]) + [v]:
            if u in red and next_use(u) == math.inf and (blue[u] or u not in outputs):
                moves.append(Move("D", name[u]))
                red.discard(u)
    return moves


def _check_M(dag: DAG, M: int, sliding: bool = False) -> None:
    need = dag.max_indegree if sliding else dag.min_pebbles()
    if M < need:
        what = "its operands (sliding game)" if sliding else "operands + result"
        raise ParameterError(
            f"M={M} is too small for {dag.title}: a node with {dag.max_indegree} operands needs "
            f"M >= {need} red pebbles ({what})", param="M")


def safe_horizon(dag: DAG) -> int:
    """Steps that suffice for an optimal schedule *without recomputation*: 2·(non-inputs) + edges."""
    return 2 * (len(dag) - len(dag.inputs)) + dag.n_edges


# ---------------------------------------------------------------------- the exact solver
@dataclass(frozen=True)
class PebbleResult:
    """The outcome of :func:`solve`.

    ``io`` and ``moves``: the best schedule found (replayed by :func:`replay`); ``reads``,
    ``writes``, ``peak`` its counts.  ``optimal_for_horizon``: CP-SAT proved ``io`` minimal among
    schedules of at most ``horizon`` steps; ``horizon_bound``: CP-SAT's lower bound for that
    horizon.  ``globally_optimal`` and ``scope`` say what is proven beyond the horizon (module
    docstring).  ``lower_bound`` is the trivial bound, valid for every schedule.  ``history``
    lists ``(horizon, io, optimal_for_horizon, seconds)`` per horizon tried.
    """

    title: str
    M: int
    io: int | None
    reads: int
    writes: int
    peak: int
    moves: tuple[Move, ...]
    horizon: int
    optimal_for_horizon: bool
    horizon_bound: int
    globally_optimal: bool
    scope: str
    lower_bound: int
    greedy_io: int | None
    recompute: bool
    seconds: float
    history: tuple[tuple[int, int, bool, float], ...] = field(default=())
    method: str = "cpsat"
    sliding: bool = False

    def summary(self) -> str:
        if self.globally_optimal:
            proof = "optimal"
        elif self.optimal_for_horizon:
            proof = f"optimal within T={self.horizon} steps"
        else:
            proof = "best found"
        return (f"{self.title}, M={self.M}: I/O {self.io} ({self.reads} R + {self.writes} W), "
                f"{proof} [{self.scope}]; proven lower bound {self.lower_bound}, "
                f"greedy {self.greedy_io}, {self.seconds:.1f} s ({self.method})")
