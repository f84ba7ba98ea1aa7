"""Feasibility of a kernel config on a device: shared memory, registers, CTAs per SM.

Closed forms, per CTA (e = element bytes, d/dv the rounded head dims, s = stages):

* **Shared memory.**  FA2-style (``fa2``, ``splitkv``): ``Q + s·(K + V)`` =
  ``(Br·d + s·Bc·(d + dv))·e`` (flash-attn ``kernel_traits.h``: ``kSmemSize = Q + 2·KV tile`` at
  s = 1), Q left out when ``q = regs`` (its buffer is reused for K, flash-attn's
  ``Share_Q_K_smem``: then ``max(Q, K + V)``).  FA3-style: ``Q + s·K + s·V`` (+ ``s·V`` again for
  fp8, whose V is transposed in shared memory) + the O epilogue tile beyond what it overlaps of
  V + barrier storage (flash-attn ``mainloop_fwd_sm90_tma_gmma_ws.hpp`` ``TensorStorage``,
  ``flash_fwd_kernel_sm90.h`` ``SharedStorage``).  ``p = smem`` adds P (``Br·Bc·e``), ``o = smem``
  the fp32 O accumulator (``Br·dv·4``).  ``fa3_bwd``: ``K + V + 2·Q + s·dO + s·dS`` (+ ``s·P``
  unless ``Mma_dKV_is_RS``, ``p = regs``) + the fp32 dQ accumulator ``Br·d·4`` (d < 256) + LSE
  and dPsum (flash-attn ``mainloop_bwd_sm90_tma_gmma_ws.hpp`` ``TensorStorage``).  Limit: the
  device's per-block opt-in maximum.
* **Registers per thread.**  FA2-style: each of the ``32·warps`` threads holds its share of the O
  accumulator ``Br·dv/threads`` and of S ``Br·Bc/threads`` (fp32; P is converted in place), Q's
  share ``Br·d/(2·threads)`` when ``q = regs``, plus :data:`FA2_REG_OVERHEAD`; limit 255.
  FA3-style: a consumer thread holds O ``dv/2``, S ``Bc/2`` and, with ``overlap`` and an
  fp16/bf16 P in registers, P ``Bc·e/8`` (an fp8 P is converted in place into S's registers),
  plus the overhead flash-attn's own tuning note counts
  (:data:`FA3_REGS`: 24 with 2 WGs, 32 with 3); the limit is the consumer warp groups'
  ``setmaxnreg`` budget (240 with 2 WGs, 160 with 3): Hopper's register reallocation moves the
  producer's registers to them (``ws = False``, no producer: the even share, at most 255).  ``fa3_bwd``: a consumer thread holds its share of the dK, dV
  accumulators ``2·Bc·d/(128·WGs)`` and of S and dP ``2·Br·Bc/(128·WGs)``, plus the same
  overhead, against the same budget (``flash_bwd_kernel_sm90.h``: 24/240 and 32/160).
* **CTAs per SM**: the least of shared memory (``smem_per_sm // (smem + 1 KiB reserved)``),
  registers (whole warps of 8-register granules), threads and the CTA limit; FA3-style kernels
  are one CTA per SM (``MinBlocksPerMultiprocessor = 1``, the register file fully handed out).

An infeasible config is reported with the resource and the amount over, never scored.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..core.workload import Shape
from .devices import Device
from .kernels import KernelConfig, head_dim_rounded

__all__ = ["FA2_REG_OVERHEAD", "FA3_REGS", "Feasibility", "KernelTables", "check",
           "fa3_register_budget", "kernel_tables", "registers_per_thread", "smem_bytes"]

#: Registers an FA2-style thread needs beyond its accumulators (addresses, loop state, the
#: softmax row statistics): an assumption, checked against flash-attn's shipped tiles and its
#: comment that 256 x 64 at d = 64 spills (docs/hardware.md).
FA2_REG_OVERHEAD = 32

#: FA3 consumer warp groups -> (producer setmaxnreg, consumer setmaxnreg, consumer overhead):
#: ``flash_fwd_kernel_sm90.h`` Load/MmaRegisterRequirement (TMA K/V) and the overheads of the
#: repository's ``AI/SM90_BLOCK_SIZE_TUNING.md`` (24 for 2 WGs, 32 for 3; 24 assumed for 1).
FA3_REGS = {1: (56, 256, 24), 2: (24, 240, 24), 3: (32, 160, 32)}

KiB = 1024


@dataclass(frozen=True)
class Feasibility:
    """Resources of one config on one device; ``why`` names the first limit exceeded."""

    feasible: bool
    why: str | None
    smem_bytes: int
    smem_limit_bytes: int
    regs_per_thread: int
    regs_limit: int
    ctas_per_sm: int
    ctas_limited_by: str


def _dims(cfg: KernelConfig, shape: Shape) -> tuple[int, int]:
    d = head_dim_rounded(cfg.algorithm, shape.d)
    return d, d


def smem_bytes(cfg: KernelConfig, shape: Shape) -> int:
    """Shared-memory bytes one CTA of ``cfg`` allocates (module docstring)."""
    d, dv = _dims(cfg, shape)
    e, Br, Bc, s = cfg.elem_bytes, cfg.Br, cfg.Bc, cfg.stages
    extra = (Br * Bc * e if cfg.p == "smem" else 0) + (Br * dv * 4 if cfg.o == "smem" else 0)
    a = cfg.algorithm
    if a in ("fa2", "splitkv"):
        q = Br * d * e
        kv = s * Bc * (d + dv) * e
        return (q + kv if cfg.q == "smem" else max(q, kv)) + extra
    if a == "fa3":
        v = s * Bc * dv * e
        vt = v if e == 1 else 0
        q = Br * d * e
        o_pad = max(0, Br * dv * cfg.out_bytes - v)   # smem_o overlaps smem_v
        barriers = 16 * (4 + 4 * s)
        return q + s * Bc * d * e + v + vt + o_pad + extra + barriers
    if a == "fa3_bwd":
        # flash-attn's CollectiveMainloopBwdSm90 TensorStorage: K, V; 2 stages of Q; ``s``
        # stages of dO and of dS (and of P unless Mma_dKV_is_RS, p="regs"); the fp32 dQ
        # accumulator (d < 256: dQacc_use_TMA); LSE and dPsum (2 stages, rows rounded to 64)
        ps = 0 if cfg.p == "regs" else s * Br * Bc * e
        dqacc = Br * d * 4 if d < 256 else 0
        stats = 2 * 4 * 2 * (-(-Br // 64) * 64)
        return (Bc * (d + dv) * e + 2 * Br * d * e + s * Br * dv * e + s * Br * Bc * e + ps
                + dqacc + stats + (Br * dv * 4 if cfg.o == "smem" else 0))
    # fa2_bwd: Q and dO (s stages), K and V, P and dS, L and D
    return e * (s * 2 * Br * d + Bc * (d + dv) + 2 * Br * Bc) + 8 * Br + extra


def fa3_register_budget(cfg: KernelConfig) -> tuple[int, int]:
    """(consumer setmaxnreg, usable registers after the overhead) of an FA3-style config.
    Without warp specialization (``ws = False``) there is no producer to take registers from:
    every thread gets the register file's even share, at most 255 (whole 8-register granules)."""
    _, cons, over = FA3_REGS[cfg.consumer_wgs]
    if not cfg.ws:
        cons = min(255, (65536 // cfg.threads) // 8 * 8)
    return cons, cons - over


def registers_per_thread(cfg: KernelConfig, shape: Shape) -> int:
    """Registers one (consumer) thread of ``cfg`` needs (module docstring)."""
    d, dv = _dims(cfg, shape)
    a = cfg.algorithm
    if a == "fa3":
        o = dv // 2 if cfg.o == "regs" else 0
        s = cfg.Bc // 2
        # with the intra-warp-group overlap the next S and this P live together; an fp8 P is
        # converted in place into S's own registers (4 per register), so only fp16/bf16 P adds
        p = cfg.Bc * cfg.elem_bytes // 8 if (cfg.p == "regs" and cfg.overlap
                                             and cfg.elem_bytes == 2) else 0
        _, _, over = FA3_REGS[cfg.consumer_wgs]
        return o + s + p + over
    if a == "fa3_bwd":
        # a consumer thread holds its share of the dK, dV accumulators and of S and dP
        t = cfg.mma_threads
        _, _, over = FA3_REGS[cfg.consumer_wgs]
        return -(-2 * cfg.Bc * d // t) + -(-2 * cfg.Br * cfg.Bc // t) + over
    t = cfg.threads
    if a == "fa2_bwd":
        acc = 2 * cfg.Bc * d                 # dK, dV accumulators
        sp = 2 * cfg.Br * cfg.Bc             # S and dP
        return -(-acc // t) + -(-sp // t) + FA2_REG_OVERHEAD
    o = -(-cfg.Br * dv // t) if cfg.o == "regs" else 0
    s = -(-cfg.Br * cfg.Bc // t)
    q = -(-cfg.Br * d // (2 * t)) if cfg.q == "regs" else 0
    return o + s + q + FA2_REG_OVERHEAD


def _fmt_kib(b: int) -> str:
    return f"{b / KiB:.1f} KiB"


def check(device: Device, cfg: KernelConfig, shape: Shape) -> Feasibility:
    """Shared memory, registers and occupancy of ``cfg`` for ``shape`` on ``device``."""
    # figures every device that passed require_model() has
    assert (device.smem_per_block is not None and device.max_regs_per_thread is not None
            and device.max_threads_per_sm is not None and device.smem_per_sm is not None
            and device.regs_per_sm is not None and device.max_ctas_per_sm is not None)
    smem = smem_bytes(cfg, shape)
    lim = int(device.smem_per_block)
    regs = registers_per_thread(cfg, shape)
    why = None
    if cfg.wgmma:
        regs_limit, _ = fa3_register_budget(cfg)
        if not device.wgmma:
            why = (f"wgmma: fa3-style kernels need warp-group MMAs (compute capability 9.0); "
                   f"{device.name} is {device.compute_capability}")
    else:
        regs_limit = int(device.max_regs_per_thread)
    if why is None and cfg.elem_bytes == 1 and device.tensor_flops.get("fp8") is None:
        why = f"dtype: {device.name} has no fp8 tensor cores"
    if why is None and smem > lim:
        why = (f"shared memory: {smem:,} B ({_fmt_kib(smem)}) > {lim:,} B ({_fmt_kib(lim)}) "
               f"per block, over by {smem - lim:,} B")
    if why is None and regs > regs_limit:
        what = (f"the {regs_limit} a consumer warp group gets by setmaxnreg"
                if cfg.wgmma else f"the {regs_limit} per-thread limit")
        why = f"registers: {regs} per thread > {what}, over by {regs - regs_limit}"
    if why is None and cfg.threads > device.max_threads_per_sm:
        why = f"threads: {cfg.threads} > {device.max_threads_per_sm} per SM"
    # occupancy
    by = {}
    by["shared memory"] = device.smem_per_sm // (smem + device.smem_reserved_per_block)
    if cfg.wgmma:
        by["registers"] = 1
    else:
        r8 = -(-min(regs, 255) // 8) * 8
        by["registers"] = device.regs_per_sm // (r8 * cfg.threads)
    by["threads"] = device.max_threads_per_sm // cfg.threads
    by["CTA limit"] = device.max_ctas_per_sm
    limited_by = min(by, key=lambda k: by[k])
    ctas = int(by[limited_by]) if why is None else 0
    if why is None and ctas < 1:
        why = f"occupancy: no CTA fits an SM ({limited_by})"
    return Feasibility(why is None, why, smem, lim, regs, regs_limit, ctas, limited_by)


@dataclass(frozen=True)
class KernelTables:
    """flash-attn's named tile tables on one device (``attnio gpu kernels``): one row per
    kernel, head dimension and mask, with the config's resources against the device's limits
    (:func:`check`)."""

    device: str
    dtype: str
    rows: tuple[dict, ...]


def kernel_tables(device: Device, *, dtype: str | None = None,
                  kernel: str | None = None) -> KernelTables:
    """The tile tables of ``kernel`` (default: every flash-attn kernel ``device`` runs in
    ``dtype``, default bf16: FA3 and FA2 on Hopper, FA2 elsewhere, only FA3 in fp8) with each
    config's feasibility on ``device``; a ParameterError when no kernel runs that dtype there."""
    from ..core.errors import ParameterError
    from .devices import dtype_bytes, dtype_name
    from .kernels import kernel_table

    dev = device.require_model()
    dt = dtype_name(dtype or "bf16")
    if kernel:
        names = [kernel]
    elif dtype_bytes(dt) == 1:   # only FA3 ships fp8 kernels
        names = ["fa3"] if dev.wgmma else []
    else:
        names = ["fa3", "fa2"] if dev.wgmma else ["fa2"]
    if not names:
        raise ParameterError(f"dtype={dt}: no flash-attn fp8 kernel runs on {dev.name} (FA3's "
                             "fp8 kernels need Hopper)", param="dtype")
    rows = []
    for name in names:
        for r in kernel_table(name, dev, dt):
            shp, cfg = r["shape"], r["config"]
            f = check(dev, cfg, shp)
            rows.append({"kernel": name, "d": r["d"], "causal": r["causal"],
                         "config": cfg.as_dict(), "short": cfg.short(), "feasible": f.feasible,
                         "why": f.why, "smem_bytes": f.smem_bytes,
                         "smem_limit_bytes": f.smem_limit_bytes,
                         "regs_per_thread": f.regs_per_thread, "regs_limit": f.regs_limit,
                         "ctas_per_sm": f.ctas_per_sm})
    return KernelTables(dev.name, dt, tuple(rows))
