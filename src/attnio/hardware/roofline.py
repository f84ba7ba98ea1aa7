"""Roofline time per wave, summed over waves, with the binding resource named.

A phase's CTAs run ``P = SMs x CTAs-per-SM`` at a time, in launch order (CTA i of a wave on SM
``i mod SMs``).  A wave lasts as long as its slowest resource:

* **hbm**: the bytes the L2 replay sends to or takes from HBM in the wave / HBM bandwidth;
* **l2**: every byte the wave's CTAs request from the L2 / the L2 bandwidth;
* per SM, for the CTAs it holds in the wave, the slowest of
  **sm_port** (bytes requested / one SM's port to the L2: why a few CTAs cannot draw the whole
  HBM bandwidth, and decoding splits the KV cache), **smem** (shared-memory bytes moved / 128
  bytes per clock), **tensor** (tensor-core FLOPs / the SM's share of the dense peak; an
  FA2-style CTA with fewer than 4 warps on an SM reaches only that many of its 4 tensor cores)
  and **sfu** (exponentials / 16 per clock: the softmax's special-function units);

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
from .traffic import Phase, Traffic, byte_coefficients, features, work_coefficients

__all__ = ["RESOURCES", "Timing", "cells", "phase_times", "roofline"]

RESOURCES = ("hbm", "l2", "sm_port", "smem", "tensor", "sfu")


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


def phase_times(ph: Phase, device: Device, cfg: KernelConfig, d: int, P: int,
                hbm_bytes: np.ndarray | None) -> np.ndarray:
    """Per-wave time of each resource: an array (waves, 6) in :data:`RESOURCES` order.

    ``hbm_bytes`` per wave (None: zero, for lower bounds without a replay).  Every amount is
    linear in the CTA features, so the per-SM sums are the features' sums times coefficients."""
    S = device.sm_count
    C, nw = cells(ph, S, P)
    out = np.zeros((nw, len(RESOURCES)))
    if not nw:
        return out
    lc, sc = byte_coefficients(ph)
    fc, ec, mc = work_coefficients(ph, cfg, d)
    req = C @ (lc + sc)
    peak_sm = device.flops(cfg.dtype) / S
    if cfg.algorithm == "fa3" or ph.name in ("combine", "pre"):
        frac = 1.0
    else:
        frac = np.minimum(1.0, C[:, 0] * cfg.warps / 4.0)
        frac = np.where(frac > 0, frac, 1.0)
    sm_times = np.stack([
        req / device.sm_l2_bw,
        (C @ mc) / device.smem_bw_per_sm,
        (C @ fc) / (peak_sm * frac),
        (C @ ec) / device.sfu_rate_per_sm,
    ], axis=1).reshape(nw, S, 4)
    out[:, 2:] = sm_times.max(axis=1)
    out[:, 1] = req.reshape(nw, S).sum(axis=1) / device.l2_bandwidth
    if hbm_bytes is not None:
        out[:, 0] = np.asarray(hbm_bytes, dtype=np.float64) / device.hbm_bw
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
        hbm = None
        if replay is not None:
            hbm = replay.wave_read[k] + replay.wave_write[k]
        t = phase_times(ph, device, traffic.config, traffic.d_pad, P, hbm)
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
