"""FlashAttention-2's backward pass (Algorithm 2 of arXiv 2307.08691) on the two-level memory.

Inputs in slow memory: Q, K, V, the forward output O, its gradient dO and the logsumexp L the
forward wrote (``flash2`` with ``backward=True``).  Outputs: dQ, dK, dV.  Per key/value head, with
its ``g = heads/kv_heads`` query heads (dK, dV of a shared head sum over its query heads)::

    for each query head, each query block i:  load O_i, dO_i; D_i = rowsum(dO_i ∘ O_i); write D_i
    for each query head, each query block i:  write dQ_i = 0
    for each key/value block j (Bc rows):
        if no query sees block j: write dK_j = dV_j = 0; continue
        load K_j, V_j;  dK_j = dV_j = 0 in fast memory
        for each query head, each query block i that sees block j (Br rows):
            load Q_i, dO_i, L_i, D_i, dQ_i
            P = exp(scale·Q_i K_jᵀ − L_i)  (masked entries 0)
            dV_j += Pᵀ dO_i;  dS = P ∘ (dO_i V_jᵀ − D_i)
            dQ_i += scale·dS K_j;  write dQ_i
            dK_j += scale·dSᵀ Q_i
        write dK_j, dV_j

Closed form per key/value head.  With ``rows_j`` the rows of the Br blocks that see key block j
(all Nq unmasked; causal/window as in ``flash1``) and ``vis_j`` whether any does:

    reads  = g·2·Nq·d + 2·d·sum_j [vis_j]·Bc_j + g·(3d + 2)·sum_j rows_j
    writes = g·Nq + g·Nq·d + 2·Nkv·d + g·d·sum_j rows_j

times ``batch·kv_heads``.  Unmasked, N = Nq = Nkv, one head: ``2Nd + 2Nd + N + Nd + 2Nd +
ceil(N/Bc)·N·(4d + 2)``, Θ(N²d²/M) when Bc ∝ M/d.  Fast memory: K_j, V_j, dK_j, dV_j (4·Bc·d), Q_i,
dO_i, dQ_i (3·Br·d), L_i, D_i (2·Br), P and dS (2·Br·Bc):
``footprint = 4·Bc·d + 3·Br·d + 2·Br·Bc + 2·Br``, so M >= 7d + 4.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..core import masks
from ..core.checks import check_int
from ..core.errors import CapacityError, ParameterError
from ..core.memory import IOCount, SlowArray, TwoLevelMemory
from ..core.workload import Shape, cdiv, q_range
from . import _kernels as K_


@dataclass(frozen=True)
class BackwardTiling:
    """Br query rows and Bc key/value rows per block of the backward pass."""

    Br: int
    Bc: int


def _fp(d: int, Br: int, Bc: int) -> int:
    return 4 * Bc * d + 3 * Br * d + 2 * Br * Bc + 2 * Br


def _row_sum_dot(D: np.ndarray, dO: np.ndarray, O: np.ndarray) -> None:
    D[:] = np.sum(dO * O, axis=1)


def _backward_step(P: np.ndarray, dS: np.ndarray, dQ: np.ndarray, dK: np.ndarray, dV: np.ndarray,
                   Q: np.ndarray, dO: np.ndarray, L: np.ndarray, D: np.ndarray, Kj: np.ndarray,
                   Vj: np.ndarray, *, scale: float,
                   mask: tuple[int, int, int, int | None] | None = None) -> None:
    """One (i, j) step: P from the saved logsumexp, then dV, dS, dQ, dK (Algorithm 2, l. 11-20)."""
    np.matmul(Q, Kj.T, out=P)
    P *= scale
    if mask is not None:
        K_.apply_causal_mask(P, *mask)
    np.subtract(P, np.where(np.isfinite(L), L, np.inf)[:, None], out=P)  # L = -inf: P = 0
    np.exp(P, out=P)
    dV += P.T @ dO
    np.matmul(dO, Vj.T, out=dS)
    dS -= D[:, None]
    dS *= P
    dQ += scale * (dS @ Kj)
    dK += scale * (dS.T @ Q)


class Flash2Backward:
    """The backward schedule of ``flash2`` (not a registry entry: reached through flash2)."""

    name = "flash2_backward"
    Tiling = BackwardTiling

    def footprint(self, shape: Shape, t: BackwardTiling) -> int:
        return _fp(shape.d, min(t.Br, shape.Nq), min(t.Bc, shape.Nkv))

    def min_M(self, shape: Shape) -> int:
        return _fp(shape.d, 1, 1)

    def candidate_tilings(self, shape: Shape, M: int) -> list[BackwardTiling]:
        d = shape.d
        out: list[BackwardTiling] = []
        br = 1
        while br <= shape.Nq:
            bc = min(shape.Nkv, (M - 3 * br * d - 2 * br) // (4 * d + 2 * br))
            if bc >= 1:
                out.append(BackwardTiling(br, bc))
            br *= 2
        return out

    def predict(self, shape: Shape, t: BackwardTiling) -> IOCount:
        d, g, Nq = shape.d, shape.group, shape.Nq
        s = masks.key_block_sums(Nq, shape.Nkv, t.Br, t.Bc, shape.offset, shape.window,
                                 shape.causal)
        R = s.width  # sum_j rows_j, in O(log N)
        reads = g * 2 * Nq * d + 2 * d * s.size_seen + g * (3 * d + 2) * R
        writes = g * Nq + g * Nq * d + 2 * shape.Nkv * d + g * d * R
        return IOCount(reads, writes).scaled(shape.n_kv_heads)

    def steps(self, shape: Shape, t: BackwardTiling) -> int:
        return cdiv(shape.Nq, t.Br) * cdiv(shape.Nkv, t.Bc)

    def coerce_tiling(self, shape: Shape, M: int, tiling: object = None) -> BackwardTiling:
        if tiling is None:
            if M < self.min_M(shape):
                raise ParameterError(
                    f"M={M} is too small for the flash2 backward pass with d={shape.d}: it needs "
                    f"M >= {self.min_M(shape)} words"
                )
            cands = self.candidate_tilings(shape, M)
            return min(cands, key=lambda t: (self.predict(shape, t).total, self.steps(shape, t)))
        if isinstance(tiling, dict):
            unknown = set(tiling) - {"Br", "Bc"}
            if unknown or set(tiling) != {"Br", "Bc"}:
                raise ParameterError(f"backward tiling needs exactly the fields Br and Bc, got "
                                     f"{sorted(tiling)}", param="backward_tiling")
            tiling = BackwardTiling(**tiling)
        if not isinstance(tiling, BackwardTiling):
            raise ParameterError(f"backward tiling must be a BackwardTiling or a mapping of Br, "
                                 f"Bc, got {tiling!r}", param="backward_tiling")
        check_int("backward_tiling.Br", tiling.Br)
        check_int("backward_tiling.Bc", tiling.Bc)
        need = self.footprint(shape, tiling)
        if need > M:
            raise CapacityError(f"flash2 backward with tiling {tiling}", 0, need, M)
        return tiling

    def run_schedule(self, mem: TwoLevelMemory, arrays: dict[str, SlowArray], *, shape: Shape,
                     tiling: BackwardTiling, scale: float) -> None:
        """``arrays``: Q, K, V, O, dO, L (inputs) and dQ, dK, dV (outputs), stacked by head."""
        Nq, Nkv = shape.Nq, shape.Nkv
        D = mem.scratch("D", (shape.n_heads * Nq,))
        for kvb in mem.blocks(shape.n_kv_heads, 1):
            kvh = kvb.start
            ks = slice(kvh * Nkv, (kvh + 1) * Nkv)
            q_heads = range(kvh * shape.group, (kvh + 1) * shape.group)
            qv = {}
            for name, arr in (("Q", arrays["Q"]), ("O", arrays["O"]), ("dO", arrays["dO"]),
                              ("dQ", arrays["dQ"]), ("L", arrays["L"]), ("D", D)):
                qv[name] = [mem.view(arr, slice(h * Nq, (h + 1) * Nq)) for h in q_heads]
            kv = {n: mem.view(arrays[n], ks) for n in ("K", "V", "dK", "dV")}
            self._one_kv_head(mem, qv, kv, shape=shape, tiling=tiling, scale=scale)

    def _one_kv_head(self, mem: TwoLevelMemory, qv: dict[str, list[SlowArray]],
                     kv: dict[str, SlowArray], *, shape: Shape, tiling: BackwardTiling,
                     scale: float) -> None:
        d, Nq, Nkv = shape.d, shape.Nq, shape.Nkv
        Br, Bc = tiling.Br, tiling.Bc
        for g in range(len(qv["Q"])):  # preprocessing: D = rowsum(dO ∘ O); dQ = 0
            for qb in mem.blocks(Nq, Br):
                Oi = mem.load(qv["O"][g], qb, label="O_i")
                dOi = mem.load(qv["dO"][g], qb, label="dO_i")
                Di = mem.alloc((qb.size,), label="D_i")
                mem.compute(_row_sum_dot, Di, dOi, Oi, writes=1)
                mem.store(Di, qv["D"][g], qb)
                mem.free(Oi, dOi, Di)
            for qb in mem.blocks(Nq, Br):
                z = mem.alloc((qb.size, d), 0.0, label="dQ_init")
                mem.store(z, qv["dQ"][g], qb)
                mem.free(z)
        band = masks.Band.keys(shape) if shape.causal else None  # the queries each block meets
        for kb in mem.blocks(Nkv, Bc, band=band):
            qlo, qhi = q_range(shape, kb.start, kb.stop)
            dKj = mem.alloc((kb.size, d), 0.0, label="dK_j")
            dVj = mem.alloc((kb.size, d), 0.0, label="dV_j")
            if qhi > qlo:
                Kj = mem.load(kv["K"], kb, label="K_j")
                Vj = mem.load(kv["V"], kb, label="V_j")
                for g in range(len(qv["Q"])):
                    for qb in mem.blocks(Nq, Br, lo=qlo, hi=qhi, band=band):
                        Qi = mem.load(qv["Q"][g], qb, label="Q_i")
                        dOi = mem.load(qv["dO"][g], qb, label="dO_i")
                        Li = mem.load(qv["L"][g], qb, label="L_i")
                        Di = mem.load(qv["D"][g], qb, label="D_i")
                        dQi = mem.load(qv["dQ"][g], qb, label="dQ_i")
                        P = mem.alloc((qb.size, kb.size), label="P_ij")
                        dS = mem.alloc((qb.size, kb.size), label="dS_ij")
                        mask = None
                        if K_.tile_needs_mask(shape, qb.start, kb.stop, qb.stop, kb.start):
                            mask = (qb.start, kb.start, shape.offset, shape.window)
                        mem.compute(lambda *a, mask=mask: _backward_step(*a, scale=scale,
                                                                         mask=mask),
                                    P, dS, dQi, dKj, dVj, Qi, dOi, Li, Di, Kj, Vj, writes=5)
                        mem.store(dQi, qv["dQ"][g], qb)
                        mem.free(Qi, dOi, Li, Di, dQi, P, dS)
                mem.free(Kj, Vj)
            mem.store(dKj, kv["dK"], kb)
            mem.store(dVj, kv["dV"], kb)
            mem.free(dKj, dVj)


BACKWARD = Flash2Backward()
