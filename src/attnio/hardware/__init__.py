"""Hardware: devices with their memory sizes (and, with the GPU model, kernels on them).

* :mod:`.devices`: device presets and word sizes (the planner's ``device=``).
"""

from .devices import DTYPE_BYTES, Device, dtype_bytes, get, names, words_for

__all__ = ["DTYPE_BYTES", "Device", "dtype_bytes", "get", "names", "words_for"]
