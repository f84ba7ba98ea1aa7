"""Predicted time of a named kernel's pass (``fwd``, ``bwd``, ``fwd+bwd``), every family attnio
models: ``standard`` (PyTorch's unfused attention), ``fa1``, ``fa2``/``sdpa``, ``fa3``.
``fa3``'s backward is FA3's own (:func:`~.kernels.fa3_bwd_config`, the ``fa3_bwd`` family)
followed by its dQ-convert kernel (:func:`dq_convert_kernel`); it is a prediction only: the
calibration set has no FA3 backward rows.

Flash families run the shipped configs (:mod:`.kernels`) through :func:`~.model.score`'s
pipeline (traffic from the two-level simulator, the L2 replay, :mod:`.timing`).  ``standard`` is
PyTorch's unfused attention as flash-attn's ``benchmarks/benchmark_flash_attention.py`` times it
(``attention_pytorch``): layout copies of q and k, ``baddbmm`` writing S, for causal a mask built
per call and added, ``softmax``, the ``einsum`` with V.  Its S/P traffic is the two-level
simulator's count of the standard schedule with whole-row tiles (one pass over S and P per phase,
:func:`standard_words`); the copies and the mask are PyTorch's additions, listed in
:func:`standard_kernels`.  Each of its kernels takes ``max(GEMM FLOPs / sustained rate, bytes /
sustained HBM bandwidth)`` plus a launch.

The FLOPs of a row convert between time and TFLOPs as flash-attn counts them
(:func:`flash_flops`): ``4·batch·heads·N²·d``, halved when causal, x2.5 for the backward.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..core.errors import ParameterError
from ..core.workload import Shape
from . import devices as _devices
from .devices import Device
from .kernels import KernelConfig, backward_config, fa1_config, named_config
from .timing import STREAM_HBM_EFF, Params, Prepared, evaluate, load_params

__all__ = ["KERNELS", "PASSES", "Row", "flash_flops", "pass_configs", "dq_convert_kernel", "predict", "prepare_row",
           "row_time", "standard_kernels", "standard_words"]

KERNELS = ("standard", "fa1", "fa2", "fa3", "sdpa")
PASSES = ("fwd", "bwd", "fwd+bwd")


def flash_flops(shape: Shape, pass_: str) -> float:
    """FLOPs as flash-attn's benchmark counts them (causal halves; the backward is 2.5x)."""
    f = 4.0 * shape.batch * shape.heads * shape.Nq * shape.Nkv * shape.d
    if shape.causal:
        f /= 2
    return f * {"fwd": 1.0, "bwd": 2.5, "fwd+bwd": 3.5}[pass_]


def pass_configs(kernel: str, dev: Device, shape: Shape, pass_: str, dtype: str,
                 page_size: int = 0) -> list[KernelConfig]:
    """The configs a flash kernel's pass launches, forward first.  ``page_size`` > 0: K/V in
    a paged cache (:func:`~.kernels.named_config`); flash-attn pages the forward's K/V only
    (its backward and FA1 take contiguous tensors)."""
    if page_size and (pass_ != "fwd" or kernel == "fa1"):
        raise ParameterError(f"page_size: a paged K/V cache is modelled for the forward pass "
                             f"of fa2 and fa3 only (flash-attn's backward takes contiguous "
                             f"K/V), got pass={pass_} kernel={kernel}", param="page_size")
    out = []
    if pass_ in ("fwd", "fwd+bwd"):
        out.append(fa1_config(dev, shape, dtype) if kernel == "fa1"
                   else named_config(kernel, dev, shape, dtype, page_size))
    if pass_ in ("bwd", "fwd+bwd"):
        if kernel == "fa1":
            out.append(fa1_config(dev, shape, dtype, backward=True))
        else:
            out.append(backward_config(kernel, dev, shape, dtype))
    return out


def dq_convert_kernel(shape: Shape, e: int) -> _Kernel:
    """FA3's backward ends with ``flash_bwd_convert_dq``: the fp32 dQaccum its main kernel added
    to with atomics (TMA reduce-add) read once, dQ written in the input type.  FA2's backward
    does the same (``run_flash_bwd_seqk_parallel`` in ``flash_bwd_launch_template.h``: the
    ``flash_bwd_dot_do_o`` kernel, the main kernel adding dQ to an fp32 ``dq_accum`` with
    atomics, then ``flash_bwd_convert_dq_kernel``).  Streamed at the flash kernels' HBM
    efficiency (:data:`~.timing.STREAM_HBM_EFF`)."""
    n = float(shape.n_heads) * shape.Nq * shape.d
    return _Kernel("convert dQ", 0, n * (4 + e))


# ---------------------------------------------------------------------- standard attention
def standard_words(shape: Shape) -> tuple[int, int, int]:
    """Words each phase of the two-level standard schedule moves with whole-row tiles (bm = Nq,
    bn = Nkv, bk = d, one-pass softmax) on the *dense* problem (PyTorch computes every score):
    (scores: Q, K read + S written, softmax: S read + P written, output: P, V read + O written),
    all heads.  Their sum is the simulator's closed form (held by a test)."""
    d, Nq, Nkv = shape.d, shape.Nq, shape.Nkv
    A = Nq * Nkv
    per = (d * (Nq + Nkv) + A, 2 * A, A + d * Nkv + Nq * d)
    return tuple(x * shape.n_heads for x in per)  # type: ignore[return-value]


@dataclass(frozen=True)
class _Kernel:
    name: str
    flops: float   # tensor FLOPs (GEMMs), 0 for memory kernels
    bytes: float


def standard_kernels(shape: Shape, e: int, backward: bool) -> list[_Kernel]:
    """PyTorch's kernels for one pass of ``attention_pytorch`` (module docstring)."""
    H, Hk = shape.n_heads, shape.n_kv_heads
    Nq, Nkv, d = shape.Nq, shape.Nkv, shape.d
    A = float(H) * Nq * Nkv
    q, kv = float(H) * Nq * d * e, float(Hk) * Nkv * d * e
    gemm = 2.0 * H * Nq * Nkv * d
    s1, s2, s3 = (w * e for w in standard_words(Shape(Nq, Nkv, d, batch=shape.batch,
                                                       heads=shape.heads,
                                                       kv_heads=shape.kv_heads)))
    if not backward:
        ks = [_Kernel("copy q", 0, 2 * q), _Kernel("copy k", 0, 2 * kv),
              _Kernel("baddbmm QK^T", gemm, s1)]
        if shape.causal:
            m = 4.0 * Nq * Nkv
            ks += [_Kernel("full mask", 0, m), _Kernel("triu", 0, 2 * m),
                   _Kernel("mask to dtype", 0, m + m / 2),
                   _Kernel("add mask", 0, 2 * A * e + A * e)]
        ks += [_Kernel("softmax", 0, s2), _Kernel("copy v", 0, 2 * kv),
               _Kernel("einsum PV", gemm, s3)]
        return ks
    return [_Kernel("dP = dO V^T", gemm, q + kv + A * e), _Kernel("dV = P^T dO", gemm,
                                                                    A * e + q + kv),
            _Kernel("softmax backward", 0, 3 * A * e),
            _Kernel("dQ = dS K", gemm, A * e + kv + q), _Kernel("dK = dS^T Q", gemm,
                                                               A * e + q + kv),
            _Kernel("copy dv", 0, 2 * kv), _Kernel("copy dq, dk", 0, 2 * q + 2 * kv),
            _Kernel("stack dqkv", 0, 2 * (q + 2 * kv))]


def _standard_time(dev: Device, kernels: list[_Kernel], dtype: str, p: Params,
                   hbm_eff: float | None = None) -> float:
    """Each kernel: a launch + max(GEMM FLOPs / sustained rate, bytes / sustained bandwidth);
    ``hbm_eff`` (default: the fitted unfused pattern's ``p.hbm_eff``)."""
    assert dev.hbm_bw is not None
    rate = dev.flops(dtype) * (p.wgmma_eff if dev.wgmma else p.mma_sync_eff)
    bw = dev.hbm_bw * (p.hbm_eff if hbm_eff is None else hbm_eff)
    return sum(p.launch_us * 1e-6 + max(k.flops / rate, k.bytes / bw) for k in kernels)


# ---------------------------------------------------------------------- rows
@dataclass
class Row:
    """A prepared prediction: everything parameter-free, so that :func:`row_time` is fast (the
    calibration evaluates it for every parameter vector it tries)."""

    kernel: str
    device: Device
    dtype: str
    flash: list[Prepared]
    standard: list[_Kernel]
    configs: list[KernelConfig]
    extra: tuple[_Kernel, ...] = ()   # memory-bound kernels after the flash ones (FA3's dQ convert)
    calls: int = 1                    # framework calls the pass makes (fwd+bwd: 2)


def prepare_row(device: str | Device, shape: Shape, kernel: str, pass_: str,
                dtype: str = "fp16", page_size: int = 0) -> Row:
    """Build the traffic, replay the L2 and collect the unit amounts of a kernel's pass
    (``page_size`` > 0: K/V in a paged cache of that many tokens per page, forward only)."""
    from .model import prepared

    dev = _devices.get(device).require_model()
    if kernel not in KERNELS:
        raise ParameterError(f"kernel must be one of {', '.join(KERNELS)}, got {kernel!r}",
                             param="kernel")
    if pass_ not in PASSES:
        raise ParameterError(f"pass must be one of {', '.join(PASSES)}, got {pass_!r}",
                             param="pass")
    dt = _devices.dtype_name(dtype)
    if kernel == "standard":
        if page_size:
            raise ParameterError(f"page_size: unfused attention takes contiguous K/V, got "
                                 f"{page_size}", param="page_size")
        if _devices.dtype_bytes(dt) != 2:
            raise ParameterError(f"dtype={dtype}: PyTorch's standard attention is modelled in "
                                 "fp16/bf16 only", param="dtype")
        ks = []
        if pass_ in ("fwd", "fwd+bwd"):
            ks += standard_kernels(shape, 2, False)
        if pass_ in ("bwd", "fwd+bwd"):
            ks += standard_kernels(shape, 2, True)
        return Row(kernel, dev, dt, [], ks, [], calls=2 if pass_ == "fwd+bwd" else 1)
    cfgs = pass_configs(kernel, dev, shape, pass_, dt, page_size)
    preps = []
    for c in cfgs:
        pr = prepared(dev, shape, c)
        if pr is None:
            raise ParameterError(f"{kernel} {pass_}: its config {c.short()} is infeasible on "
                                 f"{dev.name} for {shape.describe()}", param="kernel")
        preps.append(pr)
    extra = tuple(dq_convert_kernel(shape, _devices.dtype_bytes(dt))
                  for c in cfgs if c.algorithm == "fa3_bwd"
                  or (c.algorithm == "fa2_bwd" and not c.fa1))
    return Row(kernel, dev, dt, preps, [], cfgs, extra, 2 if pass_ == "fwd+bwd" else 1)


def row_time(row: Row, p: Params | None = None) -> float:
    """The predicted time (seconds) of a prepared row under parameters ``p`` (default: the
    stored ones of the device's generation)."""
    p = p or load_params(row.device)
    calls = p.call_us * 1e-6 * row.calls
    if row.standard:
        return calls + _standard_time(row.device, row.standard, row.dtype, p)
    t = calls + float(np.sum([evaluate(pr, p)[0] for pr in row.flash]))
    if row.extra:
        t += _standard_time(row.device, list(row.extra), row.dtype, p, STREAM_HBM_EFF)
    return t


def predict(device: str | Device, shape: Shape, kernel: str, pass_: str = "fwd",
            dtype: str = "fp16") -> float:
    """Predicted seconds of ``kernel``'s ``pass_`` on ``shape``."""
    return row_time(prepare_row(device, shape, kernel, pass_, dtype))
