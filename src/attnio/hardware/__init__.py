"""Hardware: devices, and a model of attention kernels on real GPUs above the two-level model.

* :mod:`.devices`: the cited device table (and the planner's ``device=`` presets);
  :mod:`.device_file`: any other GPU, described in a TOML file (``--device-file``);
* :mod:`.kernels`: kernel configurations and flash-attn's named tile tables;
* :mod:`.feasibility`: shared memory, registers and CTAs per SM of a config;
* :mod:`.traffic`: per-CTA tile streams read off the two-level schedules, in launch order;
* :mod:`.l2`: the L2 (an exact byte-weighted LRU) and the parallel replay of the waves;
* :mod:`.timing`: the calibrated time: sustained unit rates, each family's overlap of the K/V
  step, greedy dispatch of CTAs to SMs, fixed costs (parameters in ``calibration.json``);
* :mod:`.model`: :func:`score`; :mod:`.oracle`: :func:`tune`; :mod:`.predict`: a named
  kernel's pass (standard, FA1, FA2, FA3); :mod:`.validate`: against measurements;
  :mod:`.calibrate`: the fit of the parameters to measurements; :mod:`.fits`: which fit a
  generation uses (its own, a user's, or a borrowed one, with a warning).

Only :mod:`.devices` loads with ``import attnio`` (the planner needs it); the model loads on first
use of :func:`score` or :func:`tune`.
"""

from __future__ import annotations

import importlib
from typing import Any

from .devices import DTYPE_BYTES, Device, dtype_bytes, get, names, words_for

__all__ = ["DTYPE_BYTES", "Device", "KernelConfig", "Score", "dtype_bytes", "get", "names",
           "score", "tune", "words_for"]

_LAZY = {"KernelConfig": ("kernels", "KernelConfig"), "Score": ("model", "Score"),
         "score": ("model", "score"), "tune": ("oracle", "tune")}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        mod, attr = _LAZY[name]
        value = getattr(importlib.import_module(f"{__name__}.{mod}"), attr)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
