"""Hardware presets: the fast-memory size of common devices, in bytes, and its size in words.

The model counts words (one number each, whatever its dtype), so a preset's bytes are divided by
the bytes per element of the dtype: an A100's 164 KiB of shared memory holds 83,968 fp16 words.

>>> get("a100").words(2)
83968
>>> words_for(196608, "float32")
49152
"""

from __future__ import annotations

from dataclasses import dataclass

from ..core.checks import check_int
from ..core.errors import ParameterError, UnknownNameError

__all__ = ["DTYPE_BYTES", "Device", "dtype_bytes", "get", "names", "words_for"]

KiB, MiB = 1024, 1024 * 1024

DTYPE_BYTES = {
    "float64": 8, "fp64": 8, "double": 8,
    "float32": 4, "fp32": 4, "float": 4, "tf32": 4,
    "float16": 2, "fp16": 2, "half": 2, "bfloat16": 2, "bf16": 2,
    "float8": 1, "fp8": 1, "int8": 1,
}


@dataclass(frozen=True)
class Device:
    """A fast memory of ``fast_bytes`` bytes (what one tile schedule can use)."""

    name: str
    fast_bytes: int
    description: str
    source: str

    def words(self, dtype: int | str = 2) -> int:
        """Words of the given dtype (bytes per element, or a dtype name) that fit."""
        return self.fast_bytes // dtype_bytes(dtype)


_DEVICES = {
    d.name: d
    for d in (
        # NVIDIA A100 (compute capability 8.0): 192 KiB of combined L1/shared memory per SM, of
        # which at most 164 KiB can be configured as shared memory per SM (163 KiB usable by one
        # thread block).  We use 164 KiB.  Source: NVIDIA A100 Tensor Core GPU Architecture
        # whitepaper (2020), "L1 data cache and shared memory"; CUDA C++ Programming Guide,
        # "Compute capability 8.0" (maximum shared memory per SM 164 KB).
        Device("a100", 164 * KiB, "NVIDIA A100: shared memory per SM (164 KiB of the 192 KiB L1)",
               "NVIDIA A100 architecture whitepaper; CUDA Programming Guide, CC 8.0"),
        # NVIDIA H100 (compute capability 9.0): 256 KiB of combined L1/shared memory per SM, up to
        # 228 KiB of it as shared memory per SM (227 KiB per thread block).  Source: NVIDIA H100
        # Tensor Core GPU Architecture whitepaper (2022); CUDA C++ Programming Guide, CC 9.0.
        Device("h100", 228 * KiB, "NVIDIA H100: shared memory per SM (228 KiB)",
               "NVIDIA H100 architecture whitepaper; CUDA Programming Guide, CC 9.0"),
        # A typical recent x86 core: 48 KiB L1 data cache per core (Intel Golden Cove / Sapphire
        # Rapids P-cores, Ice Lake).  Source: Intel 64 and IA-32 Architectures Optimization
        # Reference Manual, cache parameters of Golden Cove.
        Device("cpu-l1d", 48 * KiB, "typical CPU core L1 data cache (48 KiB)",
               "Intel Optimization Reference Manual (Golden Cove L1d 48 KiB)"),
        # The same cores' private L2: 2 MiB (Golden Cove / Sapphire Rapids; Raptor Cove).  Source:
        # Intel Optimization Reference Manual, Golden Cove L2 2 MiB per core.
        Device("cpu-l2", 2 * MiB, "typical CPU core L2 cache (2 MiB)",
               "Intel Optimization Reference Manual (Golden Cove L2 2 MiB)"),
    )
}


def names() -> list[str]:
    """The preset names."""
    return sorted(_DEVICES)


def get(name: str | Device) -> Device:
    """The preset called ``name`` (UnknownNameError suggests close names)."""
    if isinstance(name, Device):
        return name
    try:
        return _DEVICES[str(name).lower()]
    except KeyError:
        raise UnknownNameError("device", str(name), _DEVICES) from None


def dtype_bytes(dtype: int | str) -> int:
    """Bytes per element of ``dtype`` (a name such as "float16", or a positive int)."""
    if isinstance(dtype, str):
        try:
            return DTYPE_BYTES[dtype.lower()]
        except KeyError:
            raise UnknownNameError("dtype", dtype, DTYPE_BYTES) from None
    return check_int("dtype_bytes", dtype, minimum=1, maximum=64)


def words_for(M_bytes: int, dtype: int | str = 2) -> int:
    """Words of ``dtype`` in ``M_bytes`` bytes (at least one word must fit)."""
    M_bytes = check_int("M_bytes", M_bytes, minimum=1)
    size = dtype_bytes(dtype)
    w = M_bytes // size
    if w < 1:
        what = f"{dtype} word" if isinstance(dtype, str) else "word"
        raise ParameterError(f"M_bytes={M_bytes} is less than one {what} ({size} bytes); give "
                             f"M_bytes >= {size}", param="M_bytes")
    return w
