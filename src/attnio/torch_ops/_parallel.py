"""Coarse-grained parallelism for the engine: a few large pieces, one per thread, each run with
torch's intra-op parallelism off.

The engine's work is thousands of small torch operations (a feature level, a slice product, a
tile's prefix sum); run with several intra-op threads, each of them forks and joins the thread
pool, and the threads spin between operations: with two threads the engine took more CPU time
than with one (3.4x on the development machine) and, on a busy machine, up to 40x the wall-clock
time, since every join waits for the slowest thread.  Here the work is instead cut into as many
independent pieces as ``torch.get_num_threads()`` - ranges of batch x heads when there are
enough, else ranges of rows - and each piece runs its operations on one thread of a persistent
pool whose threads have torch's intra-op threads set to 1 (OpenMP's and MKL's thread counts are
per thread), so the threads never nest and the only synchronisation is one join per pass.
Torch releases the GIL inside its operations, so the Python threads run in parallel.

Causal rows are sequential (a running state).  Forward, rows split between p workers run as a
two-pass scan in rounds (:func:`scan_rounds`): pass 1, each piece computes its tiles' state sums
M(K_t) [V_t, 1] (the features of its keys and one product) and their total, in parallel; an
exclusive prefix of the totals (p - 1 small additions) gives each piece its starting state;
pass 2, each piece runs its rows from that state with the kept sums, so nothing is computed
twice.  A round keeps at most ``_STORE`` elements of sums (the rounds carry the state).  Where
not even one block per piece fits, and backward, a piece of rows that does not start at row 0
(backward: end at the last row) first absorbs the keys before it into its starting state
(backward: the queries after it into its state gradient), and the pieces are sized unequally
to balance that extra work.
"""

from __future__ import annotations

import math
import os
import threading
from concurrent.futures import ThreadPoolExecutor

__all__ = ["causal_blocks", "causal_pieces", "pieces", "pmap", "scan_rounds", "workers"]

_POOLS: dict[int, ThreadPoolExecutor] = {}
_LOCK = threading.Lock()
_LOCAL = threading.local()


def _forget_pools():  # a forked child (a DataLoader worker) has none of the parent's threads
    global _LOCK
    _POOLS.clear()
    _LOCK = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pools)
# extra work of a row piece, per row before it, relative to the work per row of its own: the
# forward absorbs earlier keys (features of k and one product) where a block does about
# 2.5 times that; the backward absorbs later queries where a block does about 7 times that
_PREFIX = {True: 0.4, False: 0.15}
# elements (all heads) of the per-tile state sums that a round of the forward's two-pass scan
# keeps between its passes (32 MB in float32; counted in _plan.memory_bytes)
_STORE = 1 << 23


def workers(device=None) -> int:
    """Pieces to cut the work into: torch's thread count on the CPU (1 inside a pool thread, and
    on an accelerator, whose operations are queued asynchronously anyway)."""
    import torch

    if getattr(_LOCAL, "in_pool", False) or torch.compiler.is_compiling() \
            or (device is not None and device.type != "cpu"):
        return 1
    return max(1, torch.get_num_threads())


def _init():
    import torch

    _LOCAL.in_pool = True
    torch.set_num_threads(1)


def _pool(p: int) -> ThreadPoolExecutor:
    import torch

    with _LOCK:
        pool = _POOLS.get(p)
        if pool is None:
            main = torch.get_num_threads()
            pool = ThreadPoolExecutor(p, thread_name_prefix="attnio", initializer=_init)
            barrier = threading.Barrier(p)
            list(pool.map(lambda _: barrier.wait(), range(p)))  # start all p threads now
            # torch.set_num_threads in a pool thread also sets the count that threads started
            # later inherit: put it back (this thread's own count never changed)
            torch.set_num_threads(main)
            _POOLS[p] = pool
        return pool


def pmap(fn, items: list) -> list:
    """``[fn(x) for x in items]``, the items in parallel on the pool when there are several,
    each under ``torch.no_grad()`` (the engine's passes are hand-written)."""
    import torch

    if len(items) <= 1:
        with torch.no_grad():
            return [fn(x) for x in items]

    def run(x):
        with torch.no_grad():
            return fn(x)

    # the last piece runs here, on one thread (this thread's OpenMP team would otherwise spin
    # beside the pool's threads), the others on the pool
    futures = [_pool(len(items) - 1).submit(run, x) for x in items[:-1]]
    main = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        last = run(items[-1])
    finally:
        torch.set_num_threads(main)
    return [f.result() for f in futures] + [last]


def _ceil_to(x: int, a: int) -> int:
    return max(a, -(-x // a) * a)


def _blocks(n: int, T: int) -> list[tuple[int, int]]:
    return [(a, min(n, a + T)) for a in range(0, n, T)]


def _split(n: int, p: int) -> list[tuple[int, int]]:
    """p nearly equal contiguous ranges of range(n) (empty ones dropped)."""
    cuts = [round(i * n / p) for i in range(p + 1)]
    return [(a, b) for a, b in zip(cuts, cuts[1:]) if b > a]


def pieces(BH: int, n: int, T: int, align: int = 1, device=None) -> list[tuple[int, int, list]]:
    """``(b0, b1, blocks)``: heads b0:b1 and the row blocks (of at most T rows) of each piece;
    one piece per worker, by heads when there are at least as many heads as workers, else by
    rows (blocks of at most ``n/p`` rows, so each worker gets some)."""
    p = workers(device)
    if p <= 1:
        return [(0, BH, _blocks(n, T))]
    if BH >= p:
        return [(b0, b1, _blocks(n, T)) for b0, b1 in _split(BH, p)]
    Tw = min(_ceil_to(max(1, T // p), align), _ceil_to(-(-n // p), align))
    blocks = _blocks(n, Tw)
    return [(0, BH, blocks[a:b]) for a, b in _split(len(blocks), p)]


def causal_blocks(BH: int, Lp: int, T: int, c: int, device=None) -> list[tuple[int, int]]:
    """The row blocks of the causal pass (the forward's states are saved per block): blocks of
    T rows, or, when the rows are split between workers, a multiple of p blocks (at least
    4 p, at most T rows each) of nearly equal whole tiles of c rows, so that the rounds of the
    two-pass scan (:func:`scan_rounds`) cut evenly and the backward's pieces can be balanced."""
    p = workers(device)
    if p <= 1 or BH >= p:
        return _blocks(Lp, T)
    nt = Lp // c
    nb = min(nt, _ceil_to(max(-(-Lp // T), 4 * p), p))
    return [(a * c, b * c) for a, b in _split(nt, nb)]


def scan_rounds(BH: int, blocks: list, per_row: float, device=None) -> list[list[list[int]]] | None:
    """The forward's two-pass scan when the rows are split between workers: rounds of
    consecutive blocks, each cut into (at most) p pieces of consecutive blocks, such that the
    per-tile state sums of a round (``per_row`` stored elements per row, all heads) are at most
    ``_STORE`` elements; None when the pass is not cut by rows (one worker, or ranges of
    heads), or when p blocks would already exceed ``_STORE`` (then :func:`causal_pieces`)."""
    p = workers(device)
    if p <= 1 or BH >= p or len(blocks) == 1:
        return None
    big = max(b - a for a, b in blocks) * per_row
    k = int(_STORE // (p * big))
    if k < 1:
        return None
    idx = list(range(len(blocks)))
    rounds = []
    for s in range(0, len(idx), k * p):
        part = idx[s:s + k * p]
        rounds.append([part[a:b] for a, b in _split(len(part), min(p, len(part)))])
    return rounds


def causal_pieces(BH: int, blocks: list, forward: bool,
                  device=None) -> list[tuple[int, int, list[int]]]:
    """``(b0, b1, block indices)`` of each worker for the causal pass over ``blocks``: ranges of
    heads, or consecutive blocks sized so that a piece's work plus its prefix's (forward: the
    rows before it; backward: after it) is equal for all (``x_j = x_0 - rho X_j`` with X_j the
    rows on the prefix side)."""
    p = workers(device)
    idx = list(range(len(blocks)))
    if p <= 1 or len(blocks) == 1:
        return [(0, BH, idx)]
    if BH >= p:
        return [(b0, b1, idx) for b0, b1 in _split(BH, p)]
    rho = _PREFIX[forward]
    while p > 1:
        x, X = [1.0], 1.0
        for _ in range(p - 1):
            x.append(1.0 - rho * X)
            X += x[-1]
        if x[-1] > 0.05:
            break
        p -= 1
    n = blocks[-1][1]
    sizes = [v / sum(x) * n for v in x]
    if not forward:
        sizes.reverse()
    out, start, bound = [], 0, 0.0
    for j, size in enumerate(sizes):
        bound += size
        stop = start
        while stop < len(blocks) and (j == len(sizes) - 1 or
                                      (blocks[stop][0] + blocks[stop][1]) / 2 < bound):
            stop += 1
        if stop > start:
            out.append((0, BH, idx[start:stop]))
        start = stop
    return out if not math.isnan(n) else [(0, BH, idx)]
