"""The time-expanded CP-SAT model of the red-blue pebble game (:func:`cpsat`; OR-Tools).

The rules are :mod:`attnio.pebble.game`'s.  The model: per step t and node v there are booleans
``red[v,t]``, ``blue[v,t]`` and the moves ``compute``, ``read``, ``write`` of step t; deletions
are free and happen at the step boundary (:mod:`attnio.pebble.solver` explains why a solution is
a legal schedule and what its optimum proves).  The greedy schedule, packed into parallel steps
(:func:`_pack`), is the solver's hint.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..core.checks import check_int
from ..core.errors import ParameterError
from ..core.extras import require
from .dag import DAG
from .game import Move, PebbleResult, _check_M, greedy, replay, safe_horizon

__all__ = ["BUILD_SECONDS_PER_NODE_STEP", "cpsat"]


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


#: Measured cost of building the CP-SAT model, per node and time step (2 cores, ortools 9):
#: a horizon whose model cannot be built within the time left is not tried.
BUILD_SECONDS_PER_NODE_STEP = 4e-4


def _solve_horizon(dag: DAG, M: int, T: int, start: tuple[list[dict], int] | None,
                   time_limit: float, workers: int, recompute: bool, seed: int):
    """The model of horizon T solved; ``start``: a schedule's steps to hint and its I/O, an
    upper bound on the cost (None: no hint)."""
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
    _idle_steps_last(m, n, T, comp, rd, wr)
    cost = sum(rd.values()) + sum(wr.values())
    m.Add(cost >= dag.trivial_bound())
    if start is not None:
        m.Add(cost <= start[1])
    m.Minimize(cost)
    if start is not None:
        _add_hint(m, dag, start[0], _Vars(red, blue, comp, rd, wr), inputs)
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = max(0.1, float(time_limit))
    solver.parameters.num_workers = workers
    solver.parameters.random_seed = seed
    status = solver.Solve(m)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return None, status == cp_model.INFEASIBLE, int(solver.BestObjectiveBound()) \
            if status != cp_model.INFEASIBLE else None
    moves, steps = _schedule_of(solver.BooleanValue, dag, T, red, comp, rd, wr)
    optimal = status == cp_model.OPTIMAL
    bound = math.ceil(solver.BestObjectiveBound() - 1e-6)
    return (moves, steps, optimal, bound), False, bound


def _idle_steps_last(m: Any, n: int, T: int, comp: dict[tuple[int, int], Any],
                     rd: dict[tuple[int, int], Any], wr: dict[tuple[int, int], Any]) -> None:
    """Idle steps come last (removes the symmetry of where the idle steps are)."""
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


def _schedule_of(val: Any, dag: DAG, T: int, red: list[list[Any]],
                 comp: dict[tuple[int, int], Any], rd: dict[tuple[int, int], Any],
                 wr: dict[tuple[int, int], Any]) -> tuple[list[Move], list[dict]]:
    """The solved model's schedule (each step: writes, deletions, reads, computes) and its
    steps as :func:`_pack` writes them; ``val`` is the solver's ``BooleanValue``."""
    n = len(dag)
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
    return moves, steps


@dataclass(frozen=True)
class _Vars:
    """The model's Boolean variables: red[v][t], blue[v][t], and compute, read and write by
    (v, t)."""

    red: list[list[Any]]
    blue: list[list[Any]]
    comp: dict[tuple[int, int], Any]
    rd: dict[tuple[int, int], Any]
    wr: dict[tuple[int, int], Any]


def _add_hint(m: Any, dag: DAG, steps: list[dict], x: _Vars, inputs: set[int]) -> None:
    """Hint the schedule ``steps`` (packed moves) to the model ``m`` over its horizon."""
    n = len(dag)
    T = len(x.red[0]) - 1
    red, blue, comp, rd, wr = x.red, x.blue, x.comp, x.rd, x.wr
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
        Steps of the time-expanded model.  None: search (:mod:`attnio.pebble.solver`); an int: that horizon;
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
        start = (best_steps, best_io) if len(best_steps) <= T else None
        ts = time.perf_counter()
        out, infeasible, bound = _solve_horizon(dag, M, T, start, remaining, workers, recompute,
                                                seed)
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
