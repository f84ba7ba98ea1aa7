"""The backward pass across P processors: its referee and the schedules (the sequence family
here: ring, zigzag, striped, Ulysses, USP; the 2-D grid's and window_ring's in their modules,
:func:`attnio.parallel.grid.execute_backward`, :func:`attnio.parallel.window_ring.execute_backward`),
with closed forms equal to the referee.

The model extends the forward one (:mod:`~attnio.parallel.cluster`).  The owner of query row
``(h, r)`` starts with ``Q[h, r]``, ``dO[h, r]`` (d words each) and the row's statistics
``(lse, D = rowsum(dO ∘ O))`` (2 words: the forward pass left O and lse there); the owner of key
``(j, c)`` with ``K[j, c]`` and ``V[j, c]``.  A processor processes a pair's backward
contribution only while holding ``Q, dO, stats`` of its query row and ``K, V`` of its key; it adds
the contribution to its partial gradients ``dQ[h, r]``, ``dK[j, c]``, ``dV[j, c]`` (d words a
row when sent; a sent partial moves: the receiver adds it to its own, the sender keeps none of
it; a pair added twice into one partial is refused).  At the
end the owner of each row holds its finished gradient (every visible pair's contribution).

Schedules (processor ``p = g·u + k`` as in :mod:`~attnio.parallel.sequence`):

1. Ulysses all-to-all (u > 1): Q, dO, stats of the member's heads, K and V of its key/value heads;
2. ring, r steps: at step t processor (g, k) adds its query rows' contributions against the
   key/value block (g - t) mod r it holds into its dQ and into that block's dK, dV partial; then
   (t < r - 1) passes K, V *and* the block's dK, dV partial to g + 1, which adds it to its own;
   after the last step the partial of block g + 1 is finished at g and goes home (one more pass);
3. Ulysses all-to-all back (u > 1): dQ rows, and the dK, dV partials of the owners' rows.

Per processor (sent = received; r = P/u, K_u as in the forward):

    Q, dO, dQ:   3·B·(Nq/P)·d·H·(u - 1)/u,   stats: 2·B·(Nq/P)·H·(u - 1)/u
    K, V:        2·B·(u - 1)·(Nkv/P)·d·K_u  (in)  +  2·B·(u - 1)·(Nkv/P)·d·K_u  (dK, dV out)
    ring:        2·B·(r - 1)·(Nkv/r)·d·K_u  (K, V)  +  2·B·r·(Nkv/r)·d·K_u·[r > 1]  (dK, dV)

and the work is the forward's.  The backward's own lower bounds (which charge dO, the statistics
and the partial gradients sent home) are :func:`attnio.parallel.bounds.bound` with
``backward=True``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..core.errors import ParameterError, ScheduleError
from ..core.reference import mask as reference_mask
from ..core.workload import Shape
from .base import CommCost, check_P
from .cluster import MAX_REFEREE_PAIRS, Layout, sequence_rows
from .sequence import kv_per_member, member_heads, seq_cost

__all__ = ["SCHEMES", "SEQUENCE", "BackwardCluster", "cost_backward", "execute_backward",
           "run_backward", "scheme_u_kind", "schedule_backward"]

#: The schemes with a backward schedule.
SCHEMES = ("ring", "zigzag", "striped", "ulysses", "usp", "grid", "window_ring")
#: Those of them whose backward is the sequence family's (:func:`schedule_backward`); the others'
#: modules have ``cost_backward`` and ``execute_backward``.
SEQUENCE = ("ring", "zigzag", "striped", "ulysses", "usp")


def scheme_u_kind(name: str, P: int, params: dict[str, Any]) -> tuple[int, str]:
    """(u, ring kind) of a scheme of the sequence family."""
    if name == "ulysses":
        return P, "contiguous"
    if name == "usp":
        return params["u"], params["ring"]
    return 1, {"ring": "contiguous", "zigzag": "zigzag", "striped": "striped"}[name]


class BackwardCluster:
    """The backward referee: holdings of Q, dO, stats, K, V; partial dQ, dK, dV with the pairs
    each covers; words per processor and per link; work per processor."""

    def __init__(self, shape: Shape, layout: Layout, data: tuple[Any, ...] | None = None):
        self.shape, self.layout, self.P = shape, layout, layout.P
        P, nH, Nq, Nkv, d = layout.P, shape.n_heads, shape.Nq, shape.Nkv, shape.d
        if P * nH * Nq * Nkv > MAX_REFEREE_PAIRS:
            raise ParameterError(f"the referee keeps booleans per (processor, head, query, key): "
                                 f"P x heads x Nq x Nkv = {P * nH * Nq * Nkv:,} is more than "
                                 f"{MAX_REFEREE_PAIRS:,}; use cost_backward at this size",
                                 param="N")
        p_ix = np.arange(P)[:, None, None]
        qown = layout.q_owner[None] == p_ix
        kown = layout.kv_owner[None] == p_ix
        self.held = {"Q": qown.copy(), "dO": qown.copy(), "stats": qown.copy(),
                     "K": kown.copy(), "V": kown.copy()}
        self.visible = ~reference_mask(Nq, Nkv, shape.mask, shape.window)
        self.cq = np.zeros((P, nH, Nq, Nkv), dtype=bool)   # pairs in p's dQ partial
        self.ck = np.zeros((P, nH, Nq, Nkv), dtype=bool)   # pairs in p's dK/dV partials
        self.sent, self.received, self.work = [0] * P, [0] * P, [0] * P
        self.mem = [self._words(p) for p in range(P)]
        self.peak = list(self.mem)  # input-row words held now, and the most at any time
        self.links: dict[tuple[int, int], int] = {}
        self.compute_mode = data is not None
        if data is not None:
            Q, K, V, dO = (np.asarray(x, dtype=np.float64) for x in data)
            from ..core.reference import attention, logsumexp

            O = attention(Q, K, V, causal=shape.mask, window=shape.window)
            lse = logsumexp(Q, K, causal=shape.mask, window=shape.window)
            self._q, self._do = Q.reshape(nH, Nq, d), dO.reshape(nH, Nq, d)
            self._k, self._v = K.reshape(-1, Nkv, d), V.reshape(-1, Nkv, d)
            self._lse = lse.reshape(nH, Nq)
            self._D = (dO * O).sum(-1).reshape(nH, Nq)
            self.dq = np.zeros((P, nH, Nq, d))
            self.dk = np.zeros((P,) + self._k.shape)
            self.dv = np.zeros((P,) + self._k.shape)
        self.scale = 1.0 / np.sqrt(d)

    def kv_head(self, f: Any) -> Any:
        s = self.shape
        return (np.asarray(f) // s.heads) * s.kv_heads + (np.asarray(f) % s.heads) // s.group

    def _group_heads(self, j: np.ndarray) -> np.ndarray:
        """The query heads of key/value heads j."""
        s = self.shape
        f = np.arange(s.n_heads)
        return f[np.isin(self.kv_head(f), j)]

    def _count(self, src: int, dst: int, words: int) -> None:
        self.sent[src] += words
        self.received[dst] += words
        self.links[(src, dst)] = self.links.get((src, dst), 0) + words

    def send(self, src: int, dst: int, tensor: str, heads: Any, rows: Any) -> None:
        h = np.asarray(list(heads), dtype=np.int64)
        r = np.asarray(list(rows), dtype=np.int64)
        if h.size == 0 or r.size == 0:
            return
        d = self.shape.d
        ix = np.ix_(h, r)
        if tensor in self.held:
            if not self.held[tensor][src][ix].all():
                raise ScheduleError(f"send: processor {src} does not hold all the {tensor} "
                                    f"rows it sends")
            w = 2 if tensor == "stats" else d
            self.mem[dst] += int((~self.held[tensor][dst][ix]).sum()) * w
            self.peak[dst] = max(self.peak[dst], self.mem[dst])
            self.held[tensor][dst][ix] = True
            self._count(src, dst, h.size * r.size * w)
            return
        if tensor == "dQ":
            mine, theirs = self.cq[dst][ix], self.cq[src][ix]
            if (mine & theirs).any():
                raise ScheduleError(f"processor {dst}: a pair would be added twice into dQ")
            self.cq[dst][ix] = mine | theirs
            self.cq[src][ix] = False  # a partial moves: the sender keeps none of it
            if self.compute_mode:
                self.dq[dst][ix] += self.dq[src][ix]
                self.dq[src][ix] = 0.0
            self._count(src, dst, h.size * r.size * d)
            return
        if tensor in ("dK", "dV"):  # heads are key/value heads, rows keys; dK and dV travel
            if tensor == "dK":     # together: the coverage moves with dK
                gh = self._group_heads(h)
                mine = self.ck[dst][np.ix_(gh, np.arange(self.shape.Nq), r)]
                theirs = self.ck[src][np.ix_(gh, np.arange(self.shape.Nq), r)]
                if (mine & theirs).any():
                    raise ScheduleError(f"processor {dst}: a pair would be added twice into dK")
                self.ck[dst][np.ix_(gh, np.arange(self.shape.Nq), r)] = mine | theirs
                self.ck[src][np.ix_(gh, np.arange(self.shape.Nq), r)] = False  # it moves
            if self.compute_mode:
                arr = self.dk if tensor == "dK" else self.dv
                arr[dst][ix] += arr[src][ix]
                arr[src][ix] = 0.0  # the partial left (so it is not added twice by value)
            self._count(src, dst, h.size * r.size * d)
            return
        raise ScheduleError(f"send: unknown tensor {tensor!r}")

    def compute(self, p: int, heads: Any, rows: Any, keys: Any) -> None:
        h = np.asarray(list(heads), dtype=np.int64)
        r = np.asarray(list(rows), dtype=np.int64)
        c = np.asarray(list(keys), dtype=np.int64)
        if h.size == 0 or r.size == 0 or c.size == 0:
            return
        j = self.kv_head(h)
        for t in ("Q", "dO", "stats"):
            if not self.held[t][p][np.ix_(h, r)].all():
                raise ScheduleError(f"compute: processor {p} does not hold the {t} rows it uses")
        for t in ("K", "V"):
            if not self.held[t][p][np.ix_(np.unique(j), c)].all():
                raise ScheduleError(f"compute: processor {p} does not hold the {t} rows it uses")
        vis = np.zeros((r.size, self.shape.Nkv), dtype=bool)
        vis[:, c] = self.visible[np.ix_(r, c)]
        cov = np.broadcast_to(vis, (h.size,) + vis.shape)
        ix = np.ix_(h, r)
        if (self.cq[p][ix] & cov).any() or (self.ck[p][ix] & cov).any():
            raise ScheduleError(f"processor {p}: a pair would be counted twice")
        self.cq[p][ix] |= cov
        self.ck[p][ix] |= cov
        self.work[p] += int(vis.sum()) * h.size
        if self.compute_mode:
            q, do = self._q[ix], self._do[ix]
            k, v = self._k[j][:, c], self._v[j][:, c]
            s = self.scale * (q @ np.swapaxes(k, -1, -2))
            m = vis[:, c][None]
            pr = np.where(m, np.exp(np.where(m, s, 0.0) - self._lse[ix][..., None]), 0.0)
            dp = do @ np.swapaxes(v, -1, -2)
            ds = pr * (dp - self._D[ix][..., None])
            self.dq[p][ix] += self.scale * ds @ k
            for a, jj in enumerate(j):
                self.dk[p][jj, c] += self.scale * ds[a].T @ q[a]
                self.dv[p][jj, c] += pr[a].T @ do[a]

    def _words(self, p: int) -> int:
        d = self.shape.d
        return int(sum(self.held[t][p].sum() * (2 if t == "stats" else d) for t in self.held))

    def memory(self) -> list[int]:
        """The most words of input rows each processor held at any time (Q, dO, K, V: d a row;
        the statistics: 2)."""
        return list(self.peak)

    def drop(self, p: int, tensor: str, heads: Any, rows: Any) -> None:
        """Processor ``p`` frees its copies of input rows (Q, dO, stats, K, V)."""
        h = np.asarray(list(heads), dtype=np.int64)
        r = np.asarray(list(rows), dtype=np.int64)
        if tensor not in self.held:
            raise ScheduleError(f"drop: tensor must be one of {sorted(self.held)}, got {tensor!r}")
        if h.size == 0 or r.size == 0:
            return
        ix = np.ix_(h, r)
        self.mem[p] -= int(self.held[tensor][p][ix].sum()) * (2 if tensor == "stats"
                                                              else self.shape.d)
        self.held[tensor][p][ix] = False

    def finish(self) -> tuple[list[int], list[int], list[int]]:
        own_q, own_k = self.layout.q_owner, self.layout.kv_owner
        for f in range(self.shape.n_heads):
            for r in range(self.shape.Nq):
                if not (self.cq[own_q[f, r], f, r] == self.visible[r]).all():
                    raise ScheduleError(f"finish: dQ row {r} of head {f} is not finished on its "
                                        f"owner")
        for j in range(self.shape.n_kv_heads):
            gh = self._group_heads(np.array([j]))
            for c in range(self.shape.Nkv):
                p = own_k[j, c]
                if not (self.ck[p][gh][:, :, c] == self.visible[None, :, c]).all():
                    raise ScheduleError(f"finish: dK/dV row {c} of key/value head {j} is not "
                                        f"finished on its owner")
        return list(self.sent), list(self.received), list(self.work)

    def gradients(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        s = self.shape
        own_q, own_k = self.layout.q_owner, self.layout.kv_owner
        nH, nK = s.n_heads, s.n_kv_heads
        fq, rq = np.meshgrid(np.arange(nH), np.arange(s.Nq), indexing="ij")
        fk, rk = np.meshgrid(np.arange(nK), np.arange(s.Nkv), indexing="ij")
        dq = self.dq[own_q, fq, rq].reshape(s.batch, s.heads, s.Nq, s.d)
        dk = self.dk[own_k, fk, rk].reshape(s.batch, -1, s.Nkv, s.d)
        dv = self.dv[own_k, fk, rk].reshape(s.batch, -1, s.Nkv, s.d)
        return dq, dk, dv


def _check(name: str, shape: Shape, P: int, params: dict[str, Any] | None) -> dict[str, Any]:
    from . import get

    if name not in SCHEMES:
        raise ParameterError(f"scheme {name!r} has no backward schedule here; those that do: "
                             f"{', '.join(SCHEMES)}", param="scheme")
    return get(name).mapspace(shape, P).check(params)


def cost_backward(name: str, shape: Any, P: int, params: dict[str, Any] | None = None
                  ) -> CommCost:
    """The closed form of scheme ``name``'s backward pass (docstring above)."""
    from . import get

    shape = Shape.coerce(shape)
    P = check_P(P)
    params = _check(name, shape, P, params)
    if name not in SEQUENCE:
        return get(name).cost_backward(shape, P, params)
    u, kind = scheme_u_kind(name, P, params)
    r = P // u
    B, H, d = shape.batch, shape.heads, shape.d
    Ku = kv_per_member(shape, u)
    mq, mk = shape.Nq // P, shape.Nkv // P
    each = (B * mq * H * (u - 1) // u * (3 * d + 2)
            + 4 * B * (u - 1) * mk * d * Ku
            + 2 * B * (r - 1) * (shape.Nkv // r) * d * Ku
            + (2 * B * r * (shape.Nkv // r) * d * Ku if r > 1 else 0))
    fwd = seq_cost(shape, P, u, kind, name, params, True)
    per = (each,) * P
    return CommCost(name, params, P, 2 * each, P * each, lambda: (per, per), fwd.work)


def execute_backward(name: str, shape: Any, P: int, params: dict[str, Any] | None = None, *,
                     data: tuple[Any, Any, Any, Any] | None = None
                     ) -> tuple[tuple[list[int], list[int], list[int]], Any]:
    """Run scheme ``name``'s backward pass on the referee: (sent, received, work) per
    processor, and (dQ, dK, dV) with ``data = (Q, K, V, dO)``."""
    from . import get

    shape = Shape.coerce(shape)
    P = check_P(P)
    params = _check(name, shape, P, params)
    cl = BackwardCluster(shape, get(name).layout(shape, P, params), data)
    run_backward(cl, name, params)
    counts = cl.finish()
    return counts, (cl.gradients() if data is not None else None)


def run_backward(cl: Any, name: str, params: dict[str, Any]) -> None:
    """Scheme ``name``'s backward schedule on ``cl`` (the referee or the torch.distributed
    cluster), which starts in the scheme's layout."""
    from . import get

    if name not in SEQUENCE:
        get(name).execute_backward(cl, params)
        return
    u, kind = scheme_u_kind(name, cl.P, params)
    schedule_backward(cl, u, kind)


def schedule_backward(cl: Any, u: int, kind: str) -> None:
    """The backward schedule of the sequence family (u Ulysses members, ``kind`` ring blocks) on
    any cluster with the referee's interface (:class:`BackwardCluster`, or the torch.distributed
    one of :mod:`~attnio.parallel.distributed`)."""
    shape, P = cl.shape, cl.P
    r = P // u
    heads = [member_heads(shape, u, k) for k in range(u)]
    kvh = [sorted({int(j) for j in cl.kv_head(h)}) for h in heads]
    qb = [sequence_rows(shape.Nq, r, g, kind) for g in range(r)]
    kb = [sequence_rows(shape.Nkv, r, g, kind) for g in range(r)]
    mq, mk = shape.Nq // P, shape.Nkv // P

    def part(rows, k, m):
        return rows[k * m:(k + 1) * m]

    for g in range(r):  # 1. Ulysses in
        for k in range(u):
            for k2 in range(u):
                if k2 != k:
                    src, dst = g * u + k2, g * u + k
                    for ten in ("Q", "dO", "stats"):
                        cl.send(src, dst, ten, heads[k], part(qb[g], k2, mq))
                    for ten in ("K", "V"):
                        cl.send(src, dst, ten, kvh[k], part(kb[g], k2, mk))
    for t in range(r):  # 2. the ring, dK/dV partials travelling with their block
        for g in range(r):
            for k in range(u):
                cl.compute(g * u + k, heads[k], qb[g], kb[(g - t) % r])
        if r > 1:
            for g in range(r):
                for k in range(u):
                    src, dst = g * u + k, ((g + 1) % r) * u + k
                    b = kb[(g - t) % r]
                    if t < r - 1:
                        for ten in ("K", "V"):
                            cl.send(src, dst, ten, kvh[k], b)
                    for ten in ("dK", "dV"):
                        cl.send(src, dst, ten, kvh[k], b)
            if 1 <= t < r - 1:  # each frees the foreign block it passed on (double buffering)
                for g in range(r):
                    for k in range(u):
                        for ten in ("K", "V"):
                            cl.drop(g * u + k, ten, kvh[k], kb[(g - t) % r])
    for g in range(r):  # 3. Ulysses out: dQ, and the dK/dV partials of the owners' rows
        for k in range(u):
            for k2 in range(u):
                if k2 != k:
                    src, dst = g * u + k, g * u + k2
                    cl.send(src, dst, "dQ", heads[k], part(qb[g], k2, mq))
                    for ten in ("dK", "dV"):
                        cl.send(src, dst, ten, kvh[k], part(kb[g], k2, mk))
