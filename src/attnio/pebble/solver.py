"""The red-blue pebble game solved exactly on tiny DAGs: :func:`solve` combines three solvers.

The rules and the move checker are in :mod:`attnio.pebble.game`.

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
>>> from attnio.pebble.game import replay
>>> replay(dag.binary_tree(4), r.moves, 3).io
7
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass

from ..core.checks import check_int, check_real
from ..core.errors import ParameterError
from .astar import search
from .cpsat_model import cpsat
from .dag import DAG
from .game import Move, PebbleResult, _check_M, greedy, replay

__all__ = ["SolveOptions", "solve"]


@dataclass(frozen=True)
class SolveOptions:
    """How :func:`solve` spends its time, validated on construction: the share of it the A*
    search gets under ``method="auto"`` (``search_share``, in [0, 1]; CP-SAT gets the rest), and
    CP-SAT's ``horizon`` (an int >= 1, ``"safe"`` or None: searched; see :func:`cpsat`), its
    worker threads and its random ``seed``."""

    horizon: int | str | None = None
    workers: int = 2
    search_share: float = 0.6
    seed: int = 0

    def __post_init__(self) -> None:
        if self.horizon not in (None, "safe"):
            object.__setattr__(self, "horizon", check_int("horizon", self.horizon, minimum=1))
        object.__setattr__(self, "workers", check_int("workers", self.workers, minimum=1))
        object.__setattr__(self, "search_share",
                           check_real("search_share", self.search_share, lo=0, hi=1))
        object.__setattr__(self, "seed", check_int("seed", self.seed, minimum=0))


def solve(dag: DAG, M: int, *, time_limit: float = 60.0, method: str = "auto",
          recompute: bool = True, sliding: bool = False,
          options: SolveOptions | None = None) -> PebbleResult:
    """The minimum I/O (reads + writes) of the red-blue pebble game on ``dag`` with ``M`` pebbles.

    ``method="auto"`` (default): (1) a greedy schedule; if it meets the trivial bound it is
    optimal.  (2) :func:`search` (exact A*, no horizon, recomputation allowed) with
    ``options.search_share`` of the time (:class:`SolveOptions`); if it finishes, the result is the global optimum.  (3)
    otherwise :func:`cpsat` with the rest of the time, for the best schedule it finds; the
    result then keeps the best proven lower bound (trivial or A*'s) in ``lower_bound``.
    ``method="search"`` or ``"cpsat"`` runs one of them alone (``recompute`` and the options'
    ``horizon``, ``workers`` and ``seed`` apply to CP-SAT only; search always allows recomputation).  ``sliding=True`` solves the
    sliding variant (:mod:`attnio.pebble.game`) by search only.

    Returns a :class:`PebbleResult`; its ``moves`` replay with ``replay(dag, moves, M,
    sliding=sliding)``.  ``io`` is None only when no schedule was found at all.
    """
    M = check_int("M", M, minimum=1)
    opts = SolveOptions() if options is None else options
    if not isinstance(opts, SolveOptions):
        raise ParameterError(f"options must be an attnio.pebble.SolveOptions, got "
                             f"{type(opts).__name__}", param="options")
    if method not in ("auto", "search", "cpsat"):
        raise ParameterError(f"method must be 'auto', 'search' or 'cpsat', got {method!r}", param="method")
    if not (isinstance(time_limit, (int, float)) and time_limit > 0):
        raise ParameterError(f"time_limit must be a positive number of seconds, got {time_limit!r}", param="time_limit")
    if sliding and (method == "cpsat" or not recompute):
        raise ParameterError("sliding=True is solved by search only (method='auto' or 'search', "
                             "recompute=True)", param="sliding")
    _check_M(dag, M, sliding)
    if method == "cpsat" or not recompute:  # search and greedy shortcuts assume recomputation
        return cpsat(dag, M, horizon=opts.horizon, time_limit=time_limit,
                     workers=opts.workers, recompute=recompute, seed=opts.seed)
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
    share = 1.0 if method == "search" or sliding else opts.search_share
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
    cp = cpsat(dag, M, horizon=opts.horizon, time_limit=rest, workers=opts.workers,
               recompute=recompute, seed=opts.seed)
    glob = cp.globally_optimal or (cp.io is not None and cp.io <= search_lb)
    scope = cp.scope if not glob or cp.globally_optimal else "global: CP-SAT schedule meets A*'s bound"
    return dataclasses.replace(cp, lower_bound=max(cp.lower_bound, search_lb), globally_optimal=glob,
                               scope=scope, seconds=time.perf_counter() - t0, method="search+cpsat")
