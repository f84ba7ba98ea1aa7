"""The schemes run for real with ``torch.distributed`` (gloo on CPUs, NCCL on GPUs), every byte
each rank sends and receives counted: ``attnio cp run``.

:class:`DistCluster` has the referee's interface (``send``, ``compute``, ``kv_head``), so a
scheme's own ``execute`` drives it unchanged: every rank walks the whole schedule and acts on the
steps that involve it (a send is ``dist.send`` on the source and ``dist.recv`` on the
destination, in the schedule's global order, which cannot deadlock: the earliest unfinished step
always has both its ranks waiting on it).  Each rank holds only its layout's rows at the start
(the others are NaN, so a computation on a row it was not sent would poison the output) and
counts the bytes of every tensor it sends and receives; the counts, in words of the dtype, must
equal the closed form per rank.  At the end the output rows are gathered (not counted: that is
the check, not the schedule) and compared with ``scaled_dot_product_attention`` on the full
inputs.

Run by ``torchrun --standalone --nproc_per_node P -m attnio.parallel.distributed ARGS``
(:func:`launch` builds the command; :func:`main` is the worker).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
from typing import Any

import numpy as np

from ..core.errors import ParameterError
from ..core.workload import Shape

__all__ = ["DistBackwardCluster", "DistCluster", "launch", "main"]


class DistCluster:
    """The rank's share of the referee's interface, on torch tensors (float32 by default)."""

    def __init__(self, shape: Shape, layout: Any, rank: int, data: tuple[Any, Any, Any],
                 dtype: Any = None):
        import torch

        self.torch = torch
        self.dist = torch.distributed
        self.shape, self.layout, self.rank, self.P = shape, layout, rank, layout.P
        dtype = dtype or torch.float32
        nH, nK, Nq, Nkv, d = shape.n_heads, shape.n_kv_heads, shape.Nq, shape.Nkv, shape.d
        Q, K, V = (torch.as_tensor(np.asarray(x), dtype=dtype) for x in data)
        qmask = torch.as_tensor(layout.q_owner == rank)
        kmask = torch.as_tensor(layout.kv_owner == rank)
        nan = float("nan")
        self.q = torch.where(qmask[..., None], Q.reshape(nH, Nq, d), nan)
        self.k = torch.where(kmask[..., None], K.reshape(nK, Nkv, d), nan)
        self.v = torch.where(kmask[..., None], V.reshape(nK, Nkv, d), nan)
        self.o = torch.zeros(nH, Nq, d, dtype=dtype)
        self.lse = torch.full((nH, Nq), -math.inf, dtype=dtype)
        from ..core.reference import mask as reference_mask

        self.visible = torch.as_tensor(~reference_mask(Nq, Nkv, shape.mask, shape.window))
        self.sent_bytes = 0
        self.recv_bytes = 0
        self.scale = 1.0 / math.sqrt(d)

    def kv_head(self, f: Any) -> Any:
        s = self.shape
        return (np.asarray(f) // s.heads) * s.kv_heads + (np.asarray(f) % s.heads) // s.group

    def _rows(self, tensor: str, h: list[int], r: list[int]) -> Any:
        t = self.torch
        hi, ri = t.as_tensor(h)[:, None], t.as_tensor(r)[None, :]
        if tensor in ("Q", "K", "V"):
            src = {"Q": self.q, "K": self.k, "V": self.v}[tensor]
            return src[hi, ri].contiguous()
        if tensor == "part":
            return t.cat([self.o[hi, ri], self.lse[hi, ri][..., None]], dim=-1).contiguous()
        return self.o[hi, ri].contiguous()  # "O": a finished row

    def send(self, src: int, dst: int, tensor: str, heads: Any, rows: Any) -> None:
        h, r = [int(x) for x in heads], [int(x) for x in rows]
        if not h or not r or self.rank not in (src, dst):
            return
        t = self.torch
        if self.rank == src:
            buf = self._rows(tensor, h, r)
            self.dist.send(buf, dst)
            self.sent_bytes += buf.numel() * buf.element_size()
            return
        width = self.shape.d + (1 if tensor == "part" else 0)
        buf = t.empty(len(h), len(r), width, dtype=self.o.dtype)
        self.dist.recv(buf, src)
        self.recv_bytes += buf.numel() * buf.element_size()
        hi, ri = t.as_tensor(h)[:, None], t.as_tensor(r)[None, :]
        if tensor in ("Q", "K", "V"):
            {"Q": self.q, "K": self.k, "V": self.v}[tensor][hi, ri] = buf
        elif tensor == "part":
            self._merge(hi, ri, buf[..., :-1], buf[..., -1])
        else:
            self.o[hi, ri] = buf
            self.lse[hi, ri] = 0.0

    def drop(self, p: int, tensor: str, heads: Any, rows: Any) -> None:
        """Rank p frees rows it holds: they become NaN here (a later use would show in the
        output's error)."""
        h, r = [int(x) for x in heads], [int(x) for x in rows]
        if p != self.rank or not h or not r:
            return
        t = self.torch
        {"Q": self.q, "K": self.k, "V": self.v}[tensor][
            t.as_tensor(h)[:, None], t.as_tensor(r)[None, :]] = float("nan")

    def compute(self, p: int, heads: Any, rows: Any, keys: Any) -> None:
        if p != self.rank:
            return
        t = self.torch
        h, r, c = (t.as_tensor([int(x) for x in v], dtype=t.long) for v in (heads, rows, keys))
        if h.numel() == 0 or r.numel() == 0:
            return
        jh = t.as_tensor(self.kv_head(h.numpy()), dtype=t.long)
        q = self.q[h[:, None], r[None, :]]
        k = self.k[jh[:, None], c[None, :]]
        v = self.v[jh[:, None], c[None, :]]
        vis = self.visible[r[:, None], c[None, :]]
        s = self.scale * (q @ k.transpose(-1, -2))
        s = s.masked_fill(~vis[None], -math.inf)
        m = s.amax(dim=-1, keepdim=True) if c.numel() else t.full(q.shape[:-1] + (1,), -math.inf)
        m0 = t.where(t.isfinite(m), m, t.zeros_like(m))
        e = t.exp(s - m0)
        l_ = e.sum(dim=-1, keepdim=True)
        o = (e @ v) / t.where(l_ > 0, l_, t.ones_like(l_))
        lse = t.where(l_ > 0, m0 + t.log(t.where(l_ > 0, l_, t.ones_like(l_))),
                      t.full_like(l_, -math.inf))[..., 0]
        self._merge(h[:, None], r[None, :], o, lse)

    def _merge(self, hi: Any, ri: Any, o: Any, lse: Any) -> None:
        t = self.torch
        a_o, a_l = self.o[hi, ri], self.lse[hi, ri]
        new = t.logaddexp(a_l, lse)
        w1 = t.where(t.isfinite(a_l), t.exp(a_l - new), t.zeros_like(a_l))
        w2 = t.where(t.isfinite(lse), t.exp(lse - new), t.zeros_like(lse))
        self.o[hi, ri] = a_o * w1[..., None] + o * w2[..., None]
        self.lse[hi, ri] = new


class DistBackwardCluster:
    """The rank's share of the backward referee's interface
    (:class:`~attnio.parallel.backward.BackwardCluster`), on torch tensors.  The row statistics
    (lse and D = rowsum(dO ∘ O)) are those the forward pass leaves on the owner, taken from the
    float64 reference."""

    def __init__(self, shape: Shape, layout: Any, rank: int, data: tuple[Any, ...],
                 dtype: Any = None):
        import torch

        from ..core.reference import attention, logsumexp
        from ..core.reference import mask as reference_mask

        self.torch, self.dist = torch, torch.distributed
        self.shape, self.layout, self.rank, self.P = shape, layout, rank, layout.P
        dtype = dtype or torch.float32
        nH, nK, Nq, Nkv, d = shape.n_heads, shape.n_kv_heads, shape.Nq, shape.Nkv, shape.d
        Q, K, V, dO = (np.asarray(x, dtype=np.float64) for x in data)
        O = attention(Q, K, V, causal=shape.mask, window=shape.window)
        lse = logsumexp(Q, K, causal=shape.mask, window=shape.window).reshape(nH, Nq)
        D = (dO * O).sum(-1).reshape(nH, Nq)
        qm = torch.as_tensor(layout.q_owner == rank)[..., None]
        km = torch.as_tensor(layout.kv_owner == rank)[..., None]
        nan = float("nan")

        def t(x: Any, m: Any, shape_: tuple[int, ...]) -> Any:
            return torch.where(m, torch.as_tensor(x, dtype=dtype).reshape(shape_), nan)

        self.rows = {"Q": t(Q, qm, (nH, Nq, d)), "dO": t(dO, qm, (nH, Nq, d)),
                     "stats": t(np.stack([lse, D], -1), qm, (nH, Nq, 2)),
                     "K": t(K, km, (nK, Nkv, d)), "V": t(V, km, (nK, Nkv, d))}
        self.grads = {"dQ": torch.zeros(nH, Nq, d, dtype=dtype),
                      "dK": torch.zeros(nK, Nkv, d, dtype=dtype),
                      "dV": torch.zeros(nK, Nkv, d, dtype=dtype)}
        self.visible = torch.as_tensor(~reference_mask(Nq, Nkv, shape.mask, shape.window))
        self.sent_bytes = self.recv_bytes = 0
        self.scale = 1.0 / math.sqrt(d)

    def kv_head(self, f: Any) -> Any:
        s = self.shape
        return (np.asarray(f) // s.heads) * s.kv_heads + (np.asarray(f) % s.heads) // s.group

    def send(self, src: int, dst: int, tensor: str, heads: Any, rows: Any) -> None:
        h, r = [int(x) for x in heads], [int(x) for x in rows]
        if not h or not r or self.rank not in (src, dst):
            return
        t = self.torch
        hi, ri = t.as_tensor(h)[:, None], t.as_tensor(r)[None, :]
        store = self.rows.get(tensor)
        if store is None:
            store = self.grads[tensor]
        if self.rank == src:
            buf = store[hi, ri].contiguous()
            self.dist.send(buf, dst)
            self.sent_bytes += buf.numel() * buf.element_size()
            if tensor in self.grads:  # a partial gradient moves
                store[hi, ri] = 0.0
            return
        buf = t.empty((len(h), len(r)) + tuple(store.shape[2:]), dtype=store.dtype)
        self.dist.recv(buf, src)
        self.recv_bytes += buf.numel() * buf.element_size()
        if tensor in self.grads:
            store[hi, ri] += buf
        else:
            store[hi, ri] = buf

    def drop(self, p: int, tensor: str, heads: Any, rows: Any) -> None:
        """Rank p frees input rows it holds (NaN from then on)."""
        h, r = [int(x) for x in heads], [int(x) for x in rows]
        if p != self.rank or not h or not r:
            return
        t = self.torch
        self.rows[tensor][t.as_tensor(h)[:, None], t.as_tensor(r)[None, :]] = float("nan")

    def compute(self, p: int, heads: Any, rows: Any, keys: Any) -> None:
        if p != self.rank:
            return
        t = self.torch
        h, r, c = (t.as_tensor([int(x) for x in v], dtype=t.long) for v in (heads, rows, keys))
        if h.numel() == 0 or r.numel() == 0 or c.numel() == 0:
            return
        jh = t.as_tensor(self.kv_head(h.numpy()), dtype=t.long)
        H, R, C, J = h[:, None], r[None, :], c[None, :], jh[:, None]
        q, do, st = self.rows["Q"][H, R], self.rows["dO"][H, R], self.rows["stats"][H, R]
        k, v = self.rows["K"][J, C], self.rows["V"][J, C]
        vis = self.visible[r[:, None], c[None, :]][None]
        s = self.scale * (q @ k.transpose(-1, -2))
        pr = t.where(vis, t.exp(t.where(vis, s, t.zeros_like(s)) - st[..., 0:1]),
                     t.zeros_like(s))
        ds = pr * (do @ v.transpose(-1, -2) - st[..., 1:2])
        self.grads["dQ"][H, R] += self.scale * ds @ k
        for a in range(h.numel()):
            j = int(jh[a])
            self.grads["dK"][j, c] += self.scale * ds[a].T @ q[a]
            self.grads["dV"][j, c] += pr[a].T @ do[a]


def _reference_grads(shape: Shape, data: tuple[Any, ...]) -> tuple[Any, Any, Any]:
    """dQ, dK, dV of sum(SDPA(Q, K, V) ∘ dO) by autograd (float32), the mask made explicit."""
    import torch

    from ..core.reference import mask as reference_mask

    Q, K, V = (torch.tensor(np.asarray(x), dtype=torch.float32, requires_grad=True)
               for x in data[:3])
    dO = torch.as_tensor(np.asarray(data[3]), dtype=torch.float32)
    g = shape.group
    allowed = torch.as_tensor(~reference_mask(shape.Nq, shape.Nkv, shape.mask, shape.window))
    out = torch.nn.functional.scaled_dot_product_attention(
        Q, K.repeat_interleave(g, dim=1), V.repeat_interleave(g, dim=1), attn_mask=allowed)
    out = torch.where(allowed.any(dim=-1)[None, None, :, None], out, torch.zeros_like(out))
    (out * dO).sum().backward()
    return Q.grad, K.grad, V.grad


def _reference(shape: Shape, data: tuple[Any, Any, Any]) -> Any:
    """scaled_dot_product_attention on the full inputs (float32), the mask made explicit."""
    import torch

    from ..core.reference import mask as reference_mask

    Q, K, V = (torch.as_tensor(np.asarray(x), dtype=torch.float32) for x in data)
    g = shape.group
    K, V = K.repeat_interleave(g, dim=1), V.repeat_interleave(g, dim=1)
    allowed = torch.as_tensor(~reference_mask(shape.Nq, shape.Nkv, shape.mask, shape.window))
    out = torch.nn.functional.scaled_dot_product_attention(Q, K, V, attn_mask=allowed)
    return torch.where(allowed.any(dim=-1)[None, None, :, None], out, torch.zeros_like(out))


def _inputs(shape: Shape, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    Q = rng.standard_normal((shape.batch, shape.heads, shape.Nq, shape.d))
    K = rng.standard_normal((shape.batch, shape.n_kv_heads // shape.batch, shape.Nkv, shape.d))
    return Q, K, rng.standard_normal(K.shape)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="attnio.parallel.distributed")
    p.add_argument("--shape", required=True, help="the Shape as JSON")
    p.add_argument("--scheme", required=True)
    p.add_argument("--params", default="null")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", required=True)
    p.add_argument("--backward", action="store_true")
    return p


def main(argv: list[str] | None = None) -> int:
    """The worker, one per rank (under torchrun)."""
    import torch
    import torch.distributed as dist

    from . import get

    a = _parser().parse_args(argv)
    shape = Shape.coerce(json.loads(a.shape))
    params = json.loads(a.params)
    dist.init_process_group("nccl" if torch.cuda.is_available() and
                            os.environ.get("ATTNIO_CP_BACKEND") == "nccl" else "gloo")
    rank, P = dist.get_rank(), dist.get_world_size()
    mod = get(a.scheme)
    data = _inputs(shape, a.seed)
    cl = DistCluster(shape, mod.layout(shape, P, params), rank, data)
    mod.execute(cl, params)
    counts = torch.tensor([cl.sent_bytes, cl.recv_bytes], dtype=torch.int64)
    gathered = [torch.zeros(2, dtype=torch.int64) for _ in range(P)]
    dist.all_gather(gathered, counts)
    # the owned output rows, gathered for the check (not counted)
    own = torch.as_tensor(cl.layout.q_owner == rank)
    mine = torch.where(own[..., None], cl.o, torch.zeros_like(cl.o))
    dist.all_reduce(mine)
    res: dict[str, Any] = {}
    if rank == 0:
        out = mine.reshape(shape.batch, shape.heads, shape.Nq, shape.d)
        err = float((out - _reference(shape, data)).abs().max())
        c = mod.cost(shape, P, params, work=False)
        size = cl.o.element_size()
        res = {"scheme": mod.NAME, "params": c.params, "P": P,
               "measured_words": [int(s + r) // size for s, r in (g.tolist() for g in gathered)],
               "measured_sent": [int(g[0]) // size for g in gathered],
               "predicted_words": list(c.words), "predicted_sent": list(c.sent),
               "max_abs_err": err, "dtype": str(cl.o.dtype).replace("torch.", ""),
               "backend": dist.get_backend()}
    if a.backward:
        from .backward import cost_backward, run_backward

        dO = np.random.default_rng(a.seed + 1).standard_normal(
            (shape.batch, shape.heads, shape.Nq, shape.d))
        bl = DistBackwardCluster(shape, cl.layout, rank, (*data, dO))
        run_backward(bl, mod.NAME, params)
        counts = torch.tensor([bl.sent_bytes, bl.recv_bytes], dtype=torch.int64)
        gb = [torch.zeros(2, dtype=torch.int64) for _ in range(P)]
        dist.all_gather(gb, counts)
        qo = torch.as_tensor(cl.layout.q_owner == rank)[..., None]
        ko = torch.as_tensor(cl.layout.kv_owner == rank)[..., None]
        got = [torch.where(m, bl.grads[n], torch.zeros_like(bl.grads[n]))
               for n, m in (("dQ", qo), ("dK", ko), ("dV", ko))]
        for x in got:
            dist.all_reduce(x)
        if rank == 0:
            want = _reference_grads(shape, (*data, dO))
            res["max_abs_err_grad"] = max(float((x.reshape(w.shape) - w).abs().max())
                                          for x, w in zip(got, want))
            size = bl.grads["dQ"].element_size()
            res["measured_words_backward"] = [int(g[0] + g[1]) // size for g in gb]
            res["predicted_words_backward"] = list(
                cost_backward(mod.NAME, shape, P, params).words)
    if rank == 0:
        with open(a.out, "w") as f:
            json.dump(res, f)
    dist.destroy_process_group()
    return 0


def launch(shape: Shape, P: int, scheme: str, params: dict[str, Any] | None = None, *,
           seed: int = 0, timeout: float = 600.0, backward: bool = False) -> dict[str, Any]:
    """Run ``scheme`` on P local processes under torchrun (gloo); the rank 0 report.  With
    ``backward``, its backward pass too (the schemes of
    :data:`attnio.parallel.backward.SCHEMES`): words per rank and gradients against autograd
    through SDPA.  ``params`` None: the scheme's parameters of least words per device
    (:func:`~attnio.parallel.planner.plan`)."""
    from . import get
    from .base import check_P
    from .planner import plan

    P = check_P(P)
    mod = get(scheme)
    if params is None:
        params = plan(shape, P, scheme).params
    params = mod.mapspace(shape, P).check(params)
    if backward:
        from .backward import SCHEMES as WITH_BACKWARD

        if mod.NAME not in WITH_BACKWARD:
            raise ParameterError(f"scheme {mod.NAME!r} has no backward schedule here; those "
                                 f"that do: {', '.join(WITH_BACKWARD)}", param="scheme")
    if shape.n_heads * shape.Nq * shape.Nkv > 1 << 24:
        raise ParameterError("cp run is a check on small shapes: heads x Nq x Nkv must be at "
                             "most 2**24", param="N")
    torchrun = shutil.which("torchrun") or shutil.which("torchrun", path=os.path.dirname(
        sys.executable))
    if torchrun is None:
        raise ParameterError("torchrun is not installed (pip install torch); cp run launches "
                             "the ranks with it")
    spec = {"Nq": shape.Nq, "Nkv": shape.Nkv, "d": shape.d, "batch": shape.batch,
            "heads": shape.heads, "kv_heads": shape.kv_heads, "causal": shape.causal,
            "causal_align": shape.causal_align, "window": shape.window}
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "result.json")
        cmd = [torchrun, "--standalone", "--nnodes", "1", "--nproc_per_node", str(P),
               "-m", "attnio.parallel.distributed", "--shape", json.dumps(spec),
               "--scheme", mod.NAME, "--params", json.dumps(params), "--seed", str(seed),
               "--out", out] + (["--backward"] if backward else [])
        env = dict(os.environ, OMP_NUM_THREADS="1")
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
        if proc.returncode != 0 or not os.path.exists(out):
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
            raise ParameterError(f"torchrun failed (exit {proc.returncode}): {tail[0]}")
        with open(out) as f:
            res: dict[str, Any] = json.load(f)
    return res


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
