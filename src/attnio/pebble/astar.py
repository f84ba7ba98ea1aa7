"""Exact minimum I/O of the red-blue pebble game by A* over its states (:func:`search`).

The rules are :mod:`attnio.pebble.game`'s; recomputation is allowed and there is no horizon, so
a finished search is the global optimum, and an interrupted one still gives a lower bound valid
for every schedule (:mod:`attnio.pebble.solver`).
"""

from __future__ import annotations

import heapq
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
    return _AStar(dag, M, sliding, upper).run(time_limit, max_states)


_INF = 1 << 60
_State = tuple[int, int, int]  # red nodes, blue non-inputs, blue outputs (bit masks)


class _AStar:
    """The search of :func:`search`: the game's precomputed structure, the open list and the
    best-known cost and parent of every state reached."""

    def __init__(self, dag: DAG, M: int, sliding: bool, upper: int | None) -> None:
        self.dag, self.M, self.sliding, self.upper = dag, M, sliding, upper
        self.t0 = time.perf_counter()
        n = self.n = len(dag)
        self.outputs = list(dict.fromkeys(dag.outputs))
        self.out_bit = {o: 1 << k for k, o in enumerate(self.outputs)}
        self.all_out = (1 << len(self.outputs)) - 1
        reach = [0] * n  # outputs reachable from v (as a mask over outputs)
        for v in range(n - 1, -1, -1):
            r = self.out_bit.get(v, 0)
            for s in dag.succs[v]:
                r |= reach[s]
            reach[v] = r
        self.reach = reach
        self.pred_mask = [sum(1 << u for u in dag.preds[v]) for v in range(n)]
        self.is_in = [dag.is_input(v) for v in range(n)]
        self.names = dag.names
        self.dead_cache: dict[int, int] = {}
        start: _State = (0, 0, 0)
        self.g_best: dict[_State, int] = {start: 0}
        self.parent: dict[_State, tuple[_State | None, tuple[Move, ...]]] = {start: (None, ())}
        self.counter = 0
        self.heap: list[tuple[int, int, int, _State]] = [(self.h(0, 0, 0), 0, 0, start)]

    def dead_of(self, bo: int) -> int:
        """The nodes every output of which is blue (as a mask over nodes)."""
        d = self.dead_cache.get(bo)
        if d is None:
            d = sum(1 << v for v in range(self.n) if self.reach[v] & ~bo == 0)
            self.dead_cache[bo] = d
        return d

    def h(self, red: int, blue: int, bo: int) -> int:
        """The admissible heuristic: a write per output not yet blue, a read per input that is
        not red and reaches one through nodes neither red nor blue."""
        need_out = [o for o in self.outputs if not bo & self.out_bit[o]]
        seen = 0
        stack = [o for o in need_out if not red >> o & 1]
        reads = 0
        while stack:
            v = stack.pop()
            if seen >> v & 1:
                continue
            seen |= 1 << v
            for u in self.dag.preds[v]:
                if red >> u & 1 or seen >> u & 1:
                    continue
                if self.is_in[u]:
                    seen |= 1 << u
                    reads += 1
                elif not blue >> u & 1:
                    stack.append(u)
        return len(need_out) + reads

    def push(self, cur: _State, state: _State, g: int, mv: tuple[Move, ...]) -> None:
        """Reach ``state`` from ``cur`` by the moves ``mv`` at cost ``g`` (dead pebbles dropped)."""
        red, blue, bo = state
        dead = self.dead_of(bo)
        gone = red & dead
        if gone:
            mv = mv + tuple(Move("D", self.names[u]) for u in range(self.n) if gone >> u & 1)
        state = (red & ~dead, blue & ~dead, bo)
        if g < self.g_best.get(state, _INF):
            f = g + self.h(state[0], state[1], bo)
            if self.upper is not None and f > self.upper:
                return
            self.g_best[state] = g
            self.parent[state] = (cur, mv)
            self.counter += 1
            heapq.heappush(self.heap, (f, g, self.counter, state))

    def expand(self, cur: _State, g: int) -> None:
        """Push every successor of ``cur`` in the canonical forms of :func:`search`."""
        red, blue, bo = cur
        names, is_in, M = self.names, self.is_in, self.M
        dead = self.dead_of(bo)
        nred = bin(red).count("1")
        reds = [u for u in range(self.n) if red >> u & 1]
        # writes of live red non-blue non-inputs (outputs are written on compute)
        for u in reds:
            if not is_in[u] and not blue >> u & 1:
                self.push(cur, (red, blue | 1 << u, bo), g + 1, (Move("W", names[u]),))
        for v in range(self.n):
            bit = 1 << v
            if red & bit or dead & bit:
                continue
            if is_in[v] or blue & bit:
                cost, kind, keep = 1, "R", 0
            elif self.pred_mask[v] & red == self.pred_mask[v]:
                cost, kind, keep = 0, "C", self.pred_mask[v]
            else:
                continue
            extra: tuple[Move, ...] = ()
            nb, nbo = blue, bo
            if kind == "C" and v in self.out_bit and not bo & self.out_bit[v]:
                cost += 1
                extra = (Move("W", names[v]),)
                nb, nbo = blue | bit, bo | self.out_bit[v]
            mv = (Move(kind, names[v]),) + extra
            if nred < M:
                self.push(cur, (red | bit, nb, nbo), g + cost, mv)
                continue
            for u in reds:
                if not keep >> u & 1:
                    self.push(cur, ((red & ~(1 << u)) | bit, nb, nbo), g + cost,
                              (Move("D", names[u]),) + mv)
                elif self.sliding:  # slide the operand's pebble onto v
                    self.push(cur, ((red & ~(1 << u)) | bit, nb, nbo), g + cost,
                              (Move("S", names[v], names[u]),) + extra)

    def path(self, st: _State) -> list[Move]:
        """The moves from the start to ``st``."""
        moves: list[Move] = []
        while True:
            p, mv = self.parent[st]
            if p is None:
                return moves
            moves[:0] = mv
            st = p

    def run(self, time_limit: float, max_states: int) -> SearchResult:
        closed_f = 0
        expanded = 0
        dag, M = self.dag, self.M
        while self.heap:
            f, g, _, cur = heapq.heappop(self.heap)
            if g > self.g_best.get(cur, _INF):
                continue
            closed_f = f  # the least f in the open list: a lower bound on the optimum
            if cur[2] == self.all_out:
                moves = self.path(cur)
                rep = replay(dag, moves, M, sliding=self.sliding)
                return SearchResult(dag.title, M, rep.io, tuple(moves), True, rep.io,
                                    len(self.g_best), time.perf_counter() - self.t0)
            expanded += 1
            if expanded % 64 == 0 and (time.perf_counter() - self.t0 > time_limit
                                       or len(self.g_best) > max_states):
                break
            self.expand(cur, g)
        if not self.heap and self.upper is not None:  # nothing cheaper than ``upper`` exists
            closed_f = self.upper
        return SearchResult(dag.title, M, None, (), False, closed_f, len(self.g_best),
                            time.perf_counter() - self.t0)
