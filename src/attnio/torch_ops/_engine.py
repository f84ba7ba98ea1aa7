"""The linear-attention engine: ``O = N / D`` with ``[N, D] = sum_j A_ij [v_j, 1]`` and
``A_ij = <M(q_i), cw * M(k_j)>`` (a kernel of :mod:`._kernels`), forward and backward by hand.

Non-causal: ``U = sum_j M(k_j) [v_j, 1]`` (r x (Ev+1), one pass over the keys, :class:`Absorb`),
then ``[N, D] = M(Q)^T (cw * U)`` (one pass over the queries, :class:`Readout`).

Causal (the chunked form of causal linear attention): the query rows are split into tiles of
``c`` rows and the keys aligned with them (query i sees aligned keys j <= i, plus an initial state
``U0`` for keys every query sees).  For tile t with state ``S_t = U0 + sum_{t' < t} dU_t'``,
``dU_t = M(K_t) [V_t, 1]``::

    [N, D]_t = M(Q_t)^T (cw * S_t)  +  (tril(A_tt)) [V_t, 1]                       (inter + intra)

where the in-tile weights ``A_tt`` are the kernel's own values (``P(s q k^T)`` evaluated directly
for the polynomial kernel: the same numbers the features would give).  The tiles of a block of
``T`` rows are processed together (batched matmuls, and an exclusive cumulative sum of the dU_t
over the tiles), so the work is parallel over batch, heads and tiles; the blocks run in sequence
and carry the running r x (Ev+1) state.  The backward walks the blocks in reverse from the block
states saved by the forward (no subtraction of states: no cancellation in float32), carrying the
gradient of the state.  Memory beyond inputs and output: O(T r) per head for the features, plus
the saved block states, ``ceil(n/T) r (Ev+1)`` per head; ``T`` is chosen with
``T >= sqrt(n (Ev+1))`` so that the states never exceed one block's features.
"""

from __future__ import annotations

import math

from ._parallel import causal_blocks, causal_pieces, pmap, scan_rounds
from ._parallel import pieces as _pieces

__all__ = ["Absorb", "Causal", "Readout", "block_rows", "linear_attention"]

_BUDGET = 1 << 22  # feature elements per block, all heads together (16 MB in float32)


def block_rows(n: int, r: int, heads: int, ev1: int, tile: int, chunk: int | None) -> int:
    """Rows per block T (a multiple of ``tile``): ``chunk`` if given, else from the budget."""
    if chunk is not None:
        T = chunk
    else:
        T = max(_BUDGET // max(1, r * heads), int(math.isqrt(n * ev1)) + 1, tile)
    T = min(T, n) if n > 0 else T
    return max(tile, -(-T // tile) * tile)


def _blocks(n: int, T: int, start: int = 0):
    return [(a, min(n, a + T)) for a in range(start, n, T)]


try:  # the Functions below need torch's base class; without torch nothing here is called
    import torch
    from torch.autograd import Function as _Function
    from torch.autograd.function import once_differentiable
except ImportError:  # pragma: no cover - the optional extra is missing
    torch = None  # type: ignore[assignment]
    _Function = object  # type: ignore[assignment,misc]

    def once_differentiable(fn):  # type: ignore[misc]
        return fn



class Absorb(_Function):
    """U = sum over rows of M(k_j) v1_j (r x Ev1); k (BH, S, E), v1 (BH, S, Ev1)."""

    @staticmethod
    def forward(ctx, k, v1, kern, T):
        BH, S = k.shape[0], k.shape[-2]
        U = k.new_zeros(k.shape[:-2] + (kern.r, v1.shape[-1]))
        pieces = _pieces(BH, S, T, 1, k.device)

        def part(piece):
            b0, b1, blocks = piece
            return _absorb(kern, k[b0:b1], v1[b0:b1], blocks)

        for (b0, b1, _), Up in zip(pieces, pmap(part, pieces)):
            U[b0:b1] += Up
        ctx.kern, ctx.T = kern, T
        ctx.save_for_backward(k, v1)
        return U

    @staticmethod
    @once_differentiable
    def backward(ctx, dU):
        k, v1 = ctx.saved_tensors
        kern = ctx.kern
        dk, dv1 = torch.empty_like(k), torch.empty_like(v1)

        def part(piece):
            b0, b1, blocks = piece
            for a, b in blocks:
                kT = k[b0:b1, a:b, :].transpose(-1, -2)
                M = kern.lower(kT, False)
                dv1[b0:b1, a:b, :] = kern.mt_mul(kT, M, dU[b0:b1])
                dk[b0:b1, a:b, :] = kern.grad_outer(
                    kT, M, [(dU[b0:b1], v1[b0:b1, a:b, :])]).transpose(-1, -2)

        pmap(part, _pieces(k.shape[0], k.shape[-2], ctx.T, 1, k.device))
        return dk, dv1, None, None


class Readout(_Function):
    """N1 = M(q)^T (cw * U) (BH, L, Ev1)."""

    @staticmethod
    def forward(ctx, q, U, kern, T):
        Uw = U * kern.cw[:, None]
        out = q.new_empty(q.shape[:-1] + (U.shape[-1],))

        def part(piece):
            b0, b1, blocks = piece
            for a, b in blocks:
                qT = q[b0:b1, a:b, :].transpose(-1, -2)
                out[b0:b1, a:b, :] = kern.mt_mul(qT, kern.lower(qT, True), Uw[b0:b1])

        pmap(part, _pieces(q.shape[0], q.shape[-2], T, 1, q.device))
        ctx.kern, ctx.T = kern, T
        ctx.save_for_backward(q, U)
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, dN):
        q, U = ctx.saved_tensors
        kern = ctx.kern
        Uw = U * kern.cw[:, None]
        dq = torch.empty_like(q)
        dUw = torch.zeros_like(U)

        def part(piece):
            b0, b1, blocks = piece
            acc = torch.zeros_like(U[b0:b1])
            for a, b in blocks:
                qT = q[b0:b1, a:b, :].transpose(-1, -2)
                M = kern.lower(qT, True)
                G = dN[b0:b1, a:b, :]
                acc += kern.m_mul(qT, M, G)
                dq[b0:b1, a:b, :] = kern.grad_outer(qT, M, [(Uw[b0:b1], G)]).transpose(-1, -2)
            return acc

        pieces = _pieces(q.shape[0], q.shape[-2], ctx.T, 1, q.device)
        for (b0, b1, _), acc in zip(pieces, pmap(part, pieces)):
            dUw[b0:b1] += acc
        return dq, dUw * kern.cw[:, None], None, None


class Causal(_Function):
    """Square causal (query i sees key i and before, plus the initial state U0)."""

    @staticmethod
    def forward(ctx, q, k, v1, U0, kern, T, c):
        BH, L, E = q.shape
        Lp = -(-L // c) * c
        if Lp != L:
            pad = (0, 0, 0, Lp - L)
            q, k, v1 = (torch.nn.functional.pad(x, pad) for x in (q, k, v1))
        tril = torch.ones(c, c, dtype=q.dtype, device=q.device).tril()
        cw = kern.cw[:, None]
        N1 = q.new_empty(BH, Lp, v1.shape[-1])
        blocks = causal_blocks(BH, Lp, T, c, q.device)
        states = q.new_empty((len(blocks),) + tuple(U0.shape))

        def block(i, b0, b1, U, dU=None):
            """Block i of heads b0:b1 from the state U entering it (its tiles' state sums dU
            when pass 1 of the scan made them); returns the state leaving it."""
            a, b = blocks[i]
            states[i, b0:b1] = U
            nc = (b - a) // c
            Qc, Kc, Vc = (x[b0:b1, a:b].reshape(b1 - b0, nc, c, x.shape[-1])
                          for x in (q, k, v1))
            QT, KT = Qc.transpose(-1, -2), Kc.transpose(-1, -2)
            Mq = kern.lower(QT, True)
            Mk = kern.lower(KT, False) if dU is None or not kern.direct else None
            if dU is None:
                dU = kern.m_mul(KT, Mk, Vc)  # (BH, nc, r, Ev1)
            Sx = _exclusive_cumsum(torch, dU, U)
            U = Sx[:, -1] + dU[:, -1]
            out = kern.mt_mul(QT, Mq, Sx * cw)
            A = _intra(kern, Qc, Kc, Mq, Mk) * tril
            out += A @ Vc
            N1[b0:b1, a:b] = out.reshape(b1 - b0, b - a, -1)
            return U

        rounds = scan_rounds(BH, blocks, BH * kern.r * v1.shape[-1] / c, q.device)
        if rounds is None:
            def part(piece):
                b0, b1, idx = piece
                a0 = blocks[idx[0]][0]
                U = U0[b0:b1]
                if a0 > 0:  # the state entering this segment: the keys before it, absorbed here
                    U = U + _absorb(kern, k[b0:b1], v1[b0:b1], _blocks(a0, T))
                for i in idx:
                    U = block(i, b0, b1, U)

            pmap(part, causal_pieces(BH, blocks, True, q.device))
        else:  # the two-pass scan, round by round: no work is done twice
            U = U0
            for rnd in rounds:
                dUs: dict = {}

                def sums(idx, dUs=dUs):  # pass 1: each piece's per-tile state sums
                    tot = None
                    for i in idx:
                        a, b = blocks[i]
                        KT = k[:, a:b].reshape(BH, (b - a) // c, c, -1).transpose(-1, -2)
                        dU = dUs[i] = kern.m_mul(
                            KT, kern.lower(KT, False),
                            v1[:, a:b].reshape(BH, (b - a) // c, c, -1))
                        s = dU.sum(1)
                        tot = s if tot is None else tot.add_(s)
                    return tot

                starts = [U]
                for tot in pmap(sums, rnd):  # the exclusive prefix over the pieces
                    starts.append(starts[-1] + tot)
                U = starts.pop()

                def run(job, dUs=dUs):  # pass 2: each piece's blocks from its starting state
                    idx, S = job
                    for i in idx:
                        S = block(i, 0, BH, S, dUs.pop(i))

                pmap(run, list(zip(rnd, starts)))
        ctx.kern, ctx.T, ctx.c, ctx.L, ctx.blocks = kern, T, c, L, blocks
        ctx.save_for_backward(q, k, v1, states)
        return N1[:, :L]

    @staticmethod
    @once_differentiable
    def backward(ctx, dN1):
        q, k, v1, states = ctx.saved_tensors
        kern, T, c, L = ctx.kern, ctx.T, ctx.c, ctx.L
        BH, Lp, E = q.shape
        if Lp != L:
            dN1 = torch.nn.functional.pad(dN1, (0, 0, 0, Lp - L))
        tril = torch.ones(c, c, dtype=q.dtype, device=q.device).tril()
        cw = kern.cw[:, None]
        dq, dk, dv1 = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v1)
        dU0 = torch.empty_like(states[0])
        blocks = ctx.blocks
        pieces = causal_pieces(BH, blocks, False, q.device)

        def part(piece):
            b0, b1, idx = piece
            end = blocks[idx[-1]][1]
            # gradient of the state entering the blocks after this segment: their queries'
            # cw * M(q) G, absorbed here
            dSuf = torch.zeros_like(states[0, b0:b1])
            if end < Lp:
                dSuf += _absorb(kern, q[b0:b1], dN1[b0:b1], _blocks(Lp, T, end), True) * cw
            for i in reversed(idx):
                a, b = blocks[i]
                nc = (b - a) // c
                Qc, Kc, Vc = (x[b0:b1, a:b].reshape(b1 - b0, nc, c, x.shape[-1])
                              for x in (q, k, v1))
                G = dN1[b0:b1, a:b].reshape(b1 - b0, nc, c, -1)
                QT, KT = Qc.transpose(-1, -2), Kc.transpose(-1, -2)
                Mq, Mk = kern.lower(QT, True), kern.lower(KT, False)
                Sw = _exclusive_cumsum(torch, kern.m_mul(KT, Mk, Vc), states[i, b0:b1]) * cw
                dS = kern.m_mul(QT, Mq, G) * cw  # gradient of each tile's S_t
                suf = _suffix_cumsum(torch, dS)
                gdU = torch.cat([suf[:, 1:], torch.zeros_like(suf[:, :1])], 1) + dSuf[:, None]
                dSuf = dSuf + suf[:, 0]
                pq, pk = [(Sw, G)], [(gdU, Vc)]  # dL/dM(Q) = Sw G^T, dL/dM(K) = gdU Vc^T
                dV = kern.mt_mul(KT, Mk, gdU)
                dA = (G @ Vc.transpose(-1, -2)) * tril
                if kern.direct:
                    A, X = kern.scores(Qc, Kc)
                    dV += (A * tril).transpose(-1, -2) @ G
                    dX = dA * kern.dscores(X)
                    dQ, dK = dX @ Kc, dX.transpose(-1, -2) @ Qc
                else:  # in-tile weights from the features: A = M(Q)^T (cw M(K))
                    Mkw = Mk * cw
                    dV += ((Mq.transpose(-1, -2) @ Mkw) * tril).transpose(-1, -2) @ G
                    pq.append((Mkw, dA))
                    pk.append((Mq * cw, dA.transpose(-1, -2)))
                    dQ = dK = None
                gq = kern.grad_outer(QT, Mq, pq).transpose(-1, -2)
                gk = kern.grad_outer(KT, Mk, pk).transpose(-1, -2)
                if dQ is not None:
                    gq, gk = gq + dQ, gk + dK
                dq[b0:b1, a:b] = gq.reshape(b1 - b0, b - a, E)
                dk[b0:b1, a:b] = gk.reshape(b1 - b0, b - a, E)
                dv1[b0:b1, a:b] = dV.reshape(b1 - b0, b - a, -1)
            if blocks[idx[0]][0] == 0:
                dU0[b0:b1] = dSuf

        pmap(part, pieces)
        return dq[:, :L], dk[:, :L], dv1[:, :L], dU0, None, None, None


def _absorb(kern, x, y, blocks, query=False):
    """sum over the rows of ``blocks`` of M(x_j) y_j^T: (BH, r, m), unweighted."""
    U = None
    for a, b in blocks:
        xT = x[:, a:b, :].transpose(-1, -2)
        part = kern.m_mul(xT, kern.lower(xT, query), y[:, a:b, :])
        U = part if U is None else U.add_(part)
    assert U is not None, "_absorb needs at least one block"
    return U


def _exclusive_cumsum(torch, dU, U):
    """S_t = U + sum_{t' < t} dU_t' along dim 1 (a loop of adds: faster than torch.cumsum
    along a non-last dimension on CPU, and the same sums in the same order)."""
    S = torch.empty_like(dU)
    S[:, 0] = U
    for t in range(1, dU.shape[1]):
        torch.add(S[:, t - 1], dU[:, t - 1], out=S[:, t])
    return S


def _suffix_cumsum(torch, dS):
    """sum_{t' >= t} dS_t' along dim 1."""
    out = torch.empty_like(dS)
    n = dS.shape[1]
    out[:, n - 1] = dS[:, n - 1]
    for t in range(n - 2, -1, -1):
        torch.add(out[:, t + 1], dS[:, t], out=out[:, t])
    return out


def _intra(kern, Qc, Kc, Mq, Mk):
    if kern.direct:
        return kern.scores(Qc, Kc)[0]
    return Mq.transpose(-1, -2) @ (Mk * kern.cw[:, None])


def linear_attention(q, k, v, kern, offset, chunk=None, tile=64):
    """Normalised linear attention of (BH, L, E) q, (BH, S, E) k, (BH, S, Ev) v in the compute
    dtype; ``offset`` None (no mask) or the causal offset (query i sees keys j <= i + offset)."""
    BH, L, _ = q.shape
    S, Ev = k.shape[-2], v.shape[-1]
    v1 = torch.cat([v, v.new_ones(v.shape[:-1] + (1,))], -1)
    n = max(L, S)
    if offset is not None and offset >= S:
        offset = None  # every query sees every key
    if offset is not None and L + offset <= 0:  # no query sees a key: rows of zeros
        return v.new_zeros(BH, L, Ev) + 0 * (q.sum() + k.sum() + v.sum())
    if offset is None:
        T = block_rows(n, kern.r, BH, Ev + 1, 1, chunk)
        N1 = Readout.apply(q, Absorb.apply(k, v1, kern, T), kern, T)
    else:
        c = max(1, min(tile, chunk or tile, L))
        T = block_rows(L, kern.r, BH, Ev + 1, c, chunk)
        p = max(0, min(S, offset))  # keys every query sees: the initial state
        if p > 0:
            U0 = Absorb.apply(k[:, :p], v1[:, :p], kern, block_rows(p, kern.r, BH, Ev + 1, 1, chunk))
        else:
            U0 = q.new_zeros(BH, kern.r, Ev + 1)
        pad = (0, 0, -offset, L - S + offset)  # aligned row i holds key i + offset (or zeros)
        k_al = torch.nn.functional.pad(k, pad)
        v_al = torch.nn.functional.pad(v1, pad)
        N1 = Causal.apply(q, k_al, v_al, U0, kern, T, c)
    den = N1[..., -1:]
    return N1[..., :-1] / torch.where(den != 0, den, torch.ones_like(den))
