"""Exact minimum I/O of the red-blue pebble game by A* over its states (:func:`search`).

The rules are :mod:`attnio.pebble.game`'s; recomputation is allowed and there is no horizon, so
a finished search is the global optimum, and an interrupted one still gives a lower bound valid
for every schedule (:mod:`attnio.pebble.solver`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from ..core.checks import check_int
from .dag import DAG
from .game import Move, _check_M, replay

__all__ = ["SearchResult", "search"]


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
