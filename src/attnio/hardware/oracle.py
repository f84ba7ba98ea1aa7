"""The tile oracle: a search over feasible kernel configs that calls the model.

The space (Timeloop's mapper, for one kernel family): tiles that are multiples of the MMA shape
(``fa3``: Br in {64, 128, 192}, one consumer warp group per 64 rows; ``fa2``: Br a multiple of 16
rows per warp, 1-8 warps; Bc a multiple of 16 up to 256), 1-3 K/V stages, placements (P in
registers or shared memory; FA3's overlap; FA2's Q in registers), GQA packing, and KV splits.

The search is exact branch and bound over the model:

1. **feasibility** by closed form (:mod:`.feasibility`) removes configs over a limit;
2. a **lower bound** on every feasible config's time: the roofline of every resource but HBM,
   per wave, exactly (the amounts are linear in per-CTA features that configs of one tile
   geometry share), and HBM at least the compulsory bytes;
3. configs in order of their bound are **finished** (the L2 replay, shared by every config of
   one geometry and wave size) until the next bound exceeds the ``top``-th best time found, or
   ``max_replays`` replays were spent (then the result says so: ``exhausted = False``).

Splits are searched where they can matter: up to four waves of CTAs, and the splits that make one
KV head's share fit the L2.  flash-attn's ``num_splits`` heuristic is not used: the oracle's
split count comes from the model alone (:func:`best_splits`); :mod:`.kernels` transcribes
flash-attn's only to score its choice next to the oracle's (docs/hardware.md).
"""

from __future__ import annotations

import dataclasses
import functools
import heapq
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..core.checks import check_choice, check_int
from ..core.errors import ParameterError
from ..core.workload import Shape, cdiv
from . import devices as _devices
from . import geometry
from .devices import Device
from .feasibility import Feasibility, check
from .kernels import KernelConfig, head_dim_rounded, named_config
from .l2 import replay
from .model import Score, _scored, resolve, waves_of
from .roofline import RESOURCES, Timing, phase_times
from .traffic import Traffic, build, bwd_smem_step, compulsory_bytes, compulsory_rw, fwd_smem_step

__all__ = ["SPLITS", "TuneReport", "best_splits", "candidates", "explain", "tune",
           "tune_report"]

SPLITS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128)
#: Relative slack of the search's stopping rule: configs within it of the top-th best are
#: finished too, so ties (:func:`_order_key`) are broken among all of them.
TIE = 0.005
_FAMILIES = ("fa3", "fa2", "splitkv", "fa2_bwd")


def _split_options(dev: Device, shape: Shape, algorithm: str, Br: int, Bc: int, G: int,
                   e: int) -> list[int]:
    if algorithm not in ("fa3", "fa2", "splitkv"):
        return [1]
    rows = shape.Nq * G
    units = shape.batch * (shape.kv_heads if G > 1 else shape.heads)
    c1 = units * cdiv(rows, Br)
    nblk = cdiv(shape.Nkv, Bc)
    out = {1} if algorithm != "splitkv" else set()
    for s in SPLITS[1:]:
        if s <= nblk and s * c1 <= 4 * dev.sm_count * 2:
            out.add(s)
    kv = shape.Nkv * 2 * shape.d * e
    fit = cdiv(kv, dev.l2_bytes)
    for s in (fit, 2 * fit):
        if 1 < s <= min(128, nblk):
            out.add(s)
    return sorted(out)


def candidates(device: str | Device, shape: Any, algorithm: str = "fa3",
               dtype: str = "bf16") -> list[KernelConfig]:
    """Every config of ``algorithm``'s space for ``shape`` (before feasibility)."""
    dev = _devices.get(device)
    shape = Shape.coerce(shape)
    check_choice("algorithm", algorithm, _FAMILIES)
    dt = _devices.dtype_name(dtype)
    e = _devices.dtype_bytes(dt)
    head_dim_rounded(algorithm, shape.d)
    G = shape.group
    packs = (False, True) if G > 1 and algorithm != "fa2_bwd" else (False,)
    bcs = range(16, 257, 16)
    out = []
    if algorithm == "fa3":
        places = [("regs", True), ("regs", False)]
        if e == 2:
            places += [("smem", True), ("smem", False)]
        for Br in (64, 128, 192):
            for Bc in bcs:
                for pack in packs:
                    if pack and Br < G:
                        continue
                    for sp in _split_options(dev, shape, "fa3", Br, Bc, G if pack else 1, e):
                        if sp > 1 and pack is False and G > 1 and shape.causal:
                            continue
                        for st in (1, 2, 3):
                            for p, ov in places:
                                out.append(KernelConfig("fa3", Br, Bc, 4 * (Br // 64 + 1), st,
                                                        "smem", p, "regs", dt, pack, sp, ov))
        return out
    if algorithm == "fa2_bwd":
        for w in (4, 8):
            for Br in range(16, 129, 16):
                for Bc in range(16, 257, 16):
                    for st in (1, 2):
                        out.append(KernelConfig("fa2_bwd", Br, Bc, w, st, dtype=dt))
        return out
    if e != 2:
        raise ParameterError(f"dtype={dtype}: {algorithm} kernels are fp16/bf16 only",
                             param="dtype")
    for w in (1, 2, 4, 8):
        for Br in range(16 * w, 257, 16 * w):
            for Bc in bcs:
                for pack in packs:
                    if pack and Br < G:
                        continue
                    for sp in _split_options(dev, shape, algorithm, Br, Bc, G if pack else 1,
                                             e):
                        alg = "splitkv" if sp > 1 else "fa2"
                        qs = ("smem", "regs") if alg == "fa2" else ("smem",)
                        for st in (1, 2, 3):
                            for q in qs:
                                out.append(KernelConfig(alg, Br, Bc, w, st, q, "regs", "regs",
                                                        dt, pack, sp))
    return out


def _geometry(cfg: KernelConfig) -> tuple:
    """What the tile streams depend on: configs equal here share traffic and replays."""
    return (cfg.algorithm, cfg.Br, cfg.Bc, cfg.pack_gqa, cfg.splits, cfg.dtype)


@dataclass
class _Cand:
    cfg: KernelConfig
    feas: Feasibility
    lb: float
    geo: tuple
    P: list[int]


@functools.lru_cache(maxsize=4096)
def _steps(shape: Shape, algorithm: str, Br: int, Bc: int, G: int, splits: int
           ) -> tuple[int, int, int]:
    """(CTAs, inner steps, rows of split partials) of the main/split phase, from the mask
    geometry alone."""
    if algorithm == "fa2_bwd":
        ks, ke = geometry.block_counts(shape.Nkv, Bc)
        lo, hi = geometry.q_ranges(shape, ks, ke)
        cnt, _, _ = geometry.meeting(lo, hi, Br, shape.Nq)
        units = shape.n_kv_heads
        return units * len(ks), units * shape.group * int(cnt.sum()), 0
    units = shape.batch * (shape.kv_heads if G > 1 else shape.heads)
    if splits == 1:
        Brh = max(1, Br // G)
        st, sp = geometry.block_counts(shape.Nq, Brh)
        lo, hi = geometry.kv_ranges(shape, st, sp)
        cnt, _, _ = geometry.meeting(lo, hi, Bc, shape.Nkv)
        return units * len(st), units * int(cnt.sum()), 0
    st, sp = geometry.block_counts(shape.Nq * G, Br)
    lo, hi = geometry.kv_ranges(shape, st // G, (sp + G - 1) // G)
    L = cdiv(shape.Nkv, splits)
    p0 = np.arange(cdiv(shape.Nkv, L), dtype=np.int64)[None, :] * L
    p1 = np.minimum(shape.Nkv, p0 + L)
    slo = np.maximum(lo[:, None], p0) - p0
    shi = np.minimum(hi[:, None], p1) - p0
    cnt, _, _ = geometry.meeting(slo, shi, Bc, p1 - p0)
    seen = cnt > 0
    ctas, steps = int(seen.sum()), int(cnt.sum())
    rows = int(((sp - st)[:, None] * seen).sum())
    return units * ctas, units * steps, units * rows


def _cheap_bound(dev: Device, shape: Shape, cfg: KernelConfig, f: Feasibility,
                 compulsory: int) -> float:
    """A closed-form lower bound without building the grid: each SM-level resource's total
    spread evenly over the SMs (no wave quantisation); HBM at the compulsory bytes plus the
    split partials (every stored tile is written back)."""
    d = head_dim_rounded(cfg.algorithm, shape.d)
    G = shape.group if cfg.pack_gqa else 1
    ctas, steps, prow = _steps(shape, cfg.algorithm, cfg.Br, cfg.Bc, G, cfg.splits)
    compulsory += prow * (4 * shape.d + 4)
    S = dev.sm_count
    frac = 1.0 if cfg.algorithm == "fa3" else min(1.0, cfg.warps * f.ctas_per_sm / 4.0)
    if cfg.forward:
        flops = steps * 4.0 * cfg.Br * cfg.Bc * d
        exps = steps * (cfg.Br * cfg.Bc + cfg.Br)
        smem = steps * fwd_smem_step(cfg, d)
    else:
        flops = steps * 10.0 * cfg.Br * cfg.Bc * d
        exps = steps * cfg.Br * cfg.Bc
        smem = steps * bwd_smem_step(cfg, d)
    return max(flops / (S * dev.flops(cfg.dtype) / S * frac), exps / (S * dev.sfu_rate_per_sm),
               smem / (S * dev.smem_bw_per_sm), compulsory / dev.hbm_bw)


@dataclass
class TuneReport:
    """What :func:`tune_report` found: the best configs (scored), the named kernel's config
    scored and ranked among the feasible ones, and why the two differ."""

    device: str
    shape: Shape
    algorithm: str
    best: list[Score]
    named: Score | None
    named_rank: int | None          # 1 = best; ties share a rank
    feasible: int
    searched: int
    replays: int
    exhausted: bool                 # False: stopped at max_replays (ranks past it by bound)
    why: str | None
    seconds: float
    bounds: list[tuple[float, KernelConfig]] = field(default_factory=list, repr=False)

    def to_dict(self) -> dict[str, Any]:
        return {"device": self.device, "workload": self.shape.describe(),
                "algorithm": self.algorithm, "best": [s.to_dict() for s in self.best],
                "named": None if self.named is None else self.named.to_dict(),
                "named_rank": self.named_rank, "feasible": self.feasible,
                "searched": self.searched, "replays": self.replays,
                "exhausted": self.exhausted, "why": self.why, "seconds": self.seconds}


class _Search:
    def __init__(self, dev: Device, shape: Shape, algorithm: str, dtype: str,
                 max_replays: int, where: Callable[[KernelConfig], bool] | None = None):
        self.where = where
        self.dev, self.shape = dev, shape
        self.algorithm, self.dtype = algorithm, dtype
        self.max_replays = max_replays
        self.traffic: dict[tuple, Traffic] = {}
        self.replays: dict[tuple, Any] = {}
        self.final: dict[KernelConfig, Score] = {}
        self.cands: list[_Cand] = []
        self.bounds: dict[KernelConfig, _Cand] = {}
        self.searched = 0
        self.feasible = 0

    def _traffic(self, cfg: KernelConfig, f: Feasibility) -> Traffic:
        g = _geometry(cfg)
        if g not in self.traffic:
            self.traffic[g] = build(cfg, self.shape, self.dev, f.ctas_per_sm)
        return self.traffic[g]

    def bound(self, cfg: KernelConfig, f: Feasibility) -> _Cand:
        tr = self._traffic(cfg, f)
        tr = dataclasses.replace(tr, config=cfg)
        wv = waves_of(tr, self.dev, f.ctas_per_sm)
        t = 0.0
        for ph, P in zip(tr.phases, wv):
            pt = phase_times(ph, self.dev, cfg, tr.d_pad, P, None)
            if len(pt):
                t += float(pt.max(axis=1).sum())
        comp_r, _ = compulsory_rw(cfg, self.shape)
        stores = sum(int(ph.store_bytes.sum()) for ph in tr.phases)
        lb = max(t, (comp_r + stores) / self.dev.hbm_bw)
        return _Cand(cfg, f, lb, _geometry(cfg), wv)

    def run(self) -> None:
        """Feasibility and the closed-form bound of every config; the exact bound is computed
        lazily, best first (:meth:`pop`)."""
        cfgs = candidates(self.dev, self.shape, self.algorithm, self.dtype)
        if self.where is not None:
            cfgs = [c for c in cfgs if self.where(c)]
        self.searched = len(cfgs)
        seen: dict[tuple, Feasibility] = {}
        comp: dict[tuple, int] = {}
        self.heap: list = []
        for i, cfg in enumerate(cfgs):
            base = (cfg.algorithm, cfg.Br, cfg.Bc, cfg.warps, cfg.stages, cfg.q, cfg.p, cfg.o,
                    cfg.overlap)
            if base not in seen:
                seen[base] = check(self.dev, cfg, self.shape)
            f = seen[base]
            if not f.feasible:
                continue
            ck = (cfg.algorithm, cfg.splits)
            if ck not in comp:
                comp[ck] = compulsory_bytes(cfg, self.shape)
            lb = _cheap_bound(self.dev, self.shape, cfg, f, comp[ck])
            heapq.heappush(self.heap, (lb, 0, i, cfg, f))
            self.feasible += 1

    def pop(self) -> _Cand | None:
        """The config of least bound whose bound is exact (tightening cheap bounds on the way)."""
        while self.heap:
            lb, exact, i, cfg, f = heapq.heappop(self.heap)
            if exact:
                c = self.bounds[cfg]
                self.cands.append(c)
                return c
            c = self.bound(cfg, f)
            self.bounds[cfg] = c
            heapq.heappush(self.heap, (max(c.lb, lb), 1, i, cfg, f))
        return None

    def peek(self) -> float:
        return self.heap[0][0] if self.heap else math.inf

    def finish(self, c: _Cand) -> Score:
        if c.cfg in self.final:
            return self.final[c.cfg]
        key = (c.geo, tuple(c.P))
        tr = dataclasses.replace(self.traffic[c.geo], config=c.cfg)
        if key not in self.replays:
            self.replays[key] = replay(tr, self.dev.l2_bytes, c.P,
                                       sector=self.dev.l2_sector_bytes)
        rep = self.replays[key]
        from .roofline import roofline

        t: Timing = roofline(tr, self.dev, c.P, rep)
        s = _scored(self.dev, self.shape, c.cfg, c.feas, tr, rep, t)
        self.final[c.cfg] = s
        return s

    def best(self, top: int) -> tuple[list[Score], bool]:
        done: list[Score] = []
        exhausted = True
        while True:
            if len(done) >= top and \
                    self.peek() > sorted(s.time_s for s in done)[top - 1] * (1 + TIE):
                break
            c = self.pop()
            if c is None:
                break
            if (c.geo, tuple(c.P)) not in self.replays and len(self.replays) >= self.max_replays:
                exhausted = False
                break
            done.append(self.finish(c))
        return sorted(done, key=_order_key)[:top], exhausted

    def rank(self, t: float, rel: float = 1e-9) -> tuple[int, bool]:
        """1 + the feasible configs faster than ``t·(1 - rel)`` (replaying those whose bound is
        below it while replays last; past that they count as faster: ``exact`` False)."""
        better, exact = 0, True
        tol = t * (1 - rel)
        for c in list(self.cands):
            if c.lb < tol and self._faster(c, tol):
                better += 1
        while self.peek() < tol:
            if len(self.replays) >= self.max_replays:   # out of replays: count by the bound
                n = sum(1 for entry in self.heap if entry[0] < tol)
                return better + n + 1, n == 0
            c = self.pop()
            if c is None:
                break
            if c.lb < tol:
                better += self._faster(c, tol)
        return better + 1, exact

    def _faster(self, c: _Cand, tol: float) -> bool:
        return self.finish(c).time_s < tol


def _order_key(s: Score) -> tuple:
    """Least time first (equal to 3 significant figures: a tie, as the model is no finer);
    among ties fewer bytes requested from the L2 (GQA packing), then (the roofline does not see
    latency, so stages and FA3's overlap often tie) more stages, P in registers and overlap
    first, as real kernels choose."""
    c = s.config
    return (float(f"{s.time_s:.3g}"), s.l2_bytes, -c.stages, c.p != "regs", not c.overlap,
            -c.Bc)


def explain(named: Score, best: Score) -> str:
    """Why the named kernel's config is slower (or not) than the oracle's, resource by
    resource: the resource whose time differs most, and the limits that shape the choice."""
    if not named.feasible:
        return f"{named.config.short()} is infeasible: {named.why}"
    if named.config == best.config:
        return f"the oracle picks {named.config.label or 'the named kernel'}'s config itself"
    dt = named.time_s - best.time_s
    rel = dt / best.time_s if best.time_s else 0.0
    diffs = {r: named.alone.get(r, 0.0) - best.alone.get(r, 0.0) for r in RESOURCES}
    r = max(diffs, key=lambda k: diffs[k])
    lines = [f"{named.config.short()} ({named.config.label}) is predicted "
             f"{named.time_s * 1e6:.1f} us, {rel:+.1%} against the oracle's "
             f"{best.config.short()} ({best.time_s * 1e6:.1f} us)."]
    if abs(rel) < 0.005:
        lines.append("Within 0.5%: the model sees no material difference.")
    words = {"hbm": "HBM traffic", "l2": "L2 bandwidth", "sm_port": "each SM's L2 port",
             "smem": "shared-memory bandwidth", "tensor": "tensor-core time", "sfu":
             "exponentials (SFU)"}
    lines.append(
        f"Largest difference: {words[r]}, {named.alone[r] * 1e6:.1f} us vs "
        f"{best.alone[r] * 1e6:.1f} us alone (named kernel bound by {named.bound_by}, oracle "
        f"by {best.bound_by}; waves {named.waves} vs {best.waves}).")
    if r == "tensor" and named.flops and best.flops and named.flops != best.flops:
        lines.append(f"Executed tensor FLOPs differ ({named.flops:.3g} vs {best.flops:.3g}): "
                     "tile padding at the sequence end and on the causal diagonal.")
    if r == "hbm":
        lines.append(f"HBM bytes {named.hbm_bytes:,} vs {best.hbm_bytes:,} (compulsory "
                     f"{best.compulsory_bytes:,}).")
    lines.append(f"Limits: named {named.smem_bytes:,}/{named.smem_limit_bytes:,} B shared "
                 f"memory, {named.regs_per_thread}/{named.regs_limit} registers; oracle "
                 f"{best.smem_bytes:,}/{best.smem_limit_bytes:,} B, "
                 f"{best.regs_per_thread}/{best.regs_limit}.")
    return " ".join(lines)


def _default_algorithm(dev: Device, shape: Shape) -> str:
    return "fa3" if dev.wgmma else "fa2"


def tune_report(device: str | Device, workload: Any, *, algorithm: str | None = None,
                dtype: str = "bf16", top: int = 5, kernel: str | None = "auto",
                max_replays: int = 12,
                where: Callable[[KernelConfig], bool] | None = None) -> TuneReport:
    """Search ``algorithm``'s configs (default: ``fa3`` on Hopper, else ``fa2`` with its
    split-KV kernel) for ``workload`` on ``device``; score the named kernel (``kernel``: a name
    of :data:`~.kernels.KERNELS`, ``"auto"`` = fa3 on Hopper else fa2, None = none) and rank it.
    ``where`` restricts the space (``lambda c: c.splits == 1``: the best unsplit config).
    """
    t0 = time.perf_counter()
    dev = _devices.get(device).require_model()
    shape = Shape.coerce(workload)
    top = check_int("top", top, minimum=1)
    max_replays = check_int("max_replays", max_replays, minimum=1)
    alg = algorithm or _default_algorithm(dev, shape)
    check_choice("algorithm", alg, _FAMILIES)
    dt = _devices.dtype_name(dtype)
    s = _Search(dev, shape, alg, dt, max_replays, where)
    s.run()
    if not s.heap:
        raise ParameterError(f"no feasible {alg} config for {shape.describe()} on {dev.name}",
                             param="algorithm")
    best, exhausted = s.best(top)
    named = rank = why = None
    if kernel == "auto":
        kernel = "fa3" if dev.wgmma and alg == "fa3" else ("fa2" if alg in ("fa2", "splitkv")
                                                          else None)
    if kernel is not None and alg != "fa2_bwd":
        _, _, ncfg = resolve(dev, shape, named_config(kernel, dev, shape, dt))
        f = check(dev, ncfg, shape)
        if f.feasible:
            c = s.bounds.get(ncfg) or s.bound(ncfg, f)
            named = s.finish(c)
            rank, exact = s.rank(named.time_s)
            exhausted = exhausted and exact
        else:
            from .model import _infeasible
            from .traffic import compulsory_bytes

            named = _infeasible(dev, shape, ncfg, f, compulsory_bytes(ncfg, shape))
        why = explain(named, best[0])
    return TuneReport(dev.name, shape, alg, best, named, rank, s.feasible, s.searched,
                      len(s.replays), exhausted, why, time.perf_counter() - t0,
                      [(c.lb, c.cfg) for c in s.cands])


def tune(device: str | Device, workload: Any, *, algorithm: str | None = None,
         dtype: str = "bf16", top: int = 5, max_replays: int = 12,
         where: Callable[[KernelConfig], bool] | None = None) -> list[Score]:
    """The ``top`` configs of least predicted time, best first (see :func:`tune_report`)."""
    return tune_report(device, workload, algorithm=algorithm, dtype=dtype, top=top,
                       kernel=None, max_replays=max_replays, where=where).best


def best_splits(device: str | Device, workload: Any, *, algorithm: str | None = None,
                dtype: str = "bf16") -> int:
    """The KV split count of the oracle's best config: flash-attn's ``num_splits``
    heuristic re-derived from the model."""
    return tune(device, workload, algorithm=algorithm, dtype=dtype, top=1)[0].config.splits



