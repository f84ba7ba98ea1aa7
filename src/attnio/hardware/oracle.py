"""The tile oracle: a search over feasible kernel configs on the calibrated time model.

The space (Timeloop's mapper, for one kernel family): tiles that are multiples of the MMA shape
(``fa3``: Br in {64, 128, 192}, one consumer warp group per 64 rows; ``fa2``: Br a multiple of 16
rows per warp, 1-8 warps; Bc a multiple of 16 up to 256), K/V stages (1-3; ``fa3``: the 2
flash-attn builds, :data:`FA3_FWD_STAGES`), placements (P in
registers or shared memory; FA3's overlap; FA2's Q in registers), GQA packing, and KV splits.
Configs that :func:`~.traffic.build` would refuse are not proposed.

The search prunes with bounds before any replay and replays only the finalists:

1. **feasibility** by closed form (:mod:`.feasibility`) removes configs over a limit;
2. a closed-form **cheap bound** (:func:`_cheap_bound`: each unit's total over every SM at the
   calibrated rates, the per-CTA costs, HBM at the compulsory bytes) orders them;
3. the **lower bound** (the grid built, greedy dispatch, HBM at the bytes any replay must read,
   every load an L2 hit) and the **upper bound** (HBM at :func:`~.l2.hbm_bound`, every load a
   miss) are computed lazily, best first; where they meet the time is known without a replay;
4. the rest are **finished** (the L2 replay) until the next lower bound is above the ``top``-th
   best time by more than the tie tolerance, or ``max_replays`` replays were spent (then the
   result says so: ``exhausted = False``).

Configs within :data:`.ranking.TIE` (1%) of each other share a rank: the model is no finer.  Splits are
searched where they can matter (up to four waves of CTAs, and the splits that make one KV
head's share fit the L2); flash-attn's ``num_splits`` heuristic is not used here: :mod:`.kernels`
transcribes it only to score flash-attn's choice next to the oracle's (docs/hardware.md).
"""

from __future__ import annotations

import dataclasses
import functools
import heapq
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
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
from .l2 import Replay, hbm_bound, read_floor, replay
from .model import LIGHT_CTAS_PER_SM, Score, _scored, check_size, resolve, waves_of
from .ranking import TIE, TuneReport, explain, need, order_key, preference, time_key, time_of
from .timing import (
    STREAM_HBM_EFF,
    Params,
    Timing,
    evaluate,
    kv_multicast,
    load_params,
    prepare,
    softmax_hiders,
)
from .traffic import (
    Traffic,
    build,
    bwd_smem_step,
    compulsory_rw,
    features,
    fwd_smem_step,
    work_coefficients,
)

__all__ = ["SPLITS", "Bounds", "TuneSearch", "best_splits", "bounds", "buildable", "candidates",
           "tune", "tune_report"]


SPLITS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128)
_FAMILIES = ("fa3", "fa2", "splitkv", "fa2_bwd", "fa3_bwd")


def _split_options(dev: Device, shape: Shape, algorithm: str, Br: int, Bc: int, G: int,
                   e: int) -> list[int]:
    if algorithm not in ("fa3", "fa2", "splitkv"):
        return [1]
    assert dev.sm_count is not None and dev.l2_bytes is not None  # require_model()
    rows = shape.Nq * G
    units = shape.n_kv_heads if G > 1 else shape.n_heads
    c1 = units * cdiv(rows, Br)
    nblk = cdiv(shape.Nkv, Bc)
    out = {1} if algorithm != "splitkv" else set()
    for s in SPLITS[1:]:
        if s <= nblk and s * c1 <= 4 * dev.sm_count * 2:
            out.add(s)
    kv = shape.Nkv * 2 * shape.d * e
    fit = cdiv(kv, dev.l2_bytes)
    for s in (fit, 2 * fit):   # one KV head's share fits the L2 (when splits can help at all)
        if 1 < s <= min(128, nblk) and s * c1 <= 4 * 4 * dev.sm_count * 2:
            out.add(s)
    return sorted(out)


#: The K/V stages of the FA3 forward space: flash-attn builds its sm90 forward with two, for
#: every tile (``kStages = Arch >= 90 ? 2 : ...``, ``hopper/flash_fwd_launch_template.h``; its
#: own SM90 config search, ``flash_attn/cute/sm90_config_search.py``, and tuning note,
#: ``AI/SM90_BLOCK_SIZE_TUNING.md``: "K, V: 2 stages (double-buffered, pipelined with TMA)").
#: The stage count is a constant of the kernel, not one of its tuning knobs (those are
#: ``tile_size_fwd_sm90``'s kBlockM, kBlockN, MmaPV_is_RS and IntraWGOverlap), so the tuner
#: searches the tiles at the stages the kernel has; ``gpu score --config stages=1|3`` still
#: scores the others.
FA3_FWD_STAGES = (2,)


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
    packs = (False, True) if G > 1 and algorithm not in ("fa2_bwd", "fa3_bwd") else (False,)
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
                        if not buildable(shape, pack, sp):
                            continue
                        for st in FA3_FWD_STAGES:
                            for p, ov in places:
                                out.append(KernelConfig("fa3", Br, Bc, 4 * (Br // 64 + 1), st,
                                                        "smem", p, "regs", dt, pack, sp, ov))
        return out
    if algorithm == "fa3_bwd":
        if e != 2:
            raise ParameterError(f"dtype={dtype}: fa3_bwd kernels are fp16/bf16 only",
                                 param="dtype")
        for w in (12, 16):   # 2 or 3 consumer warp groups + the producer
            for Br in range(16, 193, 16):
                for Bc in range(16, 257, 16):
                    for st in (1, 2):
                        for p in ("regs", "smem"):
                            out.append(KernelConfig("fa3_bwd", Br, Bc, w, st, p=p, dtype=dt))
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
                        if not buildable(shape, pack, sp):
                            continue
                        alg = "splitkv" if sp > 1 else "fa2"
                        qs = ("smem", "regs") if alg == "fa2" else ("smem",)
                        for st in (1, 2, 3):
                            for q in qs:
                                out.append(KernelConfig(alg, Br, Bc, w, st, q, "regs", "regs",
                                                        dt, pack, sp))
    return out


def buildable(shape: Shape, pack: bool, splits: int) -> bool:
    """Whether :func:`~.traffic.build` runs a config with this packing and split count: packed
    splits of a masked GQA problem only for a bottom-right causal decode step."""
    decode = shape.Nq == 1 and shape.offset >= 0 and shape.window is None
    return not (pack and shape.group > 1 and splits > 1 and shape.causal and not decode)


def _geometry(cfg: KernelConfig) -> tuple:
    """What the tile streams depend on: configs equal here share traffic and replays (the CTA
    program's loads and stores are the same for every placement of Q, P and O)."""
    return (cfg.algorithm, cfg.Br, cfg.Bc, cfg.pack_gqa, cfg.splits, cfg.dtype)


def _work_key(cfg: KernelConfig) -> tuple:
    """What a config's per-CTA work amounts add to its geometry: the shared-memory bytes per
    step depend on Q's, P's and O's placement and on the readers of K and V
    (:func:`~.traffic.fwd_smem_step`)."""
    return (cfg.q, cfg.p, cfg.o, cfg.consumer_wgs if cfg.algorithm == "fa3" else cfg.warps)


@functools.lru_cache(maxsize=4096)
def _steps(shape: Shape, algorithm: str, Br: int, Bc: int, G: int, splits: int
           ) -> tuple[int, int, int, int]:
    """(CTAs, inner steps, rows of split partials, K/V rows the CTAs' inner loops load) of the
    main/split phase, from the mask geometry alone (the backward's K/V rows: 0, not used)."""
    if algorithm in ("fa2_bwd", "fa3_bwd"):
        ks, ke = geometry.block_counts(shape.Nkv, Bc)
        lo, hi = geometry.q_ranges(shape, ks, ke)
        cnt, _, _ = geometry.meeting(lo, hi, Br, shape.Nq)
        units = shape.n_kv_heads
        return units * len(ks), units * shape.group * int(cnt.sum()), 0, 0
    units = shape.n_kv_heads if G > 1 else shape.n_heads
    if splits == 1:
        Brh = max(1, Br // G)
        st, sp = geometry.block_counts(shape.Nq, Brh)
        lo, hi = geometry.kv_ranges(shape, st, sp)
        cnt, _, width = geometry.meeting(lo, hi, Bc, shape.Nkv)
        return units * len(st), units * int(cnt.sum()), 0, units * int(width.sum())
    st, sp = geometry.block_counts(shape.Nq * G, Br)
    lo, hi = geometry.kv_ranges(shape, st // G, (sp + G - 1) // G)
    L = cdiv(shape.Nkv, splits)
    p0 = np.arange(cdiv(shape.Nkv, L), dtype=np.int64)[None, :] * L
    p1 = np.minimum(shape.Nkv, p0 + L)
    slo = np.maximum(lo[:, None], p0) - p0
    shi = np.minimum(hi[:, None], p1) - p0
    cnt, _, width = geometry.meeting(slo, shi, Bc, p1 - p0)
    seen = cnt > 0
    ctas, steps = int(seen.sum()), int(cnt.sum())
    rows = int(((sp - st)[:, None] * seen).sum())
    return units * ctas, units * steps, units * rows, units * int(width.sum())


def _cheap_bound(dev: Device, shape: Shape, cfg: KernelConfig, f: Feasibility,
                 comp_rw: tuple[int, int], p: Params) -> float:
    """A closed-form lower bound on the calibrated time without building the grid: every
    CTA's inner steps (:func:`_steps`) at the calibrated unit rates, combined as the family's
    step (each combination is subadditive, so the combination of the totals is below the sum
    over CTAs), spread over every SM, plus the per-CTA costs over the slots; at least the
    compulsory bytes at the sustained HBM bandwidth; one launch per kernel."""
    a, Br, Bc = cfg.algorithm, cfg.Br, cfg.Bc
    d = head_dim_rounded(a, shape.d)
    G = shape.group if cfg.pack_gqa else 1
    ctas, steps, _, kvrows = _steps(shape, a, Br, Bc, G, cfg.splits)
    assert dev.hbm_bw is not None and dev.sm_count is not None and dev.clock_hz is not None
    S = dev.sm_count
    k = max(1, min(f.ctas_per_sm, cdiv(ctas, S))) if ctas else 1
    frac = 1.0 if cfg.wgmma else min(1.0, cfg.warps * k / 4.0)
    if cfg.forward:
        flops, exps, smem = 4.0 * Br * Bc * d, Br * Bc + Br, fwd_smem_step(cfg, d)
    else:
        flops, exps, smem = 10.0 * Br * Bc * d, Br * Bc, bwd_smem_step(cfg, d)
    eff = p.wgmma_eff if cfg.wgmma else p.mma_sync_eff
    fp32 = (64 if dev.compute_capability == "8.0" else 128) * dev.clock_hz
    mma = steps * flops / (dev.flops(cfg.dtype) / S * frac * eff)
    soft = steps * exps * (1 / dev.sfu_rate_per_sm + p.softmax_ops / fp32)
    sm = max(mma, soft, steps * smem / dev.smem_bw_per_sm)
    if not cfg.wgmma:
        sm = max(sm, (mma + soft) / softmax_hiders(cfg, k)) + p.fa2_exposed * soft
    fixed = p.cta_cycles / dev.clock_hz
    span = sm / S + ctas * fixed / (S * k)
    if ctas:   # the makespan is at least the mean CTA's time through its SM's L2 port
        port = dev.sm_l2_bw * kv_multicast(cfg, shape, d)   # a cluster shares its K/V loads
        span = max(span, kvrows * 2 * shape.d * cfg.elem_bytes / (ctas * port) + fixed)
    kernels = 2 if (cfg.splits > 1 or not cfg.forward) else 1
    hbm = (comp_rw[0] + comp_rw[1]) / (dev.hbm_bw * STREAM_HBM_EFF)
    return kernels * p.launch_us * 1e-6 + max(span, hbm)


@dataclass
class _Cand:
    cfg: KernelConfig
    feas: Feasibility
    lb: float
    geo: tuple
    ub: float | None = None
    refined: bool = False

    @property
    def determined(self) -> bool:
        """True when the bounds agree to within half the tie tolerance: the config's time is
        then known without a replay (to that resolution)."""
        return self.ub is not None and self.ub <= self.lb * (1 + TIE / 2)


class _Search:
    def __init__(self, dev: Device, shape: Shape, algorithm: str, dtype: str,
                 max_replays: int, where: Callable[[KernelConfig], bool] | None = None,
                 progress: Callable[[int, int], None] | None = None):
        self.where, self.progress = where, progress
        self.dev, self.shape = dev, shape
        self.algorithm, self.dtype = algorithm, dtype
        self.max_replays = max_replays
        self.params = load_params(dev)
        self.traffic: dict[tuple, tuple[Traffic, list[int]]] = {}
        self.work: dict[tuple, Traffic] = {}
        self.floors: dict[tuple, list[float]] = {}
        self.ceilings: dict[tuple, list[float]] = {}
        self.replays: dict[tuple, Replay] = {}
        self.short: dict[tuple, Replay] = {}   # replays on a short budget (time determined)
        self.final: dict[KernelConfig, Score] = {}
        self.cands: list[_Cand] = []
        self.bounds: dict[KernelConfig, _Cand] = {}
        self.searched = self.feasible = 0
        self.space: set[KernelConfig] = set()   # the feasible configs of the space
        self.heap: list = []
        self.ready: list = []          # (bound, i, cfg) of tightened configs still in the heap
        self.taken: set[KernelConfig] = set()   # taken out of order by pop(slack)

    def _traffic(self, cfg: KernelConfig, f: Feasibility) -> tuple[Traffic, list[int]]:
        """The traffic of ``cfg`` (built once per geometry; the per-CTA work amounts that
        depend on the rest of the config recomputed) and its waves."""
        g = (_geometry(cfg), f.ctas_per_sm)
        if g not in self.traffic:
            tr = build(cfg, self.shape, self.dev, f.ctas_per_sm)
            self.traffic[g] = (tr, waves_of(tr, self.dev, f.ctas_per_sm))
            self.work[g + _work_key(cfg)] = tr
        base, P = self.traffic[g]
        w = g + _work_key(cfg)
        if w not in self.work:
            phases = []
            for ph in base.phases:
                F = features(ph)  # the geometry's (cached): warps and smem do not change it
                q = dataclasses.replace(ph, warps=cfg.warps,
                                        smem=F @ work_coefficients(ph, cfg, base.d_pad)[2])
                q.__dict__["_features"] = F
                phases.append(q)
            self.work[w] = dataclasses.replace(base, config=cfg, phases=phases)
        return self.work[w], P

    def _time(self, cfg: KernelConfig, f: Feasibility, hbm: list[float],
              miss: list[float], mode: str) -> float:
        tr, _ = self._traffic(cfg, f)
        tr = dataclasses.replace(tr, config=cfg)
        pr = prepare(tr, self.dev, f.ctas_per_sm, hbm, LIGHT_CTAS_PER_SM, miss)
        return evaluate(pr, self.params, mode)[0]

    def _floor(self, cfg: KernelConfig, f: Feasibility) -> list[float]:
        g = (_geometry(cfg), f.ctas_per_sm)
        if g not in self.floors:
            tr, _ = self._traffic(cfg, f)
            cap = self.dev.l2_bytes
            assert cap is not None  # require_model()
            last = len(tr.phases) - 1
            self.floors[g] = [read_floor(ph, cap if k else 0)
                              + (float(ph.store_bytes.sum()) if k == last else 0.0)
                              for k, ph in enumerate(tr.phases)]
        return self.floors[g]

    def bound(self, cfg: KernelConfig, f: Feasibility) -> _Cand:
        """The lower bound: HBM at the bytes each phase must read (its distinct tiles past
        what the L2 can hold, :func:`~.l2.read_floor`; the last phase's stores), every load an
        L2 hit, the makespan at least ``max(sum/slots, longest CTA)``."""
        hbm = self._floor(cfg, f)
        lb = self._time(cfg, f, hbm, [0.0] * len(hbm), "lower")
        return _Cand(cfg, f, lb, _geometry(cfg))

    def refine(self, c: _Cand) -> None:
        """Both bounds with the exact greedy dispatch (still no replay)."""
        if c.refined:
            return
        c.refined = True
        hbm = self._floor(c.cfg, c.feas)
        c.lb = max(c.lb, self._time(c.cfg, c.feas, hbm, [0.0] * len(hbm), "exact"))
        c.ub = max(c.lb, self._time(c.cfg, c.feas, self._ceiling(c), [1.0] * len(hbm),
                                    "exact"))

    def _refined(self, c: _Cand) -> _Cand:
        self.refine(c)
        return c

    def _ceiling(self, c: _Cand) -> list[float]:
        g = (c.geo, c.feas.ctas_per_sm)
        if g not in self.ceilings:
            self.ceilings[g] = self._ceiling_of(c)
        return self.ceilings[g]

    def _ceiling_of(self, c: _Cand) -> list[float]:
        tr, P = self._traffic(c.cfg, c.feas)
        cap = self.dev.l2_bytes
        assert cap is not None  # require_model()
        stores = [float(ph.store_bytes.sum()) for ph in tr.phases]
        hbm = []
        for k, (ph, w) in enumerate(zip(tr.phases, P)):
            if not ph.n:
                hbm.append(0.0)
                continue
            lastp = k == len(tr.phases) - 1
            rb, wb = hbm_bound(ph, w, cap, min(float(cap), sum(stores[:k])),
                               min(float(cap), sum(stores)) if lastp else 0.0)
            hbm.append(float(rb.sum() + wb.sum()))
        return hbm

    def upper(self, c: _Cand) -> float:
        """An upper bound without a replay: each phase's HBM bytes at most the sum of its
        waves' :func:`~.l2.hbm_bound`, every load a miss, the makespan at most Graham's bound
        (:meth:`refine`: the exact greedy one)."""
        if c.ub is None:
            hbm = self._ceiling(c)
            c.ub = max(c.lb, self._time(c.cfg, c.feas, hbm, [1.0] * len(hbm), "upper"))
        return c.ub

    def run(self) -> None:
        """Feasibility and the cheap bound of every config."""
        cfgs = candidates(self.dev, self.shape, self.algorithm, self.dtype)
        if self.where is not None:
            cfgs = [c for c in cfgs if self.where(c)]
        self.searched = len(cfgs)
        seen: dict[tuple, Feasibility] = {}
        comp: dict[tuple, tuple[int, int]] = {}
        for i, cfg in enumerate(cfgs):
            base = (cfg.algorithm, cfg.Br, cfg.Bc, cfg.warps, cfg.stages, cfg.q, cfg.p, cfg.o,
                    cfg.overlap)
            if base not in seen:
                seen[base] = check(self.dev, cfg, self.shape)
            f = seen[base]
            if not f.feasible or not _small_enough(self.dev, self.shape, cfg, f):
                continue
            ck = (cfg.algorithm, cfg.splits)
            if ck not in comp:
                comp[ck] = compulsory_rw(cfg, self.shape)
            lb = _cheap_bound(self.dev, self.shape, cfg, f, comp[ck], self.params)
            self.heap.append((lb, 1, i, cfg, f))
            self.space.add(cfg)
            self.feasible += 1
        heapq.heapify(self.heap)

    def pop(self, slack: float = 0.0) -> _Cand | None:
        """A config of least bound whose bound is exact (tightening cheap bounds on the way).

        ``slack``: a tightened config is taken as soon as its bound is within ``slack`` of
        every bound left (cheap ones included), without tightening those first (a config taken
        so can at most be beaten by ``slack``, which :meth:`best` accepts as a tie)."""
        while self.heap:
            lb, cheap, i, cfg, f = self.heap[0]
            if cheap and slack:
                while self.ready and self.ready[0][2] in self.taken:
                    heapq.heappop(self.ready)
                if self.ready and self.ready[0][0] * (1 - slack) <= lb:
                    cfg = heapq.heappop(self.ready)[2]
                    self.taken.add(cfg)
                    c = self.bounds[cfg]
                    self.cands.append(c)
                    return c
            heapq.heappop(self.heap)
            if not cheap:
                if cfg in self.taken:
                    continue
                self.taken.add(cfg)
                c = self.bounds[cfg]
                self.cands.append(c)
                return c
            c = self.bound(cfg, f)
            c.lb = max(c.lb, lb)
            self.bounds[cfg] = c
            heapq.heappush(self.heap, (c.lb, 0, i, cfg, f))
            heapq.heappush(self.ready, (c.lb, i, cfg))
        return None

    def spent(self) -> int:
        """L2 replays run so far (full and short)."""
        return len(self.replays) + len(self.short)

    def peek(self) -> float:
        while self.heap and not self.heap[0][1] and self.heap[0][3] in self.taken:
            heapq.heappop(self.heap)   # taken out of order by pop(slack)
        return self.heap[0][0] if self.heap else math.inf

    def finish(self, c: _Cand, short: bool = False) -> Score:
        """Score ``c``.  A config whose bounds determine its time (to :data:`TIE`/2) is not
        replayed: its HBM bytes are reported as the lower bound's (``extrapolated``, granularity
        ``"bound"``); ``short``: a replay on a short budget (:data:`SHORT_REPLAY` requests, the
        rest extrapolated, which the score says); the others are replayed in full."""
        if c.cfg in self.final:
            return self.final[c.cfg]
        tr, P = self._traffic(c.cfg, c.feas)
        tr = dataclasses.replace(tr, config=c.cfg)
        key = (c.geo, c.feas.ctas_per_sm)
        rep = self.replays.get(key) or self.short.get(key)
        if rep is None and c.determined and not short:
            rep = self._bound_replay(c)
        if rep is None:
            assert self.dev.l2_bytes is not None and self.dev.l2_sector_bytes is not None
            rep = replay(tr, self.dev.l2_bytes, P, sector=self.dev.l2_sector_bytes,
                         budget=SHORT_REPLAY if short else FULL_REPLAY, min_waves=1)
            (self.short if short else self.replays)[key] = rep
            if self.progress is not None:
                self.progress(self.spent(), self.max_replays)
        from .model import calibrated

        t: Timing = calibrated(tr, self.dev, c.feas, rep, P, self.params)
        if c.determined:   # the bounds fix the time: keep it within them
            new = min(max(t.time_s, c.lb), need(c.ub))
            scale = new / t.time_s if t.time_s else 1.0   # the split keeps summing to the time
            t = dataclasses.replace(t, time_s=new,
                                    breakdown={k: v * scale for k, v in t.breakdown.items()})
        s = _scored(self.dev, self.shape, c.cfg, c.feas, tr, rep, t)
        self.final[c.cfg] = s
        return s

    def _bound_replay(self, c: _Cand) -> Replay:
        """The lower bound's HBM bytes in the form of a replay (no requests replayed)."""
        tr, _ = self._traffic(c.cfg, c.feas)
        comp_r, _ = compulsory_rw(c.cfg, self.shape)
        floor = self._floor(c.cfg, c.feas)
        stores = [float(ph.store_bytes.sum()) for ph in tr.phases]
        reads = [max(0.0, f - (stores[-1] if k == len(floor) - 1 else 0.0))
                 for k, f in enumerate(floor)]
        if sum(reads) < comp_r:   # never below the compulsory reads
            reads[0] += comp_r - sum(reads)
        writes = [0.0] * len(reads)
        writes[-1] = float(sum(stores))
        return Replay(int(round(sum(reads))), int(round(sum(writes))),
                      [np.array([r]) for r in reads], [np.array([w]) for w in writes], 0, True,
                      "bound")

    def best(self, top: int, distinct: bool = False) -> tuple[list[Score], bool]:
        """The ``top`` configs of least time: configs are taken in order of their lower bound
        until the next bound is within half the tie tolerance of the ``top``-th best time (what
        is left can at best tie with it).  ``distinct``: the ``top`` best distinct tiles
        (Br, Bc), each with its best config (:func:`distinct_tiles`; configs are taken until
        the next bound is above the ``top``-th tile's time by the tie tolerance)."""
        known: list[tuple[_Cand, float]] = []
        exhausted = True
        while True:
            if distinct:
                per: dict[tuple, float] = {}
                for kc, kt in known:
                    key = (kc.cfg.Br, kc.cfg.Bc)
                    per[key] = min(per.get(key, math.inf), kt)
                times = sorted(per.values())
            else:
                times = sorted(t for _, t in known)
            if len(times) >= top:   # configs left tie with the top-th at best: stop
                kth = times[top - 1]
                if self.peek() >= kth * (1 + TIE if distinct else 1 - TIE / 2):
                    break
            c = self.pop(TIE / 2)
            if c is None:
                break
            if c.cfg in self.final or (c.geo, c.feas.ctas_per_sm) in self.replays:
                known.append((c, time_of(self.finish(c))))
                continue
            if self.upper(c) and not c.determined:
                self.refine(c)
            if c.determined:
                known.append((c, c.lb))
                continue
            if self.spent() >= self.max_replays:
                exhausted = False
                break
            known.append((c, time_of(self.finish(c))))
        known.sort(key=lambda x: time_key(x[1], x[0].cfg))
        if distinct:
            least: dict[tuple, float] = {}
            for c, t in known:
                key = (c.cfg.Br, c.cfg.Bc)
                least[key] = min(least.get(key, math.inf), t)
            scored = [self.finish(c) for c, t in known
                      if t <= least[(c.cfg.Br, c.cfg.Bc)] * (1 + TIE)]
            return distinct_tiles(scored)[:top], exhausted
        return sorted((self.finish(c) for c, _ in known[:top]), key=order_key), exhausted

    def rank(self, t: float) -> tuple[int, bool]:
        """1 + the feasible configs faster than ``t`` by more than :data:`TIE` (configs within
        it share the rank); ``exact`` False when replays ran out (the rank is then an upper
        bound)."""
        tol = t * (1 - TIE)
        todo = [c for c in self.cands if c.lb < tol]
        while self.heap and self.peek() < tol:
            lb, cheap, i, cfg, f = heapq.heappop(self.heap)
            if not cheap:
                self.taken.add(cfg)
            c = self.bound(cfg, f) if cheap else self.bounds[cfg]
            c.lb = max(c.lb, lb)
            self.bounds[cfg] = c
            if c.lb < tol:
                self.cands.append(c)
                todo.append(c)
        better, exact = 0, True
        for c in sorted(todo, key=lambda c: c.lb):
            if c.cfg in self.final or (c.geo, c.feas.ctas_per_sm) in self.replays:
                better += time_of(self.finish(c)) < tol
            elif self.upper(c) < tol:
                better += 1
            elif self._refined(c).lb >= tol:
                continue
            elif c.ub is not None and c.ub < tol:
                better += 1
            elif c.determined:
                better += c.lb < tol
            elif self.spent() < self.max_replays:   # only a replay can tell: a short one
                s = self.finish(c, short=True)
                exact = exact and not s.extrapolated
                better += time_of(s) < tol
            else:   # the midpoint of its bounds decides (an estimate)
                exact = False
                better += (c.lb + self.upper(c)) / 2 < tol
        return better + 1, exact


def distinct_tiles(scores: list[Score]) -> list[Score]:
    """One config per tile (Br, Bc), best tile first: within a tile, the configs within
    :data:`~.ranking.TIE` of its least time tie and the shipped preferences break the tie
    (:func:`~.ranking.preference`: more stages, overlap and warp specialization on, P in
    registers)."""
    by: dict[tuple[int, int], list[Score]] = {}
    for s in scores:
        by.setdefault((s.config.Br, s.config.Bc), []).append(s)
    out = []
    for group in by.values():
        t0 = min(time_of(s) for s in group)
        tied = [s for s in group if time_of(s) <= t0 * (1 + TIE)]
        out.append(min(tied, key=lambda s: preference(s.config)))
    return sorted(out, key=order_key)


def _small_enough(dev: Device, shape: Shape, cfg: KernelConfig, f: Feasibility) -> bool:
    try:
        check_size(dev, shape, cfg, f)
    except ParameterError:
        return False
    return True


#: Requests a short replay (of a config whose time its bounds determine, or one the named
#: kernel's rank needs) may spend; the rest of the waves are extrapolated (the score says so).
SHORT_REPLAY = 30_000
#: Requests a finalist's replay may spend (past them, after its first wave, the rest of the
#: waves are extrapolated, which the score says).
FULL_REPLAY = 60_000


@dataclass(frozen=True)
class Bounds:
    """The search's bounds on one config's predicted time (seconds): ``cheap`` (closed form, no
    grid), ``lower`` and ``upper`` (the grid, no replay); ``cheap <= lower <= score(...).time_s
    <= upper`` (tested)."""

    cheap: float
    lower: float
    upper: float


def bounds(device: str | Device, workload: Any, config: Any, *,
           dtype: str | None = None) -> Bounds:
    """The bounds the oracle prunes ``config`` with (:class:`Bounds`; ParameterError if the
    config is infeasible)."""
    dev, shape, cfg = resolve(device, workload, config, dtype)
    f = check(dev, cfg, shape)
    if not f.feasible:
        raise ParameterError(f"config {cfg.short()} is infeasible: {f.why}", param="config")
    s = _Search(dev, shape, cfg.algorithm, cfg.dtype, 1)
    cheap = _cheap_bound(dev, shape, cfg, f, compulsory_rw(cfg, shape), s.params)
    c = s.bound(cfg, f)
    return Bounds(cheap, c.lb, s.upper(c))


def _with_named(best: list[Score], named: Score | None, space: set[KernelConfig], top: int,
                distinct: bool) -> list[Score]:
    """The listed best with the named kernel's config in it where it belongs: the named config
    is scored exactly, so when it is a config of the searched space and faster than a listed
    one (a search whose replay budget ran out lists what it replayed), it takes its place.

    A tie goes to the shipped config: when the list is full and the named config (its tile not
    listed) is within :data:`~.ranking.TIE` of the last entry, the two share a rank and the
    model cannot order them, so the named config is listed in the last entry's place rather
    than dropped by a difference the model does not resolve (A100, FA2, d = 64, causal:
    flash-attn's 128x128 w4 is 0.3% behind the third listed tile, all of them rank 1).  The first entry is
    never displaced: it is the model's best, which ``why`` compares the named config with."""
    if named is None or not named.feasible:
        return best
    cfg = dataclasses.replace(named.config, label="")
    if cfg not in space or any(dataclasses.replace(b.config, label="") == cfg for b in best):
        return best
    if len(best) >= top and time_of(named) >= time_of(best[-1]):
        # no tie, the best alone listed, or its tile listed (with the config that tile's own
        # tie-break chose): as listed
        if (top < 2 or time_of(named) > time_of(best[-1]) * (1 + TIE)
                or distinct and any((b.config.Br, b.config.Bc) == (cfg.Br, cfg.Bc)
                                    for b in best)):
            return best
        best = best[:top - 1]   # tied with the last listed: the shipped config takes its place
    merged = [*best, named]
    return distinct_tiles(merged)[:top] if distinct else sorted(merged, key=order_key)[:top]


def _default_algorithm(dev: Device, shape: Shape) -> str:
    return "fa3" if dev.wgmma else "fa2"


def _named(s: _Search, kernel: str | None, alg: str) -> tuple[Score | None, int | None,
                                                               bool]:
    """The named kernel's config scored and ranked (None when there is none to rank)."""
    dev, shape, dt = s.dev, s.shape, s.dtype
    if kernel == "auto":
        kernel = "fa3" if dev.wgmma and alg in ("fa3", "fa3_bwd") else (
            "fa2" if alg in ("fa2", "splitkv", "fa2_bwd") else None)
    if kernel is None:
        return None, None, True
    if alg == "fa2_bwd":
        from .kernels import fa2_bwd_config

        ncfg = fa2_bwd_config(dev, shape, dt)
    elif alg == "fa3_bwd":
        from .kernels import fa3_bwd_config

        ncfg = fa3_bwd_config(dev, shape, dt)
    else:
        _, _, ncfg = resolve(dev, shape, named_config(kernel, dev, shape, dt))
    f = check(dev, ncfg, shape)
    if not f.feasible:
        from .model import _infeasible
        from .traffic import compulsory_bytes

        return _infeasible(dev, shape, ncfg, f, compulsory_bytes(ncfg, shape)), None, True
    c = s.bounds.get(ncfg) or s.bound(ncfg, f)
    named = s.finish(c)
    rank, exact = s.rank(time_of(named))
    return named, rank, exact


@dataclass(frozen=True)
class TuneSearch:
    """How far :func:`tune_report` searches and what it keeps, validated on construction: at
    most ``max_replays`` L2 replays (>= 1) on its finalists, the space restricted by ``where``
    (a predicate on :class:`~attnio.hardware.kernels.KernelConfig`, ``lambda c: c.splits == 1``:
    the best unsplit config; None: every config), and ``distinct`` (default): the best distinct
    tiles (Br, Bc), each with its best warps, stages, overlap and placement (ties within 1% go
    to the shipped preferences, and a named config tied with the last listed entry is listed in
    its place); False: the best configs."""

    max_replays: int = 6
    where: Callable[[KernelConfig], bool] | None = None
    distinct: bool = True

    def __post_init__(self) -> None:
        object.__setattr__(self, "max_replays",
                           check_int("max_replays", self.max_replays, minimum=1))
        if self.where is not None and not callable(self.where):
            raise ParameterError(f"where must be a function of a KernelConfig, got "
                                 f"{type(self.where).__name__}", param="where")
        if not isinstance(self.distinct, bool):
            raise ParameterError(f"distinct must be True or False, got {self.distinct!r}",
                                 param="distinct")


def tune_report(device: str | Device, workload: Any, *, algorithm: str | None = None,
                dtype: str = "bf16", top: int = 5, kernel: str | None = "auto",
                search: TuneSearch | None = None,
                progress: Callable[[int, int], None] | None = None) -> TuneReport:
    """Search ``algorithm``'s configs (default: ``fa3`` on Hopper, else ``fa2`` with its
    split-KV kernel) for ``workload`` on ``device``; score the named kernel (``kernel``: a name
    of :data:`~.kernels.KERNELS`, ``"auto"`` = flash-attn's config of the family, None = none)
    and rank it; the ``top`` best are kept.  ``search`` (a :class:`TuneSearch`; default
    ``TuneSearch()``): the most L2 replays, a restriction of the space (``where``) and whether
    the best are distinct tiles; ``progress(replays, max_replays)`` is called after each L2
    replay.
    """
    t0 = time.perf_counter()
    if search is None:
        search = TuneSearch()
    elif not isinstance(search, TuneSearch):
        raise ParameterError(f"search must be an attnio.hardware.TuneSearch, got "
                             f"{type(search).__name__}", param="search")
    dev = _devices.get(device)
    if algorithm in ("fa3", "fa3_bwd") and not dev.wgmma:
        raise ParameterError.worded(
            f"{{algorithm}} {algorithm} needs Hopper (sm90: wgmma, TMA); device {dev.name} is "
            f"compute capability {dev.compute_capability or 'n/a'}: use {{algorithm}} fa2 (or "
            "splitkv, fa2_bwd)", param="algorithm")
    dev = dev.require_model()
    shape = Shape.coerce(workload)
    top = check_int("top", top, minimum=1)
    max_replays, where = search.max_replays, search.where
    alg = algorithm or _default_algorithm(dev, shape)
    check_choice("algorithm", alg, _FAMILIES)
    dt = _devices.dtype_name(dtype)
    check_size(dev, shape, None, None)
    s = _Search(dev, shape, alg, dt, max_replays, where, progress)
    s.run()
    if not s.heap:
        raise ParameterError(f"no feasible {alg} config for {shape.describe()} on {dev.name}",
                             param="algorithm")
    best, exhausted = s.best(top, distinct=search.distinct)
    named, rank, exact = _named(s, kernel, alg)
    best = _with_named(best, named, s.space, top, search.distinct)
    why = explain(named, best[0]) if named is not None else None
    return TuneReport(dev.name, shape, alg, dt, best, named, rank, s.feasible, s.searched,
                      s.spent(), exhausted and exact, why, time.perf_counter() - t0,
                      [(c.lb, c.cfg) for c in s.cands])


def tune(device: str | Device, workload: Any, *, algorithm: str | None = None,
         dtype: str = "bf16", top: int = 5, max_replays: int = 6,
         where: Callable[[KernelConfig], bool] | None = None) -> list[Score]:
    """The ``top`` configs of least predicted time, best first (see :func:`tune_report`).

    Parameters
    ----------
    device : str or Device
        A preset name of :mod:`attnio.hardware.devices` or a
        :class:`~attnio.hardware.devices.Device` with the model's figures.
    workload : Shape or tuple
        The attention workload: a :class:`~attnio.core.workload.Shape`, ``(N, d)`` or
        ``(Nq, Nkv, d)``.
    algorithm : str, optional
        The kernel family searched (``"fa2"``, ``"fa3"``, ``"splitkv"``, ``"fa2_bwd"``,
        ``"fa3_bwd"``: FA3's backward, Hopper only);
        default ``fa3`` on Hopper, else ``fa2`` with its split-KV kernel.
    dtype : str
        The element type (default ``"bf16"``).
    top : int
        How many configs to return (>= 1).
    max_replays : int
        The most L2 replays the search runs on its finalists (>= 1).
    where : callable, optional
        A predicate on :class:`~attnio.hardware.kernels.KernelConfig` restricting the space
        (``lambda c: c.splits == 1``: the best unsplit config).

    Returns
    -------
    list of Score
        The ``top`` scored configs, least predicted time first.
    """
    return tune_report(device, workload, algorithm=algorithm, dtype=dtype, top=top, kernel=None,
                       search=TuneSearch(max_replays, where, distinct=False)).best


def best_splits(device: str | Device, workload: Any, *, algorithm: str | None = None,
                dtype: str = "bf16") -> int:
    """The KV split count of the oracle's best config: flash-attn's ``num_splits``
    heuristic re-derived from the model."""
    return tune(device, workload, algorithm=algorithm, dtype=dtype, top=1)[0].config.splits
