"""Roofline time per wave, summed over waves, with the binding resource named.

A phase's CTAs run ``P = SMs x CTAs-per-SM`` at a time, in launch order (CTA i of a wave on SM
``i mod SMs``).  A wave lasts as long as its slowest resource:

* **hbm**: the bytes the L2 replay sends to or takes from HBM in the wave / HBM bandwidth;
* **l2**: every byte the wave's CTAs request from the L2 / the L2 bandwidth;
* per SM, for the CTAs it holds in the wave, the slowest of
  **sm_port** (bytes requested / one SM's port to the L2: its share of the measured L2
  bandwidth), **smem** (shared-memory bytes moved / 128 bytes per clock), **tensor** (tensor-core
  FLOPs / the SM's share of the dense peak; an FA2-style CTA with fewer than 4 warps on an SM
  reaches only that many of its 4 tensor cores) and **sfu** (exponentials / 16 per clock: the
  softmax's special-function units);
* per CTA, **latency** (Little's law: a CTA with ``B`` bytes in flight, its multi-buffered K/V
  tiles, draws at most ``B / latency``, so it needs at least ``bytes loaded x latency / B``,
  and at least one latency; the latency is the L2 hit latency for the wave's L2 hits and the
  DRAM latency for its misses, the replay's miss fraction of the wave weighting them, plus the
  TMA unit's own latency for FA3-style loads): why a few CTAs cannot draw the whole HBM
  bandwidth, and decoding splits the KV cache;

and the kernel's time is the sum over waves and phases.  Resources inside a wave overlap
perfectly (a roofline: a lower bound on time, not a cycle count); the wave boundary is where
tile and wave quantisation show.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .devices import Device
from .kernels import KernelConfig
from .l2 import Replay
from .traffic import Phase, Traffic, byte_coefficients, features, inflight_bytes, work_coefficients

__all__ = ["RESOURCES", "Timing", "cells", "latency_rounds", "phase_times", "phase_total",
           "roofline"]

RESOURCES = ("hbm", "l2", "sm_port", "smem", "tensor", "sfu", "latency")


@dataclass(frozen=True)
class Timing:
    """Predicted time and where it goes.

    ``by_resource``: seconds of the waves each resource binds (they add up to ``time_s``);
    ``alone``: seconds each resource would take if it were the only limit (sum over waves).
    """

    time_s: float
    bound_by: str
    waves: int
    by_resource: dict[str, float]
    alone: dict[str, float]


def cells(ph: Phase, S: int, P: int) -> tuple[np.ndarray, int]:
    """Per (wave, SM) sums of the phase's CTA features (:data:`~.traffic.FEATURES`), shape
    (waves·S, 6), and the number of waves; cached on the phase per wave size."""
    cache = ph.__dict__.setdefault("_cells", {})
    if (S, P) not in cache:
        n = ph.n
        nw = -(-n // P) if n else 0
        i = np.arange(n)
        cell = (i // P) * S + (i % P) % S
        F = features(ph)
        out = np.zeros((nw * S, F.shape[1]))
        for j in range(F.shape[1]):
            out[:, j] = np.bincount(cell, weights=F[:, j], minlength=nw * S)
        cache[(S, P)] = (out, nw)
    return cache[(S, P)]


def latency_rounds(ph: Phase, P: int, inflight: float | None) -> np.ndarray:
    """Per wave, the most round trips to memory one of its CTAs needs: ``max(1, loaded bytes /
    bytes in flight)`` over the wave's CTAs that load anything (0 for a wave that loads
    nothing); ``inflight`` None: one round trip per CTA.  Cached on the phase."""
    cache = ph.__dict__.setdefault("_rounds", {})
    key = (P, inflight)
    if key not in cache:
        n = ph.n
        nw = -(-n // P) if n else 0
        lb = ph.load_bytes.astype(np.float64)
        r = np.where(lb > 0, 1.0, 0.0)
        if inflight is not None:
            r = np.where(lb > 0, np.maximum(1.0, lb / inflight), 0.0)
        pad = np.zeros(nw * P)
        pad[:n] = r
        cache[key] = pad.reshape(nw, P).max(axis=1) if nw else pad
    return cache[key]


def _sm_times(ph: Phase, device: Device, cfg: KernelConfig, d: int, P: int
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per wave, the times of the resources that need no replay (l2, sm_port, smem, tensor,
    sfu; shape (waves, 5)), their maximum and the bytes the wave loads; cached on the phase
    (configs that differ only in stages or overlap share them)."""
    cache = ph.__dict__.setdefault("_sm_times", {})
    key = (device.name, P, cfg.algorithm, cfg.q, cfg.p, cfg.o, cfg.warps, cfg.dtype, d)
    if key in cache:
        return cache[key]
    S = device.sm_count
    assert S is not None  # (a device that passed require_model())
    C, nw = cells(ph, S, P)
    lc, sc = byte_coefficients(ph)
    fc, ec, mc = work_coefficients(ph, cfg, d)
    load = C @ lc
    req = load + C @ sc
    peak_sm = device.flops(cfg.dtype) / S
    frac: float | np.ndarray
    if cfg.algorithm == "fa3" or ph.name in ("combine", "pre"):
        frac = 1.0
    else:
        frac = np.minimum(1.0, C[:, 0] * cfg.warps / 4.0)
        frac = np.where(frac > 0, frac, 1.0)
    out = np.zeros((nw, 5))
    if nw:
        sm = np.stack([req / device.sm_l2_bw, (C @ mc) / device.smem_bw_per_sm,
                       (C @ fc) / (peak_sm * frac), (C @ ec) / device.sfu_rate_per_sm],
                      axis=1).reshape(nw, S, 4)
        out[:, 1:] = sm.max(axis=1)
        out[:, 0] = req.reshape(nw, S).sum(axis=1) / device.l2_bandwidth
    cache[key] = (out, out.max(axis=1) if nw else np.zeros(0),
                  load.reshape(nw, S).sum(axis=1) if nw else np.zeros(0))
    return cache[key]


def _latency(ph: Phase, device: Device, cfg: KernelConfig, P: int, miss: np.ndarray | None
             ) -> np.ndarray:
    """Per wave, the latency term: the wave's latency (L2 hit, DRAM for its ``miss`` fraction,
    plus TMA's for FA3-style loads) times its CTAs' most round trips."""
    rounds = latency_rounds(ph, P, inflight_bytes(ph, cfg))
    lat: float | np.ndarray = device.l2_hit_latency_s
    if miss is not None:
        lat = lat + miss * (device.dram_latency_s - device.l2_hit_latency_s)
    if cfg.algorithm == "fa3" and ph.name in ("main", "split"):
        lat = lat + device.tma_latency_s
    return lat * rounds


def phase_total(ph: Phase, device: Device, cfg: KernelConfig, d: int, P: int,
                hbm_read: np.ndarray | None = None, hbm_write: np.ndarray | None = None
                ) -> float:
    """``phase_times(...).max(axis=1).sum()`` computed from the cached per-wave maxima: the
    oracle's bounds call it for thousands of configs.  With ``hbm_read`` (and no replay) lower
    or upper bounds on the wave's HBM reads give lower or upper bounds on the phase's time
    (every term grows with the reads)."""
    _, bmax, wave_load = _sm_times(ph, device, cfg, d, P)
    if not len(bmax):
        return 0.0
    if hbm_read is None:
        return float(np.maximum(bmax, _latency(ph, device, cfg, P, None)).sum())
    rd = hbm_read
    assert device.hbm_bw is not None  # (a device that passed require_model())
    miss = np.minimum(1.0, rd / np.maximum(wave_load, 1.0))
    hbm = rd / device.hbm_bw if hbm_write is None else (rd + hbm_write) / device.hbm_bw
    return float(np.maximum(np.maximum(bmax, hbm), _latency(ph, device, cfg, P, miss)).sum())


def phase_times(ph: Phase, device: Device, cfg: KernelConfig, d: int, P: int,
                hbm_read: np.ndarray | None = None, hbm_write: np.ndarray | None = None
                ) -> np.ndarray:
    """Per-wave time of each resource: an array (waves, 7) in :data:`RESOURCES` order.

    ``hbm_read``/``hbm_write``: bytes per wave from the L2 replay (None: the HBM term is zero
    and every load is an L2 hit for the latency term, a lower bound without a replay).  Every
    per-SM amount is linear in the CTA features, so the per-SM sums are the features' sums times
    coefficients."""
    base, _, wave_load = _sm_times(ph, device, cfg, d, P)
    nw = len(base)
    out = np.zeros((nw, len(RESOURCES)))
    if not nw:
        return out
    out[:, 1:6] = base
    miss = None
    if hbm_read is not None:
        rd = np.asarray(hbm_read, dtype=np.float64)
        wr = np.zeros(nw) if hbm_write is None else np.asarray(hbm_write, dtype=np.float64)
        assert device.hbm_bw is not None  # (a device that passed require_model())
        out[:, 0] = (rd + wr) / device.hbm_bw
        miss = np.minimum(1.0, rd / np.maximum(wave_load, 1.0))
    out[:, 6] = _latency(ph, device, cfg, P, miss)
    return out


def roofline(traffic: Traffic, device: Device, waves_of: list[int],
             replay: Replay | None) -> Timing:
    """The kernel's predicted time from its phases and (if given) the L2 replay's HBM bytes
    per wave; without a replay the HBM term is left out (a lower bound, used for pruning)."""
    total = 0.0
    by = dict.fromkeys(RESOURCES, 0.0)
    alone = dict.fromkeys(RESOURCES, 0.0)
    nwaves = 0
    for k, (ph, P) in enumerate(zip(traffic.phases, waves_of)):
        rd = wr = None
        if replay is not None:
            rd, wr = replay.wave_read[k], replay.wave_write[k]
        t = phase_times(ph, device, traffic.config, traffic.d_pad, P, rd, wr)
        if not len(t):
            continue
        nwaves += len(t)
        wt = t.max(axis=1)
        arg = t.argmax(axis=1)
        total += float(wt.sum())
        for j, r in enumerate(RESOURCES):
            by[r] += float(wt[arg == j].sum())
            alone[r] += float(t[:, j].sum())
    bound = max(by, key=lambda r: by[r]) if total > 0 else "none"
    return Timing(total, bound, nwaves, by, alone)
