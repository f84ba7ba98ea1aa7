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

Three solvers, combined by :func:`solve` (``method="auto"``):

1. :func:`greedy`: topological order, Belady eviction, no recomputation.  An upper bound; when it
   meets :meth:`DAG.trivial_bound` (each input read once, each output written once, a bound for
   every schedule) it is optimal.
2. :func:`search`: exact A* over the game's states (red set, blue set), recomputation allowed,
   no horizon.  When it finishes, its result is the **global optimum** of the game.  It stays
   exact because it only prunes by transformations that keep an optimal schedule (documented
   on the function) and its heuristic is admissible; interrupted, it still gives a lower bound
   valid for every schedule (the least f-value left open).
3. :func:`cpsat`: a *time-expanded* CP-SAT model over ``T`` parallel steps.  Per step t and node
   v there are booleans ``red[v,t]``, ``blue[v,t]`` and the moves ``compute``, ``read``,
   ``write`` of step t; deletions are free and happen at the step boundary.  One step is a batch
   of moves that can be replayed one by one: first its writes (of nodes red at t), then its
   deletions (nodes red at t but not at t+1, none an operand of a compute of the step), then
   its reads (of nodes blue at t) and computes (every operand red at t *and* at t+1).  The red
   set only shrinks before it grows, so ``sum_v red[v,t+1] <= M`` at step boundaries is the
   capacity of every intermediate state: a solution is a legal schedule, and every legal
   sequential schedule of S non-delete moves fits in S steps.  So ``OPT_T`` (the model's optimum
   for horizon T) is non-increasing in T and equals the true ``OPT`` for every large enough T.

What "optimal" means, honestly.  With recomputation no useful bound on the length of an optimal
schedule is known (the game is PSPACE-complete), so a CP-SAT solve proves optimality *for its
horizon* only: ``optimal_for_horizon``.  ``globally_optimal`` is True only when (a) the greedy
schedule meets the trivial bound, (b) the A* search finished, (c) a schedule meets A*'s lower
bound, or (d) ``recompute=False`` and ``T >= 2·(non-inputs) + edges`` (:func:`safe_horizon`):
without recomputation an optimal schedule computes each node once, writes each node at most
once and reads a node at most once per successor, so it fits in that many steps; the result is
then the exact optimum of the game *without recomputation* (an upper bound on ``OPT``).  CP-SAT's
horizon search (``horizon=None``) starts from the greedy schedule's number of parallel steps
(the greedy schedule is its hint) and grows T by half while the optimum improves; stopping at
the first horizon that does not improve is evidence, not proof, and every horizon tried is
listed in ``history``.  ``lower_bound`` is always a bound valid for every schedule (trivial or
A*'s); ``horizon_bound`` is CP-SAT's bound for its horizon only.

How the solvers compare on the instances of docs/pebbling.md (A* proving optima that CP-SAT
alone finds but cannot prove; CP-SAT kept for the instances A* cannot finish) is measured there,
by ``python benchmarks/pebble_table.py --first 5 --compare-cpsat``.

>>> from attnio.pebble import dag
>>> r = solve(dag.binary_tree(4), M=3, time_limit=10)
>>> (r.io, r.globally_optimal, r.lower_bound, r.method)
(7, True, 7, 'search')
>>> replay(dag.binary_tree(4), r.moves, 3).io
7
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from ..core.checks import check_int
from ..core.errors import ParameterError, ScheduleError
from ..core.extras import require
from .dag import DAG

__all__ = [
    "IllegalMoveError",
    "Move",
    "PebbleResult",
    "Replay",
    "greedy",
    "parse_moves",
    "replay",
    "SearchResult",
    "cpsat",
    "safe_horizon",
    "search",
    "solve",
]

_OPS = ("R", "W", "C", "D", "S")
_EXTRA_PARAMS: dict = {}


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


def _pack(dag: DAG, moves: Sequence[Move]) -> list[dict]:
    """Pack a legal sequential schedule into parallel steps of the solver's model.

    Each step is ``{"R": set, "W": set, "C": set, "red_after": set}`` (node indices).
    """
    red: set[int] = set()
    blue = {v for v in range(len(dag)) if dag.is_input(v)}
    steps: list[dict] = []
    cur: dict | None = None

    def new_step():
        return {"R": set(), "W": set(), "C": set(), "start_red": set(red), "start_blue": set(blue),
                "operands": set(), "new": set()}

    for mv in moves:
        v = dag.index(mv.node)
        if cur is None:
            cur = new_step()
        ok = True
        if mv.op == "W":
            ok = v in cur["start_red"] and v not in cur["new"]
        elif mv.op == "R":
            ok = v in cur["start_blue"] and v not in cur["start_red"]
        elif mv.op == "C":
            ok = all(u in cur["start_red"] and u in red for u in dag.preds[v]) \
                and v not in cur["start_red"]
        else:
            ok = v not in cur["operands"] and v not in cur["new"]
        if not ok:
            cur["red_after"] = set(red)
            steps.append(cur)
            cur = new_step()
        if mv.op == "W":
            cur["W"].add(v)
            blue.add(v)
        elif mv.op == "R":
            cur["R"].add(v)
            cur["new"].add(v)
            red.add(v)
        elif mv.op == "C":
            cur["C"].add(v)
            cur["new"].add(v)
            cur["operands"].update(dag.preds[v])
            red.add(v)
        else:
            red.discard(v)
    if cur is not None:
        cur["red_after"] = set(red)
        steps.append(cur)
    return steps


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


#: Measured cost of building the CP-SAT model, per node and time step (2 cores, ortools 9):
#: a horizon whose model cannot be built within the time left is not tried.
BUILD_SECONDS_PER_NODE_STEP = 4e-4


def _solve_horizon(dag: DAG, M: int, T: int, hint: list[dict] | None, time_limit: float,
                   workers: int, recompute: bool, upper: int | None, seed: int):
    cp_model = require("ortools.sat.python.cp_model", "pebble", "the CP-SAT pebbling model")

    n = len(dag)
    inputs = {v for v in range(n) if dag.is_input(v)}
    succs = dag.succs
    m = cp_model.CpModel()
    red = [[m.NewBoolVar(f"r{v}_{t}") for t in range(T + 1)] for v in range(n)]
    blue: list[list] = [[None] * (T + 1) for _ in range(n)]
    comp: dict[tuple[int, int], Any] = {}  # CP-SAT Boolean variables (ortools is untyped)
    rd: dict[tuple[int, int], Any] = {}
    wr: dict[tuple[int, int], Any] = {}
    for v in range(n):
        m.Add(red[v][0] == 0)
        if v not in inputs:
            blue[v] = [m.NewBoolVar(f"b{v}_{t}") for t in range(T + 1)]
            m.Add(blue[v][0] == 0)
    for t in range(T):
        for v in range(n):
            acquire = []
            if v not in inputs:
                c = comp[v, t] = m.NewBoolVar(f"c{v}_{t}")
                for u in dag.preds[v]:
                    m.AddImplication(c, red[u][t])
                    m.AddImplication(c, red[u][t + 1])
                m.AddImplication(c, red[v][t].Not())
                m.AddImplication(c, red[v][t + 1])
                acquire.append(c)
                w = wr[v, t] = m.NewBoolVar(f"w{v}_{t}")
                m.AddImplication(w, red[v][t])
                m.Add(blue[v][t + 1] <= blue[v][t] + w)
                m.Add(blue[v][t + 1] >= blue[v][t])
            if succs[v]:  # reading a node nobody uses is useless
                r = rd[v, t] = m.NewBoolVar(f"d{v}_{t}")
                if v not in inputs:
                    m.AddImplication(r, blue[v][t])
                m.AddImplication(r, red[v][t].Not())
                m.AddImplication(r, red[v][t + 1])
                acquire.append(r)
            m.Add(red[v][t + 1] <= red[v][t] + sum(acquire))
        m.Add(sum(red[v][t + 1] for v in range(n)) <= M)
    for v in range(n):
        if v not in inputs:
            m.Add(sum(wr[v, t] for t in range(T)) <= 1)  # a second write changes nothing
            if not recompute:
                m.Add(sum(comp[v, t] for t in range(T)) <= 1)
    for o in dag.outputs:
        m.Add(blue[o][T] == 1)
    # redundant constraints, valid for every schedule (they tighten the model's bound)
    for v in range(n):
        if v in inputs:
            if succs[v]:
                m.Add(sum(rd[v, t] for t in range(T)) >= 1)
        else:
            m.Add(sum(comp[v, t] for t in range(T)) >= 1)
    # idle steps come last (removes the symmetry of where the idle steps are)
    active = []
    for t in range(T):
        a = m.NewBoolVar(f"a{t}")
        mv = ([comp[v, t] for v in range(n) if (v, t) in comp]
              + [rd[v, t] for v in range(n) if (v, t) in rd]
              + [wr[v, t] for v in range(n) if (v, t) in wr])  # the moves of step t
        for x in mv:
            m.AddImplication(x, a)
        m.AddBoolOr(mv + [a.Not()])
        active.append(a)
    for t in range(T - 1):
        m.AddImplication(active[t + 1], active[t])
    cost = sum(rd.values()) + sum(wr.values())
    m.Add(cost >= dag.trivial_bound())
    if upper is not None:
        m.Add(cost <= upper)
    m.Minimize(cost)
    if hint is not None:
        _add_hint(m, dag, T, hint, red, blue, comp, rd, wr, inputs)
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = max(0.1, float(time_limit))
    solver.parameters.num_workers = workers
    solver.parameters.random_seed = seed
    for k, val_ in _EXTRA_PARAMS.items():
        setattr(solver.parameters, k, val_)
    status = solver.Solve(m)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return None, status == cp_model.INFEASIBLE, int(solver.BestObjectiveBound()) \
            if status != cp_model.INFEASIBLE else None
    val = solver.BooleanValue
    moves: list[Move] = []
    steps: list[dict] = []
    for t in range(T):
        W = [v for v in range(n) if (v, t) in wr and val(wr[v, t])]
        R = [v for v in range(n) if (v, t) in rd and val(rd[v, t])]
        C = [v for v in range(n) if (v, t) in comp and val(comp[v, t])]
        before = [v for v in range(n) if val(red[v][t])]
        after = {v for v in range(n) if val(red[v][t + 1])}
        moves += [Move("W", dag.names[v]) for v in W]
        moves += [Move("D", dag.names[v]) for v in before if v not in after]
        moves += [Move("R", dag.names[v]) for v in R]
        moves += [Move("C", dag.names[v]) for v in C]
        steps.append({"R": set(R), "W": set(W), "C": set(C), "red_after": after})
    optimal = status == cp_model.OPTIMAL
    bound = math.ceil(solver.BestObjectiveBound() - 1e-6)
    return (moves, steps, optimal, bound), False, bound


def _add_hint(m, dag, T, steps, red, blue, comp, rd, wr, inputs) -> None:
    n = len(dag)
    cur_red: set[int] = set()
    cur_blue: set[int] = set()
    for t in range(T):
        st = steps[t] if t < len(steps) else {"R": set(), "W": set(), "C": set(),
                                              "red_after": cur_red}
        for v in range(n):
            m.AddHint(red[v][t], v in cur_red)
            if v not in inputs:
                m.AddHint(blue[v][t], v in cur_blue)
                m.AddHint(comp[v, t], v in st["C"])
                m.AddHint(wr[v, t], v in st["W"])
            if (v, t) in rd:
                m.AddHint(rd[v, t], v in st["R"])
        cur_blue = cur_blue | set(st["W"])
        cur_red = set(st["red_after"])
    for v in range(n):
        m.AddHint(red[v][T], v in cur_red)
        if v not in inputs:
            m.AddHint(blue[v][T], v in cur_blue)


def cpsat(dag: DAG, M: int, *, horizon: int | str | None = None, time_limit: float = 60.0,
          workers: int = 2, recompute: bool = True, seed: int = 0) -> PebbleResult:
    """The minimum I/O over schedules of a bounded horizon: the time-expanded CP-SAT model.

    Parameters
    ----------
    dag : DAG
        From :mod:`attnio.pebble.dag`.
    M : int
        Red pebbles (fast-memory words), at least ``dag.min_pebbles()``.
    horizon : int, "safe" or None
        Steps of the time-expanded model.  None: search (module docstring); an int: that horizon;
        "safe": :func:`safe_horizon` (sufficient without recomputation).
    time_limit : float
        Seconds in all (CP-SAT's wall-clock limit, shared by the horizons tried).
    workers : int
        CP-SAT worker threads.
    recompute : bool
        Allow computing a node more than once (the game's usual rule); False forbids it.
    """
    M = check_int("M", M, minimum=1)
    _check_M(dag, M)
    workers = check_int("workers", workers, minimum=1)
    if not (isinstance(time_limit, (int, float)) and time_limit > 0):
        raise ParameterError(f"time_limit must be a positive number of seconds, got {time_limit!r}", param="time_limit")
    t0 = time.perf_counter()
    g_moves = greedy(dag, M)
    g_io = replay(dag, g_moves, M).io
    g_steps = _pack(dag, g_moves)
    lb = dag.trivial_bound()
    if horizon == "safe":
        horizons: list[int] | None = [safe_horizon(dag)]
    elif horizon is None:
        horizons = None
    else:
        horizons = [check_int("horizon", horizon, minimum=1)]
    best_moves, best_io, best_steps = list(g_moves), g_io, g_steps
    history: list[tuple[int, int, bool, float]] = []
    T = horizons[0] if horizons else len(g_steps)
    last_optimal, last_bound, last_T = False, lb, T
    while True:
        remaining = time_limit - (time.perf_counter() - t0)
        # building the time-expanded model is itself slow (outside CP-SAT's own time limit)
        if remaining <= 0.05 or BUILD_SECONDS_PER_NODE_STEP * len(dag) * T > remaining:
            break
        hint = best_steps if len(best_steps) <= T else None
        ts = time.perf_counter()
        out, infeasible, bound = _solve_horizon(dag, M, T, hint, remaining, workers, recompute,
                                                best_io if hint is not None else None, seed)
        dt = time.perf_counter() - ts
        last_T = T
        if out is None:
            history.append((T, -1, infeasible, dt))
            last_optimal, last_bound = False, bound if bound is not None else lb
            if infeasible and horizons is None:  # too short: grow and retry
                T += max(2, T // 2)
                continue
            break
        moves, steps, optimal, bound = out
        io = replay(dag, moves, M).io
        history.append((T, io, optimal, dt))
        improved = io < best_io
        if io <= best_io:
            best_moves, best_io, best_steps = moves, io, steps
        last_optimal, last_bound = optimal, max(bound, lb)
        if horizons is not None or not optimal or best_io == lb:
            break
        if not improved and len(history) > 1:
            break
        T += max(2, T // 2)
    rep = replay(dag, best_moves, M)
    opt_T = last_optimal and rep.io == history[-1][1] if history else False
    if rep.io == lb:
        glob, scope = True, "global: equals the trivial lower bound"
    elif opt_T and not recompute and last_T >= safe_horizon(dag):
        glob, scope = True, "global for the game without recomputation (safe horizon)"
    elif opt_T:
        glob = False
        scope = f"optimal for schedules of <= {last_T} steps"
        if horizons is None and len(history) > 1:
            scope += f" (no improvement from T={history[-2][0]})"
    else:
        glob, scope = False, "not proven (time limit)"
    return PebbleResult(
        title=dag.title, M=M, io=rep.io, reads=rep.reads, writes=rep.writes, peak=rep.peak,
        moves=tuple(best_moves), horizon=last_T, optimal_for_horizon=bool(opt_T),
        horizon_bound=int(rep.io if opt_T else last_bound), globally_optimal=glob, scope=scope,
        lower_bound=lb, greedy_io=g_io, recompute=recompute,
        seconds=time.perf_counter() - t0, history=tuple(history))


# ---------------------------------------------------------------------- exact state-space search
@dataclass(frozen=True)
class SearchResult:
    """The outcome of :func:`search`: the exact optimum of the game (no horizon), when it finished.

    ``optimal`` is True when the search finished within its limits: then ``io`` is the minimum
    over all schedules of any length, recomputation included.  Otherwise ``io`` is None and
    ``lower_bound`` is the least f-value left open (every schedule costs at least that
    much, as the heuristic is admissible).
    """

    title: str
    M: int
    io: int | None
    moves: tuple[Move, ...]
    optimal: bool
    lower_bound: int
    states: int
    seconds: float


def search(dag: DAG, M: int, *, time_limit: float = 60.0, max_states: int = 5_000_000,
           upper: int | None = None, sliding: bool = False) -> SearchResult:
    """Exact minimum I/O by A* over the game's states (red set, blue set), recomputation allowed.

    Canonical forms that keep an optimal schedule (each is a transformation of any schedule
    that neither raises its I/O nor breaks a rule):

    * deletions are postponed until a pebble is needed (a read or compute into a full fast
      memory evicts one red node that is not an operand of the move);
    * an output is written as soon as it is computed for the first time (it must be written
      once anyway, and being blue earlier only allows more);
    * a node is *dead* once every output it reaches is blue; its pebbles are dropped and it is
      never read, written or computed again.

    The heuristic (admissible): each output not yet blue needs a write, and each input that is
    not red and reaches such an output through nodes that are neither red nor blue must be read.
    ``upper``: the I/O of a known schedule; states whose f-value exceeds it are not explored.
    ``sliding``: the sliding variant (a compute into a full memory may take an operand's pebble).
    """
    M = check_int("M", M, minimum=1)
    _check_M(dag, M, sliding)
    import heapq

    t0 = time.perf_counter()
    n = len(dag)
    outputs = list(dict.fromkeys(dag.outputs))
    out_bit = {o: 1 << k for k, o in enumerate(outputs)}
    all_out = (1 << len(outputs)) - 1
    succs = dag.succs
    reach = [0] * n  # outputs reachable from v (as a mask over outputs)
    for v in range(n - 1, -1, -1):
        r = out_bit.get(v, 0)
        for s in succs[v]:
            r |= reach[s]
        reach[v] = r
    pred_mask = [sum(1 << u for u in dag.preds[v]) for v in range(n)]
    is_in = [dag.is_input(v) for v in range(n)]
    dead_cache: dict[int, int] = {}

    def dead_of(bo: int) -> int:
        d = dead_cache.get(bo)
        if d is None:
            d = sum(1 << v for v in range(n) if reach[v] & ~bo == 0)
            dead_cache[bo] = d
        return d

    def h(red: int, blue: int, bo: int) -> int:
        need_out = [o for o in outputs if not bo & out_bit[o]]
        seen = 0
        stack = [o for o in need_out if not red >> o & 1]
        reads = 0
        while stack:
            v = stack.pop()
            if seen >> v & 1:
                continue
            seen |= 1 << v
            for u in dag.preds[v]:
                if red >> u & 1 or seen >> u & 1:
                    continue
                if is_in[u]:
                    seen |= 1 << u
                    reads += 1
                elif not blue >> u & 1:
                    stack.append(u)
        return len(need_out) + reads

    start = (0, 0, 0)  # red, blue (non-inputs), blue outputs
    g_best = {start: 0}
    parent: dict[tuple, tuple] = {start: (None, ())}
    counter = 0
    heap = [(h(0, 0, 0), 0, counter, start)]
    closed_f = 0
    expanded = 0
    names = dag.names

    def push(state, g, mv):
        nonlocal counter
        red, blue, bo = state
        dead = dead_of(bo)
        gone = red & dead
        if gone:
            mv = mv + tuple(Move("D", names[u]) for u in range(n) if gone >> u & 1)
        state = (red & ~dead, blue & ~dead, bo)
        if g < g_best.get(state, 1 << 60):
            f = g + h(state[0], state[1], bo)
            if upper is not None and f > upper:
                return
            g_best[state] = g
            parent[state] = (cur, mv)
            counter += 1
            heapq.heappush(heap, (f, g, counter, state))

    while heap:
        f, g, _, cur = heapq.heappop(heap)
        if g > g_best.get(cur, 1 << 60):
            continue
        closed_f = f  # the least f in the open list: a lower bound on the optimum
        red, blue, bo = cur
        if bo == all_out:
            moves: list[Move] = []
            st = cur
            while parent[st][0] is not None:
                p, mv = parent[st]
                moves[:0] = mv
                st = p
            rep = replay(dag, moves, M, sliding=sliding)
            return SearchResult(dag.title, M, rep.io, tuple(moves), True, rep.io,
                                len(g_best), time.perf_counter() - t0)
        expanded += 1
        if expanded % 64 == 0 and (time.perf_counter() - t0 > time_limit
                                   or len(g_best) > max_states):
            break
        dead = dead_of(bo)
        nred = bin(red).count("1")
        reds = [u for u in range(n) if red >> u & 1]
        # writes of live red non-blue non-inputs (outputs are written on compute)
        for u in reds:
            if not is_in[u] and not blue >> u & 1:
                push((red, blue | 1 << u, bo), g + 1, (Move("W", names[u]),))
        for v in range(n):
            bit = 1 << v
            if red & bit or dead & bit:
                continue
            if is_in[v] or blue & bit:
                cost, kind, keep = 1, "R", 0
            elif pred_mask[v] & red == pred_mask[v]:
                cost, kind, keep = 0, "C", pred_mask[v]
            else:
                continue
            extra: tuple[Move, ...] = ()
            nb, nbo = blue, bo
            if kind == "C" and v in out_bit and not bo & out_bit[v]:
                cost += 1
                extra = (Move("W", names[v]),)
                nb, nbo = blue | bit, bo | out_bit[v]
            mv = (Move(kind, names[v]),) + extra
            if nred < M:
                push((red | bit, nb, nbo), g + cost, mv)
            else:
                for u in reds:
                    if not keep >> u & 1:
                        push(((red & ~(1 << u)) | bit, nb, nbo), g + cost,
                             (Move("D", names[u]),) + mv)
                    elif sliding:  # slide the operand's pebble onto v
                        push(((red & ~(1 << u)) | bit, nb, nbo), g + cost,
                             (Move("S", names[v], names[u]),) + extra)
    if not heap and upper is not None:  # nothing cheaper than ``upper`` exists
        closed_f = upper
    return SearchResult(dag.title, M, None, (), False, closed_f, len(g_best),
                        time.perf_counter() - t0)



def solve(dag: DAG, M: int, *, time_limit: float = 60.0, method: str = "auto",
          horizon: int | str | None = None, workers: int = 2, recompute: bool = True,
          sliding: bool = False, search_share: float = 0.6, seed: int = 0) -> PebbleResult:
    """The minimum I/O (reads + writes) of the red-blue pebble game on ``dag`` with ``M`` pebbles.

    ``method="auto"`` (default): (1) a greedy schedule; if it meets the trivial bound it is
    optimal.  (2) :func:`search` (exact A*, no horizon, recomputation allowed) with
    ``search_share`` of the time; if it finishes, the result is the global optimum.  (3)
    otherwise :func:`cpsat` with the rest of the time, for the best schedule it finds; the
    result then keeps the best proven lower bound (trivial or A*'s) in ``lower_bound``.
    ``method="search"`` or ``"cpsat"`` runs one of them alone (``horizon`` and ``recompute``
    apply to CP-SAT only; search always allows recomputation).  ``sliding=True`` solves the
    sliding variant (module docstring) by search only.

    Returns a :class:`PebbleResult`; its ``moves`` replay with ``replay(dag, moves, M,
    sliding=sliding)``.  ``io`` is None only when no schedule was found at all.
    """
    M = check_int("M", M, minimum=1)
    if method not in ("auto", "search", "cpsat"):
        raise ParameterError(f"method must be 'auto', 'search' or 'cpsat', got {method!r}", param="method")
    if not (isinstance(time_limit, (int, float)) and time_limit > 0):
        raise ParameterError(f"time_limit must be a positive number of seconds, got {time_limit!r}", param="time_limit")
    if sliding and (method == "cpsat" or not recompute):
        raise ParameterError("sliding=True is solved by search only (method='auto' or 'search', "
                             "recompute=True)", param="sliding")
    _check_M(dag, M, sliding)
    if method == "cpsat" or not recompute:  # search and greedy shortcuts assume recomputation
        return cpsat(dag, M, horizon=horizon, time_limit=time_limit, workers=workers,
                     recompute=recompute, seed=seed)
    t0 = time.perf_counter()
    lb = dag.trivial_bound()
    g_moves: list[Move] | None = greedy(dag, M) if M >= dag.min_pebbles() else None
    g = replay(dag, g_moves, M) if g_moves is not None else None

    def result(moves, *, glob, scope, lower, how) -> PebbleResult:
        if moves is None:
            return PebbleResult(dag.title, M, None, 0, 0, 0, (), 0, False, lower, False, scope,
                                lower, None, True, time.perf_counter() - t0, method=how,
                                sliding=sliding)
        rep = replay(dag, moves, M, sliding=sliding)
        return PebbleResult(
            title=dag.title, M=M, io=rep.io, reads=rep.reads, writes=rep.writes, peak=rep.peak,
            moves=tuple(moves), horizon=0, optimal_for_horizon=glob,
            horizon_bound=rep.io if glob else lower, globally_optimal=glob, scope=scope,
            lower_bound=rep.io if glob else lower, greedy_io=g.io if g else None, recompute=True,
            seconds=time.perf_counter() - t0, method=how, sliding=sliding)

    if g is not None and g.io == lb:
        return result(g_moves, glob=True, how="greedy", lower=lb,
                      scope="global: greedy schedule equals the trivial lower bound")
    share = 1.0 if method == "search" or sliding else min(max(search_share, 0.0), 1.0)
    sr = search(dag, M, time_limit=time_limit * share, upper=g.io if g else None, sliding=sliding)
    if sr.optimal:
        return result(list(sr.moves), glob=True, how="search", lower=sr.io,
                      scope=f"global: exact A* search ({sr.states:,} states)")
    if g is not None and sr.lower_bound >= g.io:
        return result(g_moves, glob=True, how="search", lower=g.io,
                      scope="global: A* proved nothing is cheaper than the greedy schedule")
    search_lb = max(lb, sr.lower_bound)
    if method == "search" or sliding:
        return result(g_moves, glob=False, how="search", lower=search_lb,
                      scope="not proven (search time limit); schedule is greedy")
    rest = max(0.5, time_limit - (time.perf_counter() - t0))
    cp = cpsat(dag, M, horizon=horizon, time_limit=rest, workers=workers, recompute=recompute,
               seed=seed)
    glob = cp.globally_optimal or (cp.io is not None and cp.io <= search_lb)
    scope = cp.scope if not glob or cp.globally_optimal else "global: CP-SAT schedule meets A*'s bound"
    return dataclasses.replace(cp, lower_bound=max(cp.lower_bound, search_lb), globally_optimal=glob,
                               scope=scope, seconds=time.perf_counter() - t0, method="search+cpsat")
