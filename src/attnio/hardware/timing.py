"""The calibrated time model: what each unit sustains, how each kernel family overlaps it, how
CTAs reach the SMs.

The counts come from :mod:`.traffic` (the two-level simulator's per-CTA tile streams: tensor
FLOPs, exponentials, shared-memory and L2 bytes per CTA) and :mod:`.l2` (HBM bytes after the L2
replay); nothing is counted here.  This module turns them into time:

* **Sustained unit rates** (docs/devices.md, "Sustained rates"): tensor cores at the dense peak
  times an efficiency per instruction family (``mma_sync_eff`` for ``mma.sync``, FA1/FA2 and
  split-KV kernels and, on Ampere, cuBLAS; ``wgmma_eff`` for ``wgmma``, FA3 and cuBLAS on
  Hopper; FP8 at its own peak), the exponentials on the special-function units (16 per clock per
  SM), the softmax's other instructions (``softmax_ops`` FP32-pipe instructions per exponential:
  scale, max, subtract, row sum, conversion, rescale), shared memory at 128 B per clock per SM,
  each SM's port to the L2, HBM at ``hbm_eff`` of the data sheet's bandwidth.
* **Overlap of the K/V step**, per family, from each unit's time ``mma``, ``soft`` (SFU + FP32
  pipes), ``smem``, ``l2`` for one CTA on one SM:

  - FA2-style (``fa2``, ``splitkv``, ``fa2_bwd``): the softmax runs between the two GEMMs in the
    same warps, so only other resident warps can hide it: with ``k`` CTAs per SM the SM
    spends ``max(mma, soft, smem, l2, (mma + soft)/h) + fa2_exposed·soft`` per CTA step, ``h``
    the resident warps per warp scheduler (``k·warps/4``, at least 1: a scheduler with two
    warps runs one's softmax during the other's MMAs; the exposed fraction: the softmax's
    instructions take issue slots the MMAs need);
  - FA3-style (``fa3``, ``fa3_bwd``): producer/consumer warp groups, ping-pong between two consumer groups
    and intra-warp-group pipelining hide the softmax behind the other GEMM:
    ``max(mma, soft, smem, l2) + fa3_exposed·min(mma, soft)`` (one consumer group without the
    intra-group overlap: ``mma + soft``).  FA3's backward (``fa3_bwd``) takes the second form,
    ``max(mma + soft, ...)``: its consumer groups run in lockstep (flash-attn's
    ``mainloop_bwd_sm90_tma_gmma_ws.hpp`` syncs all MMA threads on the ``PdS`` named barrier
    each step and has no ``warp_scheduler_barrier`` ping-pong), and dS = P·(dP − dPsum) is
    computed with no GEMM in flight (only the exponentials overlap the dP GEMM, not credited);
  - FA1 (``fa1`` configs): FA2's step plus FA1's split-K reduction of the warps' partial O
    through shared memory behind a barrier each step (nothing overlaps it) and the fp32 O, l, m
    round trip through the L2 each step.

* **Dispatch**: a grid's CTAs go, in launch order, to whichever of the ``SMs x k`` slots frees
  first (greedy list scheduling: causal blocks that finish early make room); FA3's persistent
  scheduler hands out tiles in its order (longest first when causal) the same way.  A CTA costs
  ``cta_cycles`` (prologue and epilogue: Q load, pipeline fill, O and LSE store) plus one DRAM
  latency beyond its steps; each kernel launch ``launch_us``.
* A kernel's time is ``launch + max(makespan, HBM bytes / (hbm_eff·bandwidth), L2 bytes / L2
  bandwidth)``; a pass of several kernels (split + combine, the backward's preprocessing) is the
  sum.

At most 8 parameters per architecture generation (:data:`BOUNDS`), fitted by
``benchmarks/calibrate_gpu.py`` to the published measurements of the calibration set and stored
with their provenance in ``calibration.json`` (package data).  Generations without timings
(Ampere) take their unit efficiencies from microbenchmarks and the kernel-structure parameters
from the Hopper fit (the same FA2 sources): see the file's ``provenance``.
"""

from __future__ import annotations

import functools
import heapq
import json
from dataclasses import asdict, dataclass
from importlib import resources
from typing import Any

import numpy as np

from ..core.errors import ParameterError
from . import fits
from .devices import Device
from .kernels import KernelConfig
from .traffic import Phase, Traffic, features

__all__ = ["BOUNDS", "PARAMS", "RESOURCES", "Params", "Prepared", "Timing", "evaluate",
           "generation", "greedy_makespan", "load_params", "prepare"]

#: The resources a time is attributed to (``Score.alone`` and ``Score.by_resource`` keys).
RESOURCES = ("hbm", "l2", "sm_port", "smem", "tensor", "sfu", "latency")


@dataclass(frozen=True)
class Timing:
    """Predicted time and where it goes: ``by_resource``, the seconds of the kernels each
    resource binds (they add up to ``time_s``); ``alone``, the seconds each resource would take
    if it were the only limit."""

    time_s: float
    bound_by: str
    waves: int
    by_resource: dict[str, float]
    alone: dict[str, float]

#: Parameter -> (lower, upper, unit, meaning).
BOUNDS: dict[str, tuple[float, float, str, str]] = {
    "mma_sync_eff": (0.05, 1.0, "fraction", "mma.sync's sustained share of the dense tensor peak"),
    "wgmma_eff": (0.05, 1.0, "fraction", "wgmma's sustained share of the dense tensor peak"),
    "hbm_eff": (0.3, 1.0, "fraction", "achievable share of the data sheet's HBM bandwidth"),
    "softmax_ops": (2.0, 16.0, "instr/exp", "FP32-pipe instructions of the softmax per exponential"),
    "fa2_exposed": (0.0, 1.0, "fraction", "FA2: share of the softmax other warps cannot hide"),
    "fa3_exposed": (0.0, 1.0, "fraction", "FA3: share of min(GEMM, softmax) ping-pong leaves"),
    "cta_cycles": (0.0, 50000.0, "SM clocks", "per-CTA prologue + epilogue beyond its loads"),
    "launch_us": (0.0, 50.0, "us", "per kernel launch (host to first CTA, last CTA to done)"),
}

PARAMS = tuple(BOUNDS)


@dataclass(frozen=True)
class Params:
    """One generation's parameters (:data:`BOUNDS`)."""

    mma_sync_eff: float
    wgmma_eff: float
    hbm_eff: float
    softmax_ops: float
    fa2_exposed: float
    fa3_exposed: float
    cta_cycles: float
    launch_us: float

    def check(self) -> Params:
        for k, v in asdict(self).items():
            lo, hi, _, _ = BOUNDS[k]
            if not lo <= v <= hi:
                raise ParameterError(f"{k}={v} outside [{lo}, {hi}]", param=k)
        return self

    @classmethod
    def from_vector(cls, x) -> Params:
        return cls(**{k: float(v) for k, v in zip(PARAMS, x)})


def generation(dev: Device) -> str:
    """The architecture generation whose parameters a device uses: ``sm90``, ``sm80``, ``sm89``."""
    cc = dev.compute_capability
    return "sm" + cc.replace(".", "") if cc else dev.name


@functools.lru_cache(maxsize=1)
def _table() -> dict[str, Any]:
    text = resources.files("attnio.hardware").joinpath("calibration.json").read_text()
    return json.loads(text)


def load_params(dev: Device | str) -> Params:
    """The parameters of ``dev``'s generation: a user's fit in force (:func:`.fits.using`), the
    stored one, or a borrowed one with a :class:`~.fits.FitWarning` (:mod:`.fits`)."""
    gen = dev if isinstance(dev, str) else generation(dev)
    entry = fits.choose(gen, _table()["generations"], "" if isinstance(dev, str) else dev.name)
    return Params(**entry["params"])


# ---------------------------------------------------------------------- prepared amounts
@dataclass
class _PhaseWork:
    """Per-CTA unit amounts of one phase (parameter-free), in launch order."""

    name: str
    n: int
    k: int                 # CTAs per SM used
    mma_s: np.ndarray      # tensor time at the full peak (s); divided by the family efficiency
    sfu_s: np.ndarray      # exponentials on the SFUs (s)
    alu_exp: np.ndarray    # exponentials (for the FP32-pipe instructions)
    smem_s: np.ndarray     # shared-memory time (s)
    l2_s: np.ndarray       # this CTA's bytes through its SM's L2 port (s)
    serial_s: np.ndarray   # FA1's serial per-step work (s)
    rounds: np.ndarray     # round trips to memory (Little's law: loaded bytes / bytes in flight)
    latency: float         # one round trip (s): L2 hit, DRAM for the phase's miss share, TMA
    l2_bytes: float
    heavy: bool            # main/split (MMA) phase, or a light kernel
    hide: float = 1.0      # warps per warp scheduler (of 4 per SM): who can hide the softmax


@dataclass
class Prepared:
    """Everything :func:`evaluate` needs, computed once per (config, workload, device)."""

    family: str            # "fa2" (FA2-style incl. fa1, splitkv, fa2_bwd) or "fa3" (+ fa3_bwd)
    mma_kind: str          # "sync" or "wgmma"
    overlap_ok: bool       # FA3: ping-pong or intra-warp-group overlap available
    phases: list[_PhaseWork]
    hbm_bytes: list[float]  # per phase
    clock: float
    sm_count: int
    hbm_bw: float
    l2_bw: float
    dram_latency: float
    fp32_rate: float       # FP32 instructions per second per SM (per lane-instruction)


def _fp32_per_clk(dev: Device) -> int:
    """FP32 results per clock per SM (CUDA arithmetic-instruction table: 64 on CC 8.0, 128 on
    8.6, 8.9 and 9.0)."""
    return 64 if dev.compute_capability == "8.0" else 128


def prepare(tr: Traffic, dev: Device, ctas_per_sm: int, hbm_per_phase: list[float],
            light_ctas: int, miss: list[float] | None = None) -> Prepared:
    """Per-CTA unit times of ``tr`` on ``dev`` (at full rates; the parameters scale them).

    ``hbm_per_phase``: HBM bytes of each phase (the L2 replay's, or a bound); ``miss``: the
    share of each phase's loads that miss the L2 (weights the DRAM latency; default: the HBM
    reads over the loads)."""
    cfg: KernelConfig = tr.config
    assert dev.sm_count is not None and dev.clock_hz is not None and dev.hbm_bw is not None
    S = dev.sm_count
    peak_sm = dev.flops(cfg.dtype) / S
    phases: list[_PhaseWork] = []
    for ph in tr.phases:
        heavy = ph.name in ("main", "split")
        k = ctas_per_sm if heavy else light_ctas
        k = max(1, min(k, -(-ph.n // S) if ph.n else 1))
        frac = 1.0
        if heavy and not cfg.wgmma:   # an FA2-style CTA of w warps reaches w tensor cores
            frac = min(1.0, cfg.warps * k / 4.0)
        load = ph.load_bytes.astype(np.float64)
        store = ph.store_bytes.astype(np.float64)
        steps = features(ph)[:, 3] if ph.n else np.zeros(0)
        serial = np.zeros(ph.n)
        l2 = (load + store) / dev.sm_l2_bw
        if heavy and cfg.fa1:
            serial, extra = _fa1_extra(cfg, tr.d_pad, steps, dev)
            l2 = l2 + extra
        inflight = inflight_bytes(ph, cfg)
        rounds = np.where(load > 0, 1.0, 0.0)
        if inflight:
            rounds = np.where(load > 0, np.maximum(1.0, load / inflight), 0.0)
        i = len(phases)
        m = miss[i] if miss is not None else min(1.0, hbm_per_phase[i] / max(load.sum(), 1.0))
        lat = dev.l2_hit_latency_s + m * (dev.dram_latency_s - dev.l2_hit_latency_s)
        if heavy and cfg.wgmma:
            lat += dev.tma_latency_s
        phases.append(_PhaseWork(
            ph.name, ph.n, k, ph.flops / (peak_sm * frac), ph.exps / dev.sfu_rate_per_sm,
            ph.exps.astype(np.float64), ph.smem / dev.smem_bw_per_sm, l2, serial, rounds, lat,
            float(load.sum() + store.sum()), heavy, max(1.0, k * cfg.warps / 4.0)))
    fam = "fa3" if cfg.wgmma else "fa2"
    return Prepared(fam, "wgmma" if fam == "fa3" else "sync",
                    cfg.algorithm == "fa3" and (cfg.consumer_wgs >= 2 or cfg.overlap), phases,
                    list(hbm_per_phase), float(dev.clock_hz), S, float(dev.hbm_bw),
                    dev.l2_bandwidth, dev.dram_latency_s,
                    float(_fp32_per_clk(dev) * dev.clock_hz))


def inflight_bytes(ph: Phase, cfg: KernelConfig) -> float | None:
    """Bytes one CTA of the phase can have in flight: its multi-buffered tiles in shared memory.

    Forward CTAs (``main``, ``split``) keep ``stages`` K/V tiles outstanding (cp.async or TMA
    fills them while the consumers work on another), ``stages·Bc`` rows of K and of V; the
    backward's CTAs ``stages`` Q and dO tiles.  The light kernels (the split combine, the
    backward's preprocessing) issue all their loads at once: None (one round trip).
    """
    if ph.name in ("main", "split") and cfg.forward:
        return float(cfg.stages * cfg.Bc * (ph.row_bytes["K"] + ph.row_bytes["V"]))
    if ph.name == "main":
        return float(cfg.stages * cfg.Br * (ph.row_bytes["Q"] + ph.row_bytes["dO"]))
    return None


def _fa1_extra(cfg: KernelConfig, d: int, steps: np.ndarray, dev: Device
               ) -> tuple[np.ndarray, np.ndarray]:
    """FA1's per-step extras: (serial shared-memory reduction time, L2 round-trip time).

    Forward: the warps split the keys (split-K), so each step every warp writes its partial
    ``Br x d`` fp32 O and they are summed through shared memory behind a barrier; O (fp32), l
    and m go to the L2 and back.  Backward: the same reduction for the dK, dV partials."""
    w, Br, Bc = cfg.warps, cfg.Br, cfg.Bc
    rows = Br if cfg.forward else Bc
    red = 2.0 * w * rows * d * 4 / dev.smem_bw_per_sm
    trip = 2.0 * rows * (d * 4 + 8) / dev.sm_l2_bw if cfg.forward else 0.0
    return steps * red, steps * trip


# ---------------------------------------------------------------------- evaluation
def greedy_makespan(dur: np.ndarray, slots: int, mode: str = "exact") -> float:
    """Makespan of greedy list scheduling: each duration, in order, to the slot that frees first.

    Equal durations: whole waves.  ``mode="lower"``: ``max(sum/slots, max)``, a lower bound on
    any schedule; ``mode="upper"`` (and past 300,000 CTAs): Graham's bound ``sum/slots +
    max·(1 - 1/slots)``, an upper bound on the greedy schedule."""
    n = len(dur)
    if n == 0:
        return 0.0
    slots = max(1, slots)
    if n <= slots:
        return float(dur.max())
    if float(dur.max()) == float(dur.min()):
        return float(-(-n // slots) * dur[0])
    if mode == "lower":
        return float(max(dur.sum() / slots, dur.max()))
    if mode == "upper" or n > 300_000:
        return float(dur.sum() / slots + dur.max() * (1 - 1 / slots))
    h = [0.0] * slots
    heapreplace = heapq.heapreplace
    for x in dur.tolist():
        heapreplace(h, h[0] + x)
    return float(max(h))


def _sm_time(pw: _PhaseWork, pr: Prepared, p: Params) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """SM time per CTA (one CTA's share of its SM with ``k`` resident) and each unit's time."""
    eff = p.mma_sync_eff if pr.mma_kind == "sync" else p.wgmma_eff
    mma = pw.mma_s / eff
    soft = pw.sfu_s + p.softmax_ops * pw.alu_exp / pr.fp32_rate
    units = {"tensor": mma, "sfu": soft, "smem": pw.smem_s, "sm_port": pw.l2_s}
    if not pw.heavy:
        return np.maximum(soft, pw.l2_s), units
    top = np.maximum(np.maximum(mma, soft), np.maximum(pw.smem_s, pw.l2_s))
    if pr.family == "fa3":
        t = top + p.fa3_exposed * np.minimum(mma, soft) if pr.overlap_ok else \
            np.maximum(mma + soft, top)
    else:
        t = np.maximum(top, (mma + soft) / pw.hide) + p.fa2_exposed * soft
    return t + pw.serial_s, units


def evaluate(pr: Prepared, p: Params, mode: str = "exact"
             ) -> tuple[float, str, dict[str, float], dict[str, float]]:
    """(time, binding resource, seconds by binding resource, seconds of each resource alone);
    ``mode`` as :func:`greedy_makespan`'s (bounds for the oracle's pruning)."""
    total = 0.0
    by: dict[str, float] = {}
    alone: dict[str, float] = {}
    launch = p.launch_us * 1e-6
    for pw, hb in zip(pr.phases, pr.hbm_bytes):
        if pw.n == 0:
            continue
        sm, units = _sm_time(pw, pr, p)
        fixed = p.cta_cycles / pr.clock if pw.heavy else 0.0
        lat = pw.rounds * pw.latency
        dur = np.maximum(pw.k * sm, lat) + fixed
        span = greedy_makespan(dur, pr.sm_count * pw.k, mode)
        hbm = hb / (pr.hbm_bw * p.hbm_eff)
        l2 = pw.l2_bytes / pr.l2_bw
        t = launch + max(span, hbm, l2)
        total += t
        sums = {r: float(v.sum()) / pr.sm_count for r, v in units.items()}
        sums.update(hbm=hbm, l2=l2, latency=float(lat.max()) if pw.n else 0.0)
        for r, v in sums.items():
            alone[r] = alone.get(r, 0.0) + v
        if span >= max(hbm, l2):
            if pw.n <= pr.sm_count * pw.k:    # one wave: what sets its longest CTA
                i = int(np.argmax(dur))
                parts = {u: pw.k * float(v[i]) for u, v in units.items()}
                parts["latency"] = float(lat[i])
                r = max(parts, key=lambda u: parts[u])
            else:
                r = max(units, key=lambda u: sums[u])
                if sums[r] < 0.5 * span:      # mostly memory latency, fixed costs and the tail
                    r = "latency"
        else:
            r = "hbm" if hbm >= l2 else "l2"
        by[r] = by.get(r, 0.0) + t
    bound = max(by, key=lambda r: by[r]) if by else "none"
    for r in RESOURCES:
        alone.setdefault(r, 0.0)
        by.setdefault(r, 0.0)
    return total, bound, by, alone
