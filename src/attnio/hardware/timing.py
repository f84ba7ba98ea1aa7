"""The calibrated time model: what each unit sustains, how each kernel family overlaps it, how
CTAs reach the SMs.

The counts come from :mod:`.traffic` (the two-level simulator's per-CTA tile streams: tensor
FLOPs, exponentials, shared-memory and L2 bytes per CTA) and :mod:`.l2` (HBM bytes after the L2
replay); nothing is counted here.  This module turns them into time:

* **Sustained unit rates** (docs/devices.md, "Sustained rates"): tensor cores at the dense peak
  times an efficiency per instruction family (``mma_sync_eff`` for ``mma.sync``, FA1/FA2 and
  split-KV kernels and, on Ampere, cuBLAS; ``wgmma_eff`` for ``wgmma``, FA3 and cuBLAS on
  Hopper; FP8 at its own peak; an fa3 GEMM whose operands both come from shared memory no faster
  than their reads, :func:`ss_operand_floor`), the exponentials on the special-function units (16 per clock per
  SM), the softmax's other instructions (``softmax_ops`` FP32-pipe instructions per exponential:
  scale, max, subtract, row sum, conversion, rescale), shared memory at 128 B per clock per SM,
  each SM's port to the L2 (where FA3's forward multicasts K/V to a cluster of two CTAs,
  :func:`kv_multicast`, each CTA fetches half of every K/V tile), HBM at ``hbm_eff`` of the
  data sheet's bandwidth.
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
  scheduler hands out tiles in its order (longest first when causal) the same way.  In the
  last wave of equal CTAs (and in a grid of one wave) CTAs share their SM (per-SM processor
  sharing, :func:`shared_makespan`): the wave is spread over the SMs as CUDA's block scheduler
  does, and a CTA with fewer than ``k`` CTAs on its SM runs at the time the model computes for
  that many (alone: ``k = 1``, the whole SM).  A CTA costs
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
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from importlib import resources
from typing import Any

import numpy as np

from ..core.errors import ParameterError
from . import fits
from .devices import Device
from .kernels import KernelConfig
from .traffic import Phase, Traffic, features

__all__ = ["BOUNDS", "BREAKDOWN", "FITTED", "PAGE_OVERHEAD_BYTES", "PARAMS", "STREAM_HBM_EFF", "RESOURCES", "ss_operand_floor", "wgmma_gemms", "kv_multicast", "pingpong_partners", "p_store_s", "Params", "Prepared", "Timing", "evaluate",
           "generation", "greedy_makespan", "shared_makespan", "load_params", "prepare"]

#: The resources a time is attributed to (``Score.alone`` and ``Score.by_resource`` keys).
RESOURCES = ("hbm", "l2", "sm_port", "smem", "tensor", "sfu", "latency")

#: The additive split of a predicted time (``Timing.breakdown``, ``breakdown_s`` in JSON): the
#: terms sum to the time.  ``tensor``: the SMs' tensor-core time; ``softmax``: softmax time the
#: schedule does not hide behind the GEMMs; ``smem`` and ``sm_port``: time a CTA's
#: shared-memory or L2-port traffic adds beyond its GEMMs; ``step_overhead``: per-step barriers
#: and warp-group synchronisation on a CTA's critical path (and FA1's serial reduction);
#: ``latency``: load latency the stages (and the other resident CTAs) do not hide; ``cta``: the
#: per-CTA prologue and epilogue; ``tail``: the makespan beyond the SMs' mean busy time (the
#: last wave, unequal causal CTAs); ``hbm`` and ``l2``: a kernel whose memory time exceeds its
#: SMs' time is all ``hbm`` (or ``l2``), the SMs' work running beneath it; ``launch``: kernel
#: launches.  ``smem``, ``sm_port``, ``latency``,
#: ``hbm`` and ``l2`` are the memory stalls.
BREAKDOWN = ("tensor", "softmax", "step_overhead", "cta", "tail", "launch", "hbm", "l2", "smem",
             "sm_port", "latency")


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
    breakdown: dict[str, float] = field(default_factory=dict)

#: Parameter -> (lower, upper, unit, meaning).
BOUNDS: dict[str, tuple[float, float, str, str]] = {
    "mma_sync_eff": (0.05, 1.0, "fraction", "mma.sync's sustained share of the dense tensor peak"),
    "wgmma_eff": (0.05, 0.9, "fraction", "wgmma's sustained share of the dense tensor peak "
                  "(at most 0.9: no published Hopper GEMM sustains more of the dense peak)"),
    "hbm_eff": (0.3, 1.0, "fraction", "achievable share of the data sheet's HBM bandwidth"),
    "softmax_ops": (2.0, 16.0, "instr/exp", "FP32-pipe instructions of the softmax per exponential"),
    "fa2_exposed": (0.0, 1.0, "fraction", "FA2: share of the softmax other warps cannot hide"),
    "fa3_exposed": (0.0, 1.0, "fraction", "FA3: share of min(GEMM, softmax) ping-pong leaves"),
    "cta_cycles": (0.0, 50000.0, "SM clocks", "per-CTA prologue + epilogue beyond its loads"),
    "launch_us": (0.0, 10.0, "us", "per kernel launch (first CTA start to last CTA done, "
                  "beyond the CTAs' own time: launch latency, grid drain)"),
    "call_us": (0.0, 50.0, "us", "per framework call (PyTorch's dispatch of one attention "
                "call as flash-attn's benchmark times it): added to published rows only, not "
                "to a kernel's time"),
    "step_cycles": (0.0, 200.0, "SM clocks", "per K/V (Q) step: barriers, warp-group "
                    "synchronisation, pipeline waits (on the step's critical path)"),
    "wgmma_n0": (8.0, 64.0, "columns", "wgmma's per-instruction overhead, in N columns: an "
                 "m64nNk16 runs at N/(N + wgmma_n0) of the large-N rate"),
}

#: The parameters each generation fits (the others do not enter its kernels' times: Ampere has
#: no wgmma and no FA3).  At most 10 per generation.
FITTED: dict[str, tuple[str, ...]] = {
    "sm90": ("mma_sync_eff", "wgmma_eff", "hbm_eff", "softmax_ops", "fa2_exposed",
             "fa3_exposed", "cta_cycles", "launch_us", "call_us", "step_cycles"),
    "sm80": ("mma_sync_eff", "hbm_eff", "softmax_ops", "fa2_exposed", "cta_cycles",
             "launch_us", "call_us", "step_cycles"),
}

#: wgmma's per-instruction overhead in N columns, held (not fitted): the sm90 fit with it free
#: went to its lower bound, 8 columns (about 4 clocks per instruction at the m64nNk16 rate of
#: N/2 clocks); docs/devices.md, "Sustained rates".
WGMMA_N0 = 8.0

#: Achievable share of the data sheet's HBM bandwidth for a flash kernel's streaming reads of
#: contiguous K/V tiles (and its O writes): STREAM-like copies reach about 90% on A100 and H100
#: (docs/devices.md, "Sustained rates").  The fitted ``hbm_eff`` is unfused attention's pattern
#: (S and P written and read back by separate kernels).
STREAM_HBM_EFF = 0.90

#: A paged K/V cache (``page_size`` rows per page, gathered through a page table): each
#: contiguous run (:func:`stream_eff`) costs about this many bytes of bandwidth beyond its own
#: (partial DRAM bursts at its ends, one more request, its share of the page-table reads): the
#: streaming efficiency times ``run / (run + PAGE_OVERHEAD_BYTES)``.  An assumption.
PAGE_OVERHEAD_BYTES = 256.0

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
    step_cycles: float = 0.0
    wgmma_n0: float = WGMMA_N0
    call_us: float = 0.0

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
    steps: np.ndarray = field(default_factory=lambda: np.zeros(0))   # inner steps per CTA
    rescale: np.ndarray = field(default_factory=lambda: np.zeros(0))  # O-rescale FP32 ops
    stages: int = 1        # K/V (backward: Q/dO) buffers: loads issued this many steps ahead
    tile_s: float = 0.0    # one step's K (or Q) tile through the SM's L2 port (s)
    lead: float = 0.5      # share of a step between a buffer's release and its next use
    hbm_eff: float | None = None   # this phase's access pattern's HBM efficiency (None: fitted)
    #: fa3 forward with P in shared memory: each CTA's P stores (``write_P_to_smem``) at the
    #: SM's shared-memory rate (s): on a consumer group's path between its GEMM batches, with
    #: its softmax (:func:`pingpong_partners`)
    p_store_s: np.ndarray = field(default_factory=lambda: np.zeros(0))
    #: the CTA's warps (FA2-style heavy phases: how many of the SM's 4 tensor cores and warp
    #: schedulers it reaches alone, :func:`_occupancy`)
    warps: int = 4
    #: an ``mma.sync`` main phase: a CTA of ``w`` warps reaches ``min(4, w·k)`` tensor cores
    #: with ``k`` CTAs on its SM (``mma_s`` holds the figure at ``k``)
    tc_share: bool = False


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
    hiding: int = 2        # FA3: softmax-hiding mechanisms on (ping-pong, intra-WG overlap)
    #: FA3 forward: the other consumer groups a group can ping-pong with (``consumer_wgs - 1``
    #: with warp specialization, else 0); how many of them count depends on the softmax's
    #: length (:func:`pingpong_partners`)
    partners: int = 0
    inv_n: float = 0.0     # wgmma: sum over the GEMMs of (FLOP share / instruction N)
    sync_mult: float = 1.0  # per-step synchronisation rounds (2 without warp specialization)
    #: fa3 forward: each GEMM's (FLOP share, wgmma N, shared-memory operand floor): see
    #: :func:`wgmma_gemms` (empty: the ``inv_n`` form)
    gemms: tuple[tuple[float, int, float], ...] = ()


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
        mc = kv_multicast(cfg, tr.shape, tr.d_pad) if heavy else 1
        fetched = load   # through the L2: a cluster's CTAs each fetch 1/mc of every K/V tile
        if mc > 1:       # (the round trips, below, still wait for whole tiles)
            kv = steps * cfg.Bc * float(ph.row_bytes["K"] + ph.row_bytes["V"])
            fetched = load - np.minimum(load, kv) * (1 - 1 / mc)
        l2 = (fetched + store) / dev.sm_l2_bw
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
        resc = np.zeros(ph.n)
        if heavy and cfg.forward:   # the online softmax rescales O (Br x dv, fp32) every step
            resc = steps * float(cfg.Br) * tr.d_pad
        if heavy and tr.shape.causal:   # the steps that straddle the diagonal apply the mask
            resc = resc + MASK_OPS * cfg.Br * cfg.Bc * masked_steps(cfg, steps)
        phases.append(_PhaseWork(
            ph.name, ph.n, k, ph.flops / (peak_sm * frac), ph.exps / dev.sfu_rate_per_sm,
            ph.exps.astype(np.float64), ph.smem / dev.smem_bw_per_sm, l2, serial, rounds, lat,
            float(fetched.sum() + store.sum()), heavy, softmax_hiders(cfg, k),
            steps if heavy else np.zeros(ph.n), resc, cfg.stages,
            (cfg.Bc if cfg.forward else cfg.Br) * tr.d_pad * cfg.elem_bytes
            / (dev.sm_l2_bw * mc),
            0.5 / max(1, cfg.consumer_wgs) if cfg.wgmma else 0.5,
            stream_eff(cfg.page_size, tr.d_pad, cfg.elem_bytes, tr.shape.kv_heads or 1)
            if heavy else STREAM_HBM_EFF, p_store_s(cfg, steps if heavy else np.zeros(ph.n), dev),
            cfg.warps, heavy and not cfg.wgmma))
    fam = "fa3" if cfg.wgmma else "fa2"
    return Prepared(fam, "wgmma" if fam == "fa3" else "sync",
                    cfg.algorithm == "fa3" and (cfg.consumer_wgs >= 2 or cfg.overlap), phases,
                    list(hbm_per_phase), float(dev.clock_hz), S, float(dev.hbm_bw),
                    dev.l2_bandwidth, dev.dram_latency_s,
                    float(_fp32_per_clk(dev) * dev.clock_hz), hiding_mechanisms(cfg),
                    cfg.consumer_wgs - 1 if cfg.algorithm == "fa3" and cfg.ws else 0,
                    wgmma_inv_n(cfg, tr.d_pad), sync_rounds(cfg),
                    wgmma_gemms(cfg, tr.d_pad, dev))


def kv_multicast(cfg: KernelConfig, shape: Any, d: int) -> int:
    """CTAs that share each K/V tile load (TMA multicast in a thread-block cluster): 2 where
    FA3's forward launches clusters of two CTAs along M, else 1.

    flash-attn's sm90 forward (``hopper/flash_fwd_launch_template.h``) sets ``ClusterM = 2``
    when ``Enable_cluster`` (16-bit inputs with ``kHeadDim >= 128``, fp8 with ``kHeadDim ==
    192``; not causal, not local, no KV split, no paged K/V read without TMA, not varlen) and
    the query tiles (``ceil(seqlen_q x (PackGQA ? h/h_k : 1) / kBlockM)``) are even; the two
    CTAs of a cluster work on neighbouring query tiles of one head, and each issues half of
    every K and V tile with the cluster's multicast mask (``mcast_mask_kv``, ``tma_load_K/V
    .get_slice(cluster_local_block_id.x)`` in ``hopper/mainloop_fwd_sm90_tma_gmma_ws.hpp``),
    so the L2 delivers each tile once for both.  Each CTA's K/V bytes through the L2 (the
    ``sm_port`` term, whose figure is every SM's share of the L2's aggregate bandwidth) halve.
    ``d``: the kernel's head dimension (``kHeadDim``, the rounded ``d``).
    """
    if cfg.algorithm != "fa3" or not cfg.forward or cfg.splits > 1:
        return 1
    if not (d >= 128 if cfg.elem_bytes == 2 else d == 192):
        return 1
    if shape.causal or shape.window is not None or getattr(shape, "block_mask", None) is not None:
        return 1
    if cfg.page_size and cfg.page_size % cfg.Bc:   # paged K/V read without TMA
        return 1
    rows = shape.Nq * (shape.group if cfg.pack_gqa else 1)
    return 2 if -(-rows // cfg.Br) % 2 == 0 else 1


def p_store_s(cfg: KernelConfig, steps: np.ndarray, dev: Device) -> np.ndarray:
    """Seconds each CTA of an fa3 forward with P in shared memory (``p = smem``) spends storing
    P: ``Br x Bc`` elements per K/V step at the SM's shared-memory rate (128 B per clock), a
    lower bound (the partners' SS ``wgmma`` operand reads share that bandwidth).  In
    flash-attn's forward step (``fwd_step`` in ``hopper/mainloop_fwd_sm90_tma_gmma_ws.hpp``)
    a consumer group converts P and stores it (``write_P_to_smem``) after its softmax and
    before it signals the P-write barrier and issues its next GEMMs: the store is on the
    group's path between its batches, like the softmax.  Zero for other configs (RS keeps P
    in registers)."""
    if cfg.algorithm != "fa3" or not cfg.forward or cfg.p != "smem":
        return np.zeros(len(steps))
    return steps * (cfg.Br * cfg.Bc * cfg.elem_bytes / dev.smem_bw_per_sm)


def sync_rounds(cfg: KernelConfig) -> float:
    """Synchronisation rounds per step, in units of ``step_cycles``: 1; FA3 without warp
    specialization (``ws = False``) 2 (the consumers also run the producer's side of the
    pipeline: TMA issue, expect-tx, waiting on the full barrier, releasing the buffer); FA3 with
    P in shared memory (``p = smem``) one more (P stored, a proxy fence and a ``__syncwarp``
    before the PV wgmma may read it: flash-attn's ``arrive_on_P_write_barrier``)."""
    r = 1.0
    if cfg.algorithm == "fa3":
        r += (not cfg.ws) + (cfg.p == "smem")
    return r


#: FP32-pipe instructions per score of a step that straddles the causal diagonal (the index
#: comparison and the select of -inf).
MASK_OPS = 2.0


def masked_steps(cfg: KernelConfig, steps: np.ndarray) -> np.ndarray:
    """Steps of each CTA whose block straddles the causal diagonal: a block of ``Br`` rows
    (backward: ``Bc`` key rows) meets ``ceil(Br/Bc) + 1`` inner blocks on it (at most its
    steps)."""
    own, inner = (cfg.Br, cfg.Bc) if cfg.forward else (cfg.Bc, cfg.Br)
    return np.minimum(steps, -(-own // inner) + 1)


def softmax_hiders(cfg: KernelConfig, k: int) -> float:
    """FA2-style kernels: how many independent instruction streams share each warp scheduler
    (at least 1).  A CTA's warps meet at a barrier every K/V step, so they run their softmax
    at the same time: only other resident CTAs hide it, ``k`` CTAs each with ``min(warps,
    4)/4`` of the 4 schedulers (a 2-warp CTA reaches half of them)."""
    return max(1.0, k * min(cfg.warps, 4) / 4.0)


def hiding_mechanisms(cfg: KernelConfig) -> int:
    """FA3's mechanisms that hide the softmax behind a GEMM (FA3 paper, arXiv 2407.08608, §3.1
    and §3.2): ping-pong scheduling of the consumer warp groups (it needs warp
    specialization, ``ws``) and intra-warp-group pipelining (``overlap``: the next QKᵀ is
    issued before this step's softmax).  Ping-pong counts once per other consumer group (a
    group's softmax runs under each other group's GEMMs): 2 groups with overlap give 2
    (FA3's shipped d = 128), 3 groups at most 3: the time counts only the partners the
    softmax needs (:func:`pingpong_partners`, per CTA).  ``fa3_bwd``'s consumer groups run in lockstep
    (module docstring): 0.  (flash-attn at commit 0251105a turns its scheduler barrier off for
    fp16 at d = 256; counting that lowered the d = 256 rows' hiding and pushed the fit to a
    d = 128 kernel 19% too fast on the FA3 paper's ablation, so the model keeps the paper's
    description: ping-pong wherever warp specialization runs two or more consumer groups.)"""
    if cfg.algorithm != "fa3":
        return 0
    pp = cfg.consumer_wgs - 1 if cfg.ws else 0
    return pp + int(cfg.overlap)


def pingpong_partners(others: int, rho: np.ndarray) -> np.ndarray:
    """How many of a consumer group's ``others`` ping-pong partners hide its softmax, ``rho`` =
    its softmax time over its GEMMs' time (per K/V step, per CTA).

    FA3's scheduler barrier is a round robin (``warp_scheduler_barrier_arrive`` in
    ``hopper/mainloop_fwd_sm90_tma_gmma_ws.hpp`` signals group ``cur + 1`` modulo the groups):
    after issuing its GEMMs a group's next turn comes once each other group has issued its
    batch, and while the tensor cores are busy with those batches its softmax runs.  A softmax
    of ``rho`` batches is covered once ``ceil(rho)`` partners have passed; a further partner
    only makes the group wait for its turn.  So ``min(others, max(1, ceil(rho)))`` partners
    count (``others`` = 0: no ping-pong).  Two groups count their one partner as before; three
    groups count both where the softmax outlasts one partner's GEMMs (d = 64 on H100, rho
    about 1.4) and one where it does not (d = 128, rho about 0.7)."""
    if others <= 0:
        return np.zeros_like(rho)
    return np.minimum(float(others), np.maximum(1.0, np.ceil(rho - 1e-9)))


def wgmma_inv_n(cfg: KernelConfig, d: int) -> float:
    """Sum over a step's GEMMs of (their share of the FLOPs) / (their wgmma N dimension): the
    forward's QKᵀ has N = Bc, PV N = dv (half the FLOPs each); the backward's S and dP have
    N = Bc, dV, dK and dQ N = d (two and three fifths).  0 for ``mma.sync`` kernels (one
    fixed m16n8k16 shape: their operand traffic is in the shared-memory term)."""
    if not cfg.wgmma:
        return 0.0
    if cfg.forward:
        return 0.5 / cfg.Bc + 0.5 / d
    return 0.4 / cfg.Bc + 0.6 / d


def ss_operand_floor(n: int, e: int, dev: Device, dtype: str) -> float:
    """Shared-memory floor of one ``wgmma.m64nNkK`` whose A operand (64 x K) and B operand
    (N x K) both come from shared memory (SS), in units of its tensor time at the dense peak.

    An SS instruction reads ``(64 + N)·K·e`` bytes from shared memory (PTX ISA, ``wgmma``
    operand shapes: A is 64 x K, B is K x N, K·e = 32 bytes for 16-bit and 8-bit types) and does
    ``2·64·N·K`` FLOPs; the SM's shared memory delivers 128 B per clock (32 banks x 4 B; CUDA
    programming guide, compute capability 9.0).  On H100 at fp16 that is ``(64 + N)/(2N)``
    of the tensor time: above 1 (shared memory, not the tensor cores, sets the instruction's
    time) for N < 64, 1.17 at N = 48, 1.5 at N = 32, 2.5 at N = 16.  An RS instruction (A from
    registers) reads only B, ``N·K·e`` bytes: half the tensor time, never binding on H100."""
    assert dev.sm_count is not None and dev.clock_hz is not None
    peak_sm = dev.flops(dtype) / dev.sm_count
    k_elems = 32 // e   # K·e = 32 bytes
    t_smem = (64 + n) * k_elems * e / dev.smem_bw_per_sm
    t_mma = 2.0 * 64 * n * k_elems / peak_sm
    return t_smem / t_mma


def wgmma_gemms(cfg: KernelConfig, d: int, dev: Device) -> tuple[tuple[float, int, float], ...]:
    """An fa3 forward step's two GEMMs as (FLOP share, wgmma N, shared-memory floor): QKᵀ has
    N = Bc and reads Q from shared memory (flash-attn's ``MmaQK_is_RS = false``, SS); PV has
    N = dv and reads P from registers (RS, ``p = regs``: no floor) or from shared memory (SS,
    ``p = smem``).  The floor (:func:`ss_operand_floor`) bounds each GEMM's time below by its
    operands' shared-memory reads; empty for other families (their ``inv_n`` form)."""
    if cfg.algorithm != "fa3":
        return ()
    e = cfg.elem_bytes
    qk = ss_operand_floor(cfg.Bc, e, dev, cfg.dtype)
    pv = ss_operand_floor(d, e, dev, cfg.dtype) if cfg.p == "smem" else 0.0
    return ((0.5, cfg.Bc, qk), (0.5, d, pv))


def stream_eff(page_size: int | None, d: int, e: int, kv_heads: int = 1) -> float:
    """HBM efficiency of a flash kernel's K/V reads: contiguous streaming
    (:data:`STREAM_HBM_EFF`), or paged with ``page_size`` rows per page, each contiguous run
    costing :data:`PAGE_OVERHEAD_BYTES` more.  flash-attn's (and vLLM's) paged cache is laid
    out ``[pages, page_size, kv_heads, d]``: one KV head's rows of a page are ``d·e``-byte
    runs ``kv_heads·d·e`` apart, so a run is one row when there are several KV heads, the
    whole page (``page_size·d·e``) with one."""
    if not page_size:
        return STREAM_HBM_EFF
    run = float(d * e) * (page_size if kv_heads <= 1 else 1)
    return STREAM_HBM_EFF * run / (run + PAGE_OVERHEAD_BYTES)


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
    buf = np.ascontiguousarray(dur, dtype=np.float64).tobytes()
    if n <= GREEDY_CACHED_CTAS:
        return _greedy_exact(buf, slots)
    return _greedy_exact.__wrapped__(buf, slots)


#: Grids of at most this many CTAs have their exact greedy makespan cached (128 of them: at
#: most 20 MB of keys).
GREEDY_CACHED_CTAS = 20_000


@functools.lru_cache(maxsize=128)
def _greedy_exact(buf: bytes, slots: int) -> float:
    """:func:`greedy_makespan`'s heap, cached on the durations' bytes: a tune meets the same
    durations again (the oracle's two refinements of a config differ in HBM bytes, not in CTA
    times, and configs differing only where the SMs do not see it: about 4 in 5 calls)."""
    h = [0.0] * slots
    heapreplace = heapq.heapreplace
    for x in np.frombuffer(buf, dtype=np.float64).tolist():
        heapreplace(h, h[0] + x)
    return float(max(h))


def shared_makespan(dur: np.ndarray, sms: int, k: int,
                    at: Callable[[int, np.ndarray], np.ndarray] | None = None,
                    mode: str = "exact") -> float:
    """Makespan of CTAs on ``sms`` SMs of ``k`` slots each where a CTA's speed is set by how
    many CTAs share its SM at the time (per-SM processor sharing) in the last wave.

    ``dur``: each CTA's time with ``k`` CTAs on its SM (every slot busy), in launch order;
    ``at(j, idx)``: the times of CTAs ``idx`` with ``j < k`` on their SM (each clamped to
    ``[j/k·dur, dur]``: a CTA with fewer neighbours is never slower, and an SM never does more
    work per second than with ``k``).  A CTA with ``j`` on its SM advances by ``1/at(j)`` of its
    work per second, so it speeds up as its neighbours finish.

    CUDA's block scheduler spreads a grid's CTAs over the SMs (one per SM before a second on any)
    and gives each later CTA the slot that frees first.  Where every CTA takes the same time
    (non-causal grids) the slots free together at each wave's end: ``waves - 1`` full waves at
    ``dur``, then the last wave's CTAs spread over the SMs (CTA ``t`` of it on SM ``t mod sms``)
    and share them: ``at(1)``, the whole SM, for a CTA alone in a last wave of fewer CTAs than
    SMs.  One wave of unequal CTAs (causal) is spread the same way and shares its SMs to the
    end.  Several waves of unequal CTAs: :func:`greedy_makespan` over ``sms·k`` slots at
    ``dur`` (every CTA at its ``k``-share).  Which CTAs share an SM in such a tail turns on
    ties between slots: a model that follows them (tried, docs/hardware.md section 9a) jumps
    by 0.2-0.8% when a parameter moves by 1e-5 of its range, which stalls the fit, so the tail
    of unequal waves keeps every CTA at its ``k``-share.

    ``mode`` as :func:`greedy_makespan`'s where it is used; the shared waves are exact in every
    mode (a valid lower and upper bound of themselves) but ``mode="upper"`` on one wave of
    unequal CTAs: the longest CTA's ``dur``."""
    n = len(dur)
    if k <= 1 or at is None or n == 0:
        return greedy_makespan(dur, sms * max(1, k), mode)
    hi = float(dur.max())
    equal = hi == float(dur.min())
    if n > sms * k and not equal:
        return greedy_makespan(dur, sms * k, mode)
    if mode == "upper" and not equal:   # one wave: sharing never slows a CTA
        return hi
    slots = sms * k
    waves = -(-n // slots)
    first = (waves - 1) * slots
    slot = np.arange(n - first)   # the last wave: CTA first + t on slot t, SM t mod sms
    sm, pos = slot % sms, slot // sms
    R = np.zeros((sms, k))
    R[sm, pos] = 1.0
    idx = np.zeros((sms, k), dtype=np.intp)
    idx[sm, pos] = first + slot
    flat = idx.ravel()
    base = dur[flat].reshape(sms, k)
    table = {k: base}   # the occupancies met, computed when first met (equal CTAs: one or two)

    def level(j: int) -> np.ndarray:
        if j not in table:
            table[j] = np.minimum(base, np.maximum(at(j, flat).reshape(sms, k), base * (j / k)))
        return table[j]
    alive = R > 0
    t = np.zeros(sms)
    while True:
        occ = alive.sum(1)
        if not occ.any():
            break
        D = np.ones((sms, k))
        for j in np.unique(occ[occ > 0]).tolist():
            on = occ == j
            D[on] = level(j)[on]
        ttf = np.where(alive, R * D, np.inf)
        dt = np.where(occ > 0, ttf.min(1), 0.0)
        t += dt
        R = np.where(alive, R - dt[:, None] / D, 0.0)
        alive &= ttf > dt[:, None]
    return (waves - 1) * hi + float(t.max())


def _occupancy(pw: _PhaseWork, j: int, idx: np.ndarray) -> _PhaseWork:
    """CTAs ``idx`` of ``pw`` as they run with ``j`` CTAs on their SM (``pw`` holds them with
    ``pw.k``): an ``mma.sync`` CTA of ``w`` warps reaches ``min(4, w·j)`` of the SM's tensor
    cores, and only the other CTAs' warps hide its softmax (:func:`softmax_hiders`)."""
    def cut(a: np.ndarray) -> np.ndarray:
        return a[idx] if len(a) == pw.n else a
    scale = 1.0
    if pw.tc_share:
        scale = min(1.0, pw.warps * pw.k / 4.0) / min(1.0, pw.warps * j / 4.0)
    return replace(
        pw, n=len(idx), k=j, mma_s=cut(pw.mma_s) * scale, sfu_s=cut(pw.sfu_s),
        alu_exp=cut(pw.alu_exp), smem_s=cut(pw.smem_s), l2_s=cut(pw.l2_s),
        serial_s=cut(pw.serial_s), rounds=cut(pw.rounds), steps=cut(pw.steps),
        rescale=cut(pw.rescale), p_store_s=cut(pw.p_store_s),
        hide=max(1.0, j * min(pw.warps, 4) / 4.0))


def _sm_time(pw: _PhaseWork, pr: Prepared, p: Params
             ) -> tuple[np.ndarray, dict[str, np.ndarray], dict[str, np.ndarray]]:
    """SM time per CTA (one CTA's share of its SM with ``k`` resident), each unit's time, and
    that time's split (tensor, softmax, smem, sm_port: summing to it without FA1's serial
    work)."""
    eff = p.mma_sync_eff if pr.mma_kind == "sync" else p.wgmma_eff
    mma = pw.mma_s / eff
    if pr.gemms and pw.heavy:   # fa3: each GEMM's instruction shape and shared-memory floor
        mma = pw.mma_s / eff * sum(sh * max(1.0, floor) * (1.0 + p.wgmma_n0 / n)
                                   for sh, n, floor in pr.gemms)
    elif pr.inv_n and pw.heavy:   # wgmma's instruction shape (docs/devices.md)
        mma = mma * (1.0 + p.wgmma_n0 * pr.inv_n)
    soft = pw.sfu_s + (p.softmax_ops * pw.alu_exp + pw.rescale) / pr.fp32_rate
    units = {"tensor": mma, "sfu": soft, "smem": pw.smem_s, "sm_port": pw.l2_s}
    zero = np.zeros(pw.n)
    if not pw.heavy:
        t = np.maximum(soft, pw.l2_s)
        return t, units, {"softmax": np.minimum(soft, t), "sm_port": t - np.minimum(soft, t)}
    # the largest unit sets the step (the others run beneath it): its time is named after it
    top = np.maximum(np.maximum(mma, soft), np.maximum(pw.smem_s, pw.l2_s))
    t_top = mma >= np.maximum(np.maximum(soft, pw.smem_s), pw.l2_s)
    s_top = ~t_top & (soft >= pw.smem_s) & (soft >= pw.l2_s)
    m_top = ~t_top & ~s_top & (pw.smem_s >= pw.l2_s)
    split = {"tensor": np.where(t_top, top, zero), "softmax": np.where(s_top, top, zero),
             "smem": np.where(m_top, top, zero),
             "sm_port": np.where(~t_top & ~s_top & ~m_top, top, zero)}
    if pr.family == "fa3":
        # each hiding mechanism leaves sqrt(fa3_exposed) of what the others leave exposed:
        # two (FA3's two ping-ponged groups with intra-group overlap), fa3_exposed of
        # min(GEMM, softmax); one, its square root; none, all of it
        hid: float | np.ndarray = pr.hiding
        if pr.partners > 1:   # ping-pong partners beyond the first count where needed
            # what the partners' batches must cover: the group's softmax and, with P in
            # shared memory, its P stores (both between the group's GEMM batches)
            busy = soft + pw.p_store_s if len(pw.p_store_s) else soft
            rho = np.divide(busy, mma, out=np.zeros_like(soft), where=mma > 0)
            hid = pr.hiding - pr.partners + pingpong_partners(pr.partners, rho)
        x = np.where(np.asarray(hid) > 0, p.fa3_exposed ** (np.asarray(hid) / 2.0), 1.0)
        extra = x * np.minimum(mma, soft)
    else:   # other resident warps hide the softmax; fa2_exposed of it takes issue slots
        extra = np.maximum(top, (mma + soft) / pw.hide) - top + p.fa2_exposed * soft
    split["softmax"] = split["softmax"] + extra
    return top + extra + pw.serial_s, units, split


def _cta_durations(pw: _PhaseWork, pr: Prepared, p: Params
                   ) -> tuple[np.ndarray, dict[str, np.ndarray], dict[str, np.ndarray]]:
    """(each CTA's time on its slot, unit times, the additive split of that time).

    A CTA's slot time is the largest of: its share of the SM (``k`` CTAs interleave their
    steps: ``k`` times its unit time), its critical path (its steps one after another, each
    with the per-step synchronisation ``step_cycles`` and the load latency its ``stages`` do
    not cover), and Little's law's bound on its loads; plus its prologue and epilogue."""
    sm, units, split = _sm_time(pw, pr, p)
    k = pw.k
    thr = k * sm
    fixed = p.cta_cycles / pr.clock if pw.heavy else 0.0
    lat_bound = pw.rounds * pw.latency
    if pw.heavy:
        sync = pr.sync_mult * p.step_cycles / pr.clock
        n = np.maximum(pw.steps, 1.0)
        c = sm / n + sync   # one step on the critical path
        # a load (its latency plus its tile's transfer through the SM's L2 port) is issued
        # (stages - 1 + lead) steps before its use: K and V have their own buffers, so even
        # one stage overlaps a K load with the PV GEMM (lead = 1/2); FA3's consumer groups
        # ping-pong, so K is released only after the last group's QK^T (lead = 1/(2 groups))
        expo = np.maximum(0.0, pw.latency + pw.tile_s - (pw.stages - 1 + pw.lead) * c
                          ) * (pw.steps > 0)
        chain = sm + pw.steps * (sync + expo)
        sync_part = pw.steps * sync
    else:
        chain = sm
        sync_part = np.zeros(pw.n)
    body = np.maximum(np.maximum(thr, chain), lat_bound)
    parts: dict[str, np.ndarray] = {r: k * v for r, v in split.items()}
    parts["step_overhead"] = k * pw.serial_s
    # the critical path beyond the SM share: synchronisation first, then exposed latency
    beyond = np.maximum(0.0, chain - thr)
    s_share = np.minimum(beyond, sync_part)
    parts["step_overhead"] = parts["step_overhead"] + s_share
    lat_part = beyond - s_share
    lat_part = lat_part + np.maximum(0.0, body - np.maximum(thr, chain))
    parts["latency"] = lat_part
    parts["cta"] = np.full(pw.n, fixed)
    return body + fixed, units, parts


def evaluate(pr: Prepared, p: Params, mode: str = "exact",
             breakdown: dict[str, float] | None = None
             ) -> tuple[float, str, dict[str, float], dict[str, float]]:
    """(time, binding resource, seconds by binding resource, seconds of each resource alone);
    ``mode`` as :func:`greedy_makespan`'s (bounds for the oracle's pruning).  ``breakdown``, if
    given, is filled with the additive split of :data:`BREAKDOWN` (summing to the time)."""
    total = 0.0
    by: dict[str, float] = {}
    alone: dict[str, float] = {}
    launch = p.launch_us * 1e-6
    split = {r: 0.0 for r in BREAKDOWN} if breakdown is not None else None
    for pw, hb in zip(pr.phases, pr.hbm_bytes):
        if pw.n == 0:
            continue
        dur, units, parts = _cta_durations(pw, pr, p)
        slots = pr.sm_count * pw.k

        def at(j: int, idx: np.ndarray, pw: _PhaseWork = pw) -> np.ndarray:
            return _cta_durations(_occupancy(pw, j, idx), pr, p)[0]
        span = shared_makespan(dur, pr.sm_count, pw.k, at, mode)
        hbm = hb / (pr.hbm_bw * (pw.hbm_eff if pw.hbm_eff is not None else p.hbm_eff))
        l2 = pw.l2_bytes / pr.l2_bw
        t = launch + max(span, hbm, l2)
        total += t
        if split is not None and max(hbm, l2) > span:
            # memory-bound: the SMs' work runs beneath the memory time, which is all named
            split["launch"] += launch
            split["hbm" if hbm >= l2 else "l2"] += max(hbm, l2)
        elif split is not None:
            split["launch"] += launch
            mean = 0.0
            one_wave = pw.n <= slots   # the longest CTA is the time: its own split
            i = int(np.argmax(dur)) if one_wave else -1
            # one wave: the longest CTA's split, scaled to the span where it ran with fewer
            # CTAs on its SM at the end (shared_makespan)
            shrink = min(1.0, span / float(dur[i])) if one_wave and dur[i] > 0 else 1.0
            for r, arr in parts.items():
                x = float(arr[i]) * shrink if one_wave else float(arr.sum()) / slots
                split[r] += x
                mean += x
            split["tail"] += span - mean
        sums = {r: float(v.sum()) / pr.sm_count for r, v in units.items()}
        lat = pw.rounds * pw.latency
        sums.update(hbm=hbm, l2=l2, latency=float(lat.max()) if pw.n else 0.0)
        for r, v in sums.items():
            alone[r] = alone.get(r, 0.0) + v
        if span >= max(hbm, l2):
            if pw.n <= pr.sm_count * pw.k:    # one wave: what sets its longest CTA
                i = int(np.argmax(dur))
                pp = {u: pw.k * float(v[i]) for u, v in units.items()}
                pp["latency"] = float(lat[i])
                r = max(pp, key=lambda u: pp[u])
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
    if breakdown is not None and split is not None:
        breakdown.update(split)
    return total, bound, by, alone
