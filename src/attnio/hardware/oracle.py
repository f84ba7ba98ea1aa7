"""The tile oracle: a search over feasible kernel configs that calls the model.

The space (Timeloop's mapper, for one kernel family): tiles that are multiples of the MMA shape
(``fa3``: Br in {64, 128, 192}, one consumer warp group per 64 rows; ``fa2``: Br a multiple of 16
rows per warp, 1-8 warps; Bc a multiple of 16 up to 256), 1-3 K/V stages, placements (P in
registers or shared memory; FA3's overlap; FA2's Q in registers), GQA packing, and KV splits.

The search is exact branch and bound over the model:

1. **feasibility** by closed form (:mod:`.feasibility`) removes configs over a limit;
2. a closed-form **lower bound** on every feasible config's time (:func:`_cheap_bound`: each
   resource's total spread over the SMs, the latency term over the resident CTAs, HBM at the
   compulsory bytes) orders them; the **exact lower bound** (the roofline of every resource but
   HBM, per wave, every load an L2 hit; each phase at least the distinct bytes it must read
   past the L2's capacity) is computed lazily, best first;
3. an **upper bound** without a replay (:meth:`_Search.upper`: each wave's HBM reads at most its
   distinct tiles when they fit the L2, at most its requests otherwise; its write-backs at most
   what it allocates) settles a config whose time no replay could change (the two bounds meet)
   and, when ranking a named kernel, every config it already places;
4. the rest are **finished** (the L2 replay, shared by every config of one geometry and wave
   size) until the next lower bound rounds above the ``top``-th best time found, or
   ``max_replays`` replays were spent (then the result says so: ``exhausted = False``); only the
   winners are replayed when their bounds already placed them.

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
from .l2 import Replay, hbm_bound, read_floor, read_floor_waves, replay
from .model import Score, _scored, resolve, waves_of
from .roofline import RESOURCES, Timing, phase_total
from .traffic import Traffic, build, bwd_smem_step, compulsory_rw, fwd_smem_step

__all__ = ["SPLITS", "Bounds", "TuneReport", "best_splits", "bounds", "candidates", "explain",
           "tune", "tune_report"]

SPLITS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128)
_FAMILIES = ("fa3", "fa2", "splitkv", "fa2_bwd")


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


def _time_class(cfg: KernelConfig, P: list[int]) -> tuple:
    """What the model's time depends on beyond the tile geometry: configs equal here (FA3's
    overlap variants: overlap changes only registers) have equal times and bounds."""
    return (_geometry(cfg), tuple(P), cfg.warps, cfg.stages, cfg.q, cfg.p, cfg.o)


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
    ub: float | None = None
    waves_lb: float = 0.0      # the per-wave part of lb (without the phases' HBM floors)

    @property
    def determined(self) -> bool:
        """True when the bounds round to the same time (:func:`_round`): the config's place in
        :func:`_order_key` is then known without a replay."""
        return self.ub is not None and _round(self.ub) == _round(self.lb)


@functools.lru_cache(maxsize=4096)
def _steps(shape: Shape, algorithm: str, Br: int, Bc: int, G: int, splits: int
           ) -> tuple[int, int, int, int]:
    """(CTAs, inner steps, rows of split partials, K/V rows the CTAs' inner loops load) of the
    main/split phase, from the mask geometry alone (the backward's K/V rows: 0, not used)."""
    if algorithm == "fa2_bwd":
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
                 comp_rw: tuple[int, int]) -> float:
    """A closed-form lower bound without building the grid: each SM-level resource's total
    spread evenly over the SMs that can hold a CTA (no wave quantisation; the L2 port over the
    K/V bytes alone); the latency term's CTA times (K/V bytes x L2-hit latency / bytes in
    flight) spread evenly over the CTAs resident at once (a wave lasts at least as long as its
    mean CTA); HBM at the
    compulsory bytes plus the split partials (every stored tile is written back); with splits,
    the compulsory reads (all in the split kernel, from an empty L2) plus the combine kernel's
    one round trip to the L2."""
    a, Br, Bc = cfg.algorithm, cfg.Br, cfg.Bc
    d = head_dim_rounded(a, shape.d)
    G = shape.group if cfg.pack_gqa else 1
    ctas, steps, prow, kvrows = _steps(shape, a, Br, Bc, G, cfg.splits)
    assert dev.hbm_bw is not None and dev.sm_count is not None  # require_model()
    e, hit = cfg.elem_bytes, dev.l2_hit_latency_s
    compulsory = comp_rw[0] + comp_rw[1] + prow * (4 * shape.d + 4)
    split = comp_rw[0] / dev.hbm_bw + hit if cfg.splits > 1 else 0.0
    # SMs (and resident CTAs) that can share the work: no more than there are CTAs
    n_sm = dev.sm_count
    S = max(1, min(n_sm, ctas))
    R = max(1, min(n_sm * f.ctas_per_sm, ctas))
    per_sm = f.ctas_per_sm if ctas > n_sm else 1
    frac = 1.0 if a == "fa3" else min(1.0, cfg.warps * per_sm / 4.0)
    if cfg.forward:
        flops = steps * 4.0 * Br * Bc * d
        exps = steps * (Br * Bc + Br)
        smem = steps * fwd_smem_step(cfg, d)
    else:
        flops = steps * 10.0 * Br * Bc * d
        exps = steps * Br * Bc
        smem = steps * bwd_smem_step(cfg, d)
    row = 2 * shape.d * e                      # one K row and one V row
    kv = kvrows * row
    lat = hit + (dev.tma_latency_s if a == "fa3" else 0.0)
    inflight = cfg.stages * Bc * row
    # the waves' misses weight the latency: over all waves, the K/V bytes taken at the DRAM
    # latency are at least the compulsory reads less every other load (two Q-sized tiles per
    # CTA at most)
    missed = max(0.0, comp_rw[0] - ctas * Br * row)
    lat_bytes = lat * kv + (dev.dram_latency_s - hit) * min(kv, missed)
    peak_sm = dev.flops(cfg.dtype) / n_sm
    return max(flops / (S * peak_sm * frac), exps / (S * dev.sfu_rate_per_sm),
               smem / (S * dev.smem_bw_per_sm), compulsory / dev.hbm_bw,
               kv / (S * dev.sm_l2_bw), lat_bytes / inflight / R, split)


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
        self.replays: dict[tuple, Replay] = {}
        self.final: dict[KernelConfig, Score] = {}
        self.cands: list[_Cand] = []
        self.bounds: dict[KernelConfig, _Cand] = {}
        self.searched = 0
        self.feasible = 0
        self._hbm_floor: dict[tuple, float] = {}
        self._lb: dict[tuple, tuple[float, float]] = {}
        self._ub: dict[tuple, float] = {}

    def _traffic(self, cfg: KernelConfig, f: Feasibility) -> Traffic:
        g = _geometry(cfg)
        if g not in self.traffic:
            self.traffic[g] = build(cfg, self.shape, self.dev, f.ctas_per_sm)
        return self.traffic[g]

    def bound(self, cfg: KernelConfig, f: Feasibility) -> _Cand:
        """The exact lower bound: every resource but HBM per wave (every load an L2 hit for the
        latency term), each phase at least its :func:`~.l2.read_floor` over the HBM bandwidth,
        the kernel at least the compulsory reads plus every stored byte."""
        tr = self._traffic(cfg, f)
        wv = waves_of(tr, self.dev, f.ctas_per_sm)
        key = _time_class(cfg, wv)
        if key in self._lb:
            lb, t = self._lb[key]
            return _Cand(cfg, f, lb, _geometry(cfg), wv, waves_lb=t)
        t = tf = 0.0
        last = len(tr.phases) - 1
        cap, hbm_bw = self.dev.l2_bytes, self.dev.hbm_bw
        assert cap is not None and hbm_bw is not None  # require_model()
        for k, (ph, P) in enumerate(zip(tr.phases, wv)):
            w = phase_total(ph, self.dev, cfg, tr.d_pad, P,
                            read_floor_waves(ph, P, cap, k == 0) if ph.n else None)
            t += w
            floor = read_floor(ph, cap if k else 0)
            if k == last:   # the last phase writes back its own stores (evicted or flushed)
                floor += float(ph.store_bytes.sum())
            tf += max(w, floor / hbm_bw)
        key = (cfg.algorithm, cfg.splits, _geometry(cfg))
        if key not in self._hbm_floor:
            comp_r, _ = compulsory_rw(cfg, self.shape)
            stores = sum(int(ph.store_bytes.sum()) for ph in tr.phases)
            self._hbm_floor[key] = (comp_r + stores) / hbm_bw
        lb = max(tf, self._hbm_floor[key])
        self._lb[_time_class(cfg, wv)] = (lb, t)
        return _Cand(cfg, f, lb, _geometry(cfg), wv, waves_lb=t)

    def upper(self, c: _Cand) -> float:
        """An upper bound on ``c``'s predicted time without a replay: each wave's HBM reads and
        writes at most :func:`~.l2.hbm_bound` (and the latency term at that miss fraction).
        Equal to the exact lower bound when neither HBM nor the latency can bind: then the
        config's time is known without a replay."""
        key = _time_class(c.cfg, c.P)
        if c.ub is None and key in self._ub:
            c.ub = self._ub[key]
        if c.ub is None:
            tr = self.traffic[c.geo]
            cap = self.dev.l2_bytes
            assert cap is not None  # require_model()
            live = [(ph, P) for ph, P in zip(tr.phases, c.P) if ph.n]
            stores = [float(ph.store_bytes.sum()) for ph, _ in live]
            t = 0.0
            for k, (ph, P) in enumerate(live):
                last = k == len(live) - 1
                rb, wb = hbm_bound(ph, P, cap, min(float(cap), sum(stores[:k])),
                                   min(float(cap), sum(stores)) if last else 0.0)
                t += phase_total(ph, self.dev, c.cfg, tr.d_pad, P, rb, wb)
            c.ub = self._ub[key] = max(t, c.lb)
        return c.ub

    def run(self) -> None:
        """Feasibility and the closed-form bound of every config; the exact bound is computed
        lazily, best first (:meth:`pop`)."""
        cfgs = candidates(self.dev, self.shape, self.algorithm, self.dtype)
        if self.where is not None:
            cfgs = [c for c in cfgs if self.where(c)]
        self.searched = len(cfgs)
        seen: dict[tuple, Feasibility] = {}
        comp: dict[tuple, tuple[int, int]] = {}
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
                comp[ck] = compulsory_rw(cfg, self.shape)
            lb = _cheap_bound(self.dev, self.shape, cfg, f, comp[ck])
            heapq.heappush(self.heap, (_round(lb), 1, lb, i, cfg, f))
            self.feasible += 1

    def pop(self) -> _Cand | None:
        """A config of least bound (to the model's 3-figure resolution, :func:`_round`) whose
        bound is exact, tightening cheap bounds on the way; within one rounded bound exact ones
        come first (the search's stopping rules compare rounded bounds only)."""
        while self.heap:
            _, cheap, lb, i, cfg, f = heapq.heappop(self.heap)
            if not cheap:
                c = self.bounds[cfg]
                self.cands.append(c)
                return c
            c = self.bound(cfg, f)
            self.bounds[cfg] = c
            lb = max(c.lb, lb)
            heapq.heappush(self.heap, (_round(lb), 0, lb, i, cfg, f))
        return None

    def peek(self) -> float:
        """The least bound left, rounded (:func:`_round`)."""
        return self.heap[0][0] if self.heap else math.inf

    def finish(self, c: _Cand) -> Score:
        if c.cfg in self.final:
            return self.final[c.cfg]
        key = (c.geo, tuple(c.P))
        tr = dataclasses.replace(self.traffic[c.geo], config=c.cfg)
        if key not in self.replays:
            assert self.dev.l2_bytes is not None and self.dev.l2_sector_bytes is not None
            self.replays[key] = replay(tr, self.dev.l2_bytes, c.P,
                                       sector=self.dev.l2_sector_bytes)
        rep = self.replays[key]
        from .roofline import roofline

        t: Timing = roofline(tr, self.dev, c.P, rep)
        s = _scored(self.dev, self.shape, c.cfg, c.feas, tr, rep, t)
        self.final[c.cfg] = s
        return s

    def best(self, top: int) -> tuple[list[Score], bool]:
        """The ``top`` configs by :func:`_order_key`.  Configs are taken in order of their lower
        bound until the next bound rounds (:func:`_round`) above the ``top``-th best time, so
        that ties (:func:`_order_key`) are broken among every config that can tie;
        a config whose time its bounds determine needs no replay to be placed, only the winners
        are replayed (for their HBM bytes); the others are replayed while replays last."""
        known: list[tuple[_Cand, float]] = []
        exhausted = True
        while True:
            if len(known) >= top and \
                    _round(self.peek()) > _round(sorted(t for _, t in known)[top - 1]):
                break
            c = self.pop()
            if c is None:
                break
            if c.cfg in self.final or (c.geo, tuple(c.P)) in self.replays:
                known.append((c, _time(self.finish(c))))
                continue
            self.upper(c)
            if c.determined:
                known.append((c, c.lb))
                continue
            if len(self.replays) >= self.max_replays:
                exhausted = False
                break
            known.append((c, _time(self.finish(c))))
        known.sort(key=lambda x: _key(x[1], self.traffic[x[0].geo].two_level, x[0].cfg))
        return sorted((self.finish(c) for c, _ in known[:top]), key=_order_key), exhausted

    def rank(self, t: float, rel: float = 1e-9) -> tuple[int, bool]:
        """1 + the feasible configs faster than ``t·(1 - rel)``.

        A config whose lower bound is not below it is not faster; one whose upper bound
        (:meth:`upper`, no replay) is below it is; the others are replayed while replays last,
        and past that counted as faster (``exact`` False: the rank is then an upper bound)."""
        better, exact = 0, True
        tol = t * (1 - rel)
        todo = [c for c in self.cands if c.lb < tol]
        while self.peek() <= _round(tol):    # every config left rounds above: none is below
            _, cheap, lb, i, cfg, f = heapq.heappop(self.heap)   # (rank comes last: it drains)
            if lb >= tol:
                continue
            c = self.bound(cfg, f) if cheap else self.bounds[cfg]
            self.bounds[cfg] = c
            if c.lb < tol:
                self.cands.append(c)
                todo.append(c)
        unsure = []
        for c in todo:
            r = self._faster(c, tol, replay_now=False)
            if r is None:
                unsure.append(c)
            else:
                better += r
        for c in sorted(unsure, key=lambda c: c.lb):
            r = self._faster(c, tol, replay_now=True)
            if r is None:
                exact = False
                r = True
            better += r
        return better + 1, exact

    def _faster(self, c: _Cand, tol: float, replay_now: bool) -> bool | None:
        """Whether ``c`` is faster than ``tol``; None when only a replay could tell and none is
        allowed (``replay_now`` False, or the replay budget is spent)."""
        if c.cfg in self.final or (c.geo, tuple(c.P)) in self.replays:
            return _time(self.finish(c)) < tol
        if not replay_now:
            return True if self.upper(c) < tol else None
        if len(self.replays) >= self.max_replays:
            return None
        return _time(self.finish(c)) < tol


def _time(s: Score) -> float:
    """The predicted time of a scored (feasible) config."""
    assert s.time_s is not None
    return s.time_s


def _round(time_s: float) -> float:
    """A time to 3 significant figures: the model's resolution (monotone, so a config whose
    lower bound rounds above the top-th best time cannot tie with it)."""
    return float(f"{time_s:.3g}") if math.isfinite(time_s) else time_s


def _key(time_s: float, l2_bytes: int, c: KernelConfig) -> tuple:
    return (_round(time_s), l2_bytes, -c.stages, c.p != "regs", not c.overlap, -c.Bc)


def _order_key(s: Score) -> tuple:
    """Least time first (equal to 3 significant figures: a tie, as the model is no finer);
    among ties fewer bytes requested from the L2 (GQA packing), then (where the latency term
    does not bind, stages and FA3's overlap tie) more stages, P in registers and overlap first,
    as real kernels choose."""
    assert s.l2_bytes is not None  # a scored (feasible) config
    return _key(_time(s), s.l2_bytes, s.config)


def explain(named: Score, best: Score) -> str:
    """Why the named kernel's config is slower (or not) than the oracle's, resource by
    resource: the resource whose time differs most, and the limits that shape the choice."""
    if not named.feasible:
        return f"{named.config.short()} is infeasible: {named.why}"
    if named.config == best.config:
        return f"the oracle picks {named.config.label or 'the named kernel'}'s config itself"
    t_named, t_best = _time(named), _time(best)
    dt = t_named - t_best
    rel = dt / t_best if t_best else 0.0
    diffs = {r: named.alone.get(r, 0.0) - best.alone.get(r, 0.0) for r in RESOURCES}
    r = max(diffs, key=lambda k: diffs[k])
    lines = [f"{named.config.short()} ({named.config.label}) is predicted "
             f"{t_named * 1e6:.1f} us, {rel:+.1%} against the oracle's "
             f"{best.config.short()} ({t_best * 1e6:.1f} us)."]
    if abs(rel) < 0.005:
        lines.append("Within 0.5%: the model sees no material difference.")
    words = {"hbm": "HBM traffic", "l2": "L2 bandwidth", "sm_port": "each SM's L2 port",
             "smem": "shared-memory bandwidth", "tensor": "tensor-core time", "sfu":
             "exponentials (SFU)", "latency": "memory latency (bytes in flight per CTA)"}
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


@dataclass(frozen=True)
class Bounds:
    """The search's bounds on one config's predicted time (seconds): ``cheap`` (closed form, no
    grid), ``lower`` (per wave, no replay), ``upper`` (no replay); ``cheap <= lower <=
    score(...).time_s <= upper`` for an exact replay (tested; an extrapolated one, past the
    request budget, is an estimate and may stray outside)."""

    cheap: float
    lower: float
    upper: float


def bounds(device: str | Device, workload: Any, config: Any, *,
           dtype: str | None = None) -> Bounds:
    """The bounds the oracle prunes ``config`` with (:class:`Bounds`; ParameterError if the
    config is infeasible)."""
    dev, shape, cfg = resolve(device, workload, config, dtype)
    dev.require_model()
    f = check(dev, cfg, shape)
    if not f.feasible:
        raise ParameterError(f"config {cfg.short()} is infeasible: {f.why}", param="config")
    s = _Search(dev, shape, cfg.algorithm, cfg.dtype, 1)
    cheap = _cheap_bound(dev, shape, cfg, f, compulsory_rw(cfg, shape))
    c = s.bound(cfg, f)
    return Bounds(cheap, c.lb, s.upper(c))


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
            rank, exact = s.rank(_time(named))
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
        The kernel family searched (``"fa2"``, ``"fa3"``, ``"splitkv"``, ``"fa2_bwd"``);
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
    return tune_report(device, workload, algorithm=algorithm, dtype=dtype, top=top,
                       kernel=None, max_replays=max_replays, where=where).best


def best_splits(device: str | Device, workload: Any, *, algorithm: str | None = None,
                dtype: str = "bf16") -> int:
    """The KV split count of the oracle's best config: flash-attn's ``num_splits``
    heuristic re-derived from the model."""
    return tune(device, workload, algorithm=algorithm, dtype=dtype, top=1)[0].config.splits



