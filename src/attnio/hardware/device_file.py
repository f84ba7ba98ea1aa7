"""A GPU described in a TOML file (``attnio gpu ... --device-file FILE.toml``): any GPU the model
can score, not only the presets.

Keys (units in the names; docs/devices.md, "Your own GPU", has two complete examples):

======================  ========  ==============================================================
key                     required  meaning (allowed range)
======================  ========  ==============================================================
name                    yes       a name for the device: letters, digits, ``.``, ``_``, ``-``
generation              yes       ``sm80``, ``sm86``, ``sm89``, ``sm90`` or ``sm100``
sm_count                yes       SMs (1 to 1024)
clock_mhz               yes       the SM clock the per-clock figures run at (100 to 5000)
smem_per_sm_kib         yes       shared memory per SM, KiB (16 to 1024)
smem_per_block_kib      yes       shared memory one CTA may opt into, KiB (16 to smem_per_sm)
l2_mib                  yes       L2 size, MiB (0.25 to 4096)
hbm_gb_s                yes       DRAM bandwidth, GB/s (1 to 100000)
[tensor_tflops]         yes       dense tensor TFLOP/s with FP32 accumulation: ``fp16``,
                                  ``bf16`` (at least one), ``fp8``, ``tf32`` (0.1 to 100000)
description             no        free text (up to 200 characters)
hbm_gb                  no        DRAM capacity, GB (0.1 to 100000)
regs_per_sm, max_regs_per_thread, max_threads_per_sm, max_ctas_per_sm
                        no        per-SM limits (default: the generation's, CUDA Programming
                                  Guide Tables 30-32)
sm_l2_bytes_per_clk, l2_hit_latency_clk, dram_latency_clk, tma_latency_clk
                        no        the memory system's microbenchmark figures (default: the
                                  generation's preset die, listed as ``assumed``)
smem_bytes_per_clk,     no        per SM per clock (default 128 and 16)
sfu_per_clk
======================  ========  ==============================================================

Everything is checked once, when the file is read: a missing or unknown key, a wrong type, a
value out of range, an unknown generation, a file that is not UTF-8 TOML (a binary file) or is
missing: one :class:`~attnio.core.errors.ParameterError` (``param="device_file"``) naming the
file, the key and the allowed range.
"""

from __future__ import annotations

import os
import re
from typing import Any

from ..core.errors import ParameterError
from . import devices as _devices
from .devices import GENERATIONS, Device, KiB, MiB

try:
    import tomllib  # novermin (guarded: the tomli backport below on 3.10)
except ModuleNotFoundError:  # pragma: no cover - Python 3.10: the tomli backport
    import tomli as tomllib

__all__ = ["KEYS", "MAX_BYTES", "listing", "load"]

MAX_BYTES = 64 * 1024

_INF = float("inf")

#: key -> (type: "int" | "float" | "str", low, high, required, meaning)
KEYS: dict[str, tuple[str, float, float, bool, str]] = {
    "name": ("str", 1, 40, True, "the device's name (validate and calibrate rows use it)"),
    "generation": ("str", 0, 0, True, "the architecture generation (compute capability)"),
    "sm_count": ("int", 1, 1024, True, "SMs"),
    "clock_mhz": ("float", 100, 5000, True, "SM clock, MHz"),
    "smem_per_sm_kib": ("int", 16, 1024, True, "shared memory per SM, KiB"),
    "smem_per_block_kib": ("int", 16, 1024, True, "shared memory per CTA (opt-in), KiB"),
    "l2_mib": ("float", 0.25, 4096, True, "L2 size, MiB"),
    "hbm_gb_s": ("float", 1, 100000, True, "DRAM bandwidth, GB/s"),
    "tensor_tflops": ("table", 0, 0, True, "dense tensor TFLOP/s per dtype"),
    "description": ("str", 0, 200, False, "free text"),
    "hbm_gb": ("float", 0.1, 100000, False, "DRAM capacity, GB"),
    "regs_per_sm": ("int", 1024, 1 << 20, False, "32-bit registers per SM"),
    "max_regs_per_thread": ("int", 16, 1024, False, "registers per thread"),
    "max_threads_per_sm": ("int", 32, 4096, False, "threads per SM"),
    "max_ctas_per_sm": ("int", 1, 128, False, "CTAs per SM"),
    "sm_l2_bytes_per_clk": ("float", 1, 1024, False, "one SM's L2 port, bytes/clock"),
    "l2_hit_latency_clk": ("float", 10, 10000, False, "L2 hit latency, SM clocks"),
    "dram_latency_clk": ("float", 10, 20000, False, "L2 miss latency, SM clocks"),
    "tma_latency_clk": ("float", 0, 10000, False, "a TMA load's extra latency, SM clocks"),
    "smem_bytes_per_clk": ("int", 16, 1024, False, "shared-memory bytes per clock per SM"),
    "sfu_per_clk": ("int", 1, 1024, False, "exp2 results per clock per SM"),
}
_DTYPES = ("fp16", "bf16", "fp8", "tf32")
_TFLOPS = (0.1, 100000.0)
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")

#: The memory system's figures a file may leave out: each generation's preset die.
_MEM_DEFAULT = {"sm80": "a100-80gb", "sm86": "rtx4090", "sm89": "rtx4090", "sm90": "h100-sxm",
                "sm100": "b200"}
_MEM_KEYS = ("sm_l2_bytes_per_clk", "l2_hit_latency_clk", "dram_latency_clk", "tma_latency_clk")


def _fail(where: str, key: str, what: str) -> ParameterError:
    return ParameterError(f"device_file {where}: key {key!r}: {what}", param="device_file")


def _range(kind: str, lo: float, hi: float) -> str:
    word = "an integer" if kind == "int" else "a number"
    return f"{word} in [{lo:g}, {hi:g}]"


def _short(v: Any) -> str:
    r = repr(v)
    return r if len(r) <= 40 else r[:37] + "..."


def _value(where: str, key: str, v: Any, kind: str, lo: float, hi: float) -> Any:
    if kind == "str":
        if not isinstance(v, str):
            raise _fail(where, key, f"must be a string, got {_short(v)}")
        return v
    ok = isinstance(v, int) if kind == "int" else isinstance(v, (int, float))
    if isinstance(v, bool) or not ok:
        raise _fail(where, key, f"must be {_range(kind, lo, hi)}, got {_short(v)} "
                                f"({type(v).__name__})")
    if not (lo <= v <= hi):   # NaN fails too
        raise _fail(where, key, f"must be {_range(kind, lo, hi)}, got {v!r}")
    return v


def _read(path: str | os.PathLike) -> tuple[str, dict[str, Any]]:
    where = os.fspath(path)
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_BYTES + 1)
    except FileNotFoundError:
        raise ParameterError(f"device_file {where}: no such file", param="device_file") from None
    except IsADirectoryError:
        raise ParameterError(f"device_file {where}: is a folder, not a TOML file",
                             param="device_file") from None
    except OSError as e:
        raise ParameterError(f"device_file {where}: cannot be read ({e.strerror or e})",
                             param="device_file") from None
    if len(data) > MAX_BYTES:
        raise ParameterError(f"device_file {where}: larger than {MAX_BYTES:,} bytes: not a "
                             "device file", param="device_file")
    if b"\0" in data:
        raise ParameterError(f"device_file {where}: a binary file (NUL byte at {data.index(0)})"
                             ": not a device file (TOML text)", param="device_file")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise ParameterError(f"device_file {where}: not UTF-8 text (byte {e.start}): not a "
                             "device file (TOML text)", param="device_file") from None
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        msg = " ".join(str(e).split())
        raise ParameterError(f"device_file {where}: not valid TOML ({msg})",
                             param="device_file") from None
    return where, doc


def load(path: str | os.PathLike) -> Device:
    """The :class:`~.devices.Device` a TOML file describes (module docstring), checked."""
    where, doc = _read(path)
    unknown = sorted(set(doc) - set(KEYS))
    if unknown:
        raise _fail(where, unknown[0], f"unknown key (known: {', '.join(KEYS)})")
    for key, (_, _, _, req, meaning) in KEYS.items():
        if req and key not in doc:
            raise _fail(where, key, f"missing ({meaning}; required keys: "
                                    f"{', '.join(k for k, v in KEYS.items() if v[3])})")
    vals: dict[str, Any] = {}
    for key, (kind, lo, hi, _, _) in KEYS.items():
        if key in doc and kind != "table":
            vals[key] = _value(where, key, doc[key], kind, lo, hi)
    name = vals["name"]
    if len(name) > 40 or not _NAME.match(name):
        raise _fail(where, "name", f"must be 1 to 40 letters, digits, '.', '_' or '-' (starting "
                                   f"with a letter or digit), got {_short(name)}")
    if name.lower() in _devices.names() or name.lower() in _devices.ALIASES:
        raise _fail(where, "name", f"{name!r} is a preset's name (`attnio gpu devices`); give "
                                   "the file's device another")
    gen = vals["generation"]
    if gen not in GENERATIONS:
        raise _fail(where, "generation", f"must be one of {', '.join(GENERATIONS)}, got "
                                         f"{_short(gen)}")
    if vals["smem_per_block_kib"] > vals["smem_per_sm_kib"]:
        raise _fail(where, "smem_per_block_kib", f"must be an integer in [16, "
                    f"{vals['smem_per_sm_kib']}] (at most smem_per_sm_kib), got "
                    f"{vals['smem_per_block_kib']}")
    tt = doc["tensor_tflops"]
    if not isinstance(tt, dict):
        raise _fail(where, "tensor_tflops", f"must be a table ([tensor_tflops] with keys "
                                            f"{', '.join(_DTYPES)}), got {_short(tt)}")
    flops: dict[str, float | None] = {k: None for k in _DTYPES}
    for k, v in tt.items():
        if k not in _DTYPES:
            raise _fail(where, f"tensor_tflops.{k}", f"unknown key (known: {', '.join(_DTYPES)})")
        flops[k] = float(_value(where, f"tensor_tflops.{k}", v, "float", *_TFLOPS)) * 1e12
    if flops["fp16"] is None and flops["bf16"] is None:
        raise _fail(where, "tensor_tflops.bf16", "missing (give fp16 or bf16: a number in "
                                                 f"[{_TFLOPS[0]:g}, {_TFLOPS[1]:g}])")
    flops["fp16"] = flops["fp16"] if flops["fp16"] is not None else flops["bf16"]
    flops["bf16"] = flops["bf16"] if flops["bf16"] is not None else flops["fp16"]
    if gen in ("sm80", "sm86") and flops["fp8"] is not None:
        raise _fail(where, "tensor_tflops.fp8", f"{gen} has no fp8 tensor cores (they start "
                    "at sm89); leave it out")
    cc = GENERATIONS[gen][0]
    lim = _devices._cc_limits(cc)
    for k in ("regs_per_sm", "max_regs_per_thread", "max_threads_per_sm", "max_ctas_per_sm"):
        if k in vals:
            lim[k] = vals[k]
    lim["smem_per_sm"] = vals["smem_per_sm_kib"] * KiB
    lim["smem_per_block"] = vals["smem_per_block_kib"] * KiB
    ref = _devices.get(_MEM_DEFAULT[gen])
    mem = {k: vals.get(k, getattr(ref, k)) for k in _MEM_KEYS}
    if gen != "sm90":
        mem["tma_latency_clk"] = vals.get("tma_latency_clk", 0.0)
    if mem["dram_latency_clk"] < mem["l2_hit_latency_clk"]:
        raise _fail(where, "dram_latency_clk", f"must be at least l2_hit_latency_clk "
                    f"({mem['l2_hit_latency_clk']:g}), got {mem['dram_latency_clk']:g}")
    defaulted = tuple(k for k in _MEM_KEYS if k not in vals and mem[k])
    notes = [f"Read from {where}."]
    if defaulted:
        notes.append(f"Not in the file, taken from the {ref.name} preset (assumed): "
                     f"{', '.join(defaulted)}.")
    file_prov: tuple[str, ...] = ("device_file",)
    prov: dict[str, tuple[str, ...]] = {k: file_prov for k in ("sm_count", "clock_hz", "smem_per_sm", "smem_per_block",
                                   "l2_bytes", "hbm_bw", "tensor_flops", "hbm_bytes")}
    prov.update({k: ("cuda_cc",) for k in ("regs_per_sm", "max_regs_per_thread",
                                           "max_threads_per_sm", "max_ctas_per_sm")
                 if k not in vals})
    return Device(
        name=name, description=vals.get("description", f"{name} (device file)"),
        fast_bytes=lim["smem_per_block"], kind="gpu", vendor="NVIDIA",
        arch=GENERATIONS[gen][1], compute_capability=cc, sm_count=vals["sm_count"],
        l2_bytes=int(round(vals["l2_mib"] * MiB)), l2_line_bytes=128, l2_sector_bytes=32,
        hbm_bytes=vals["hbm_gb"] * 1e9 if "hbm_gb" in vals else None,
        hbm_bw=vals["hbm_gb_s"] * 1e9, tensor_flops=flops, clock_hz=vals["clock_mhz"] * 1e6,
        smem_bytes_per_clk=vals.get("smem_bytes_per_clk", 128),
        sfu_per_clk=vals.get("sfu_per_clk", 16), wgmma=gen == "sm90",
        source=f"device file {where}", provenance=prov, assumed=defaulted,
        notes=tuple(notes), **lim, **mem)


def listing(device_file: str | os.PathLike | None = None) -> list[Device]:
    """The device table (``attnio gpu devices``): every preset of :mod:`.devices`, then the GPU
    ``device_file`` describes (:func:`load`) when given."""
    return [*_devices.all_devices(), *([load(device_file)] if device_file else [])]
