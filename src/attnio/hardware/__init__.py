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
  generation uses (its own, a user's, or a borrowed one, with a warning); :mod:`.entry`: the
  calls of ``attnio gpu score`` and ``validate``, which take a calibration file.

Only :mod:`.devices` loads with ``import attnio`` (the planner needs it); the model loads on first
use of :func:`score` or :func:`tune`.  ``__all__`` is the package's public API (docs/api.md), the
names the command line uses: a module's function appears here under a name that says what it
does where the module's own name is ambiguous (``load_device_file`` is
:func:`.device_file.load`, ``fit_calibration`` :func:`.calibrate.calibrate`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..core.lazy import lazy_names
from .devices import (
    DTYPE_BYTES,
    Device,
    all_devices,
    dtype_bytes,
    dtype_name,
    get,
    names,
    words_for,
)

if TYPE_CHECKING:  # the lazily loaded names, for type checkers
    from .calibrate import calibrate as fit_calibration
    from .calibrate import calibrate_into as fit_calibration_into
    from .calibrate import check_out as check_calibration_out
    from .calibrate import load as load_calibration
    from .calibrate import write as write_calibration
    from .device_file import listing as device_listing
    from .device_file import load as load_device_file
    from .entry import score_workload, validate_file
    from .feasibility import KernelTables, kernel_tables
    from .feasibility import check as check_feasibility
    from .fits import FitWarning
    from .fits import using as using_calibration
    from .kernels import FLASH_ATTN_COMMIT, KernelConfig, backward_config, kernel_table
    from .model import Score, score
    from .oracle import TuneSearch, tune, tune_report
    from .timing import generation
    from .validate import validate as validate_measurements

__all__ = ["DTYPE_BYTES", "FLASH_ATTN_COMMIT", "Device", "FitWarning", "KernelConfig", "KernelTables",
           "Score",
           "TuneSearch",
           "all_devices", "backward_config", "check_calibration_out", "check_feasibility",
           "device_listing", "dtype_bytes", "dtype_name", "fit_calibration", "fit_calibration_into", "generation", "get",
           "kernel_table", "kernel_tables",
           "load_calibration", "load_device_file", "names", "score", "score_workload", "tune",
           "tune_report", "using_calibration", "validate_file", "validate_measurements", "words_for", "write_calibration"]

#: Names loaded on first use: public name -> (module, its name there).
_LAZY = {"KernelConfig": ("kernels", "KernelConfig"), "Score": ("model", "Score"),
         "score": ("model", "score"), "score_workload": ("entry", "score_workload"),
         "tune": ("oracle", "tune"),
         "tune_report": ("oracle", "tune_report"), "TuneSearch": ("oracle", "TuneSearch"),
         "FLASH_ATTN_COMMIT": ("kernels", "FLASH_ATTN_COMMIT"),
         "kernel_table": ("kernels", "kernel_table"),
         "backward_config": ("kernels", "backward_config"),
         "check_feasibility": ("feasibility", "check"),
         "kernel_tables": ("feasibility", "kernel_tables"),
         "KernelTables": ("feasibility", "KernelTables"),
         "fit_calibration_into": ("calibrate", "calibrate_into"),
         "generation": ("timing", "generation"),
         "load_device_file": ("device_file", "load"),
         "device_listing": ("device_file", "listing"),
         "FitWarning": ("fits", "FitWarning"), "using_calibration": ("fits", "using"),
         "validate_measurements": ("validate", "validate"),
         "validate_file": ("entry", "validate_file"),
         "load_calibration": ("calibrate", "load"),
         "fit_calibration": ("calibrate", "calibrate"),
         "check_calibration_out": ("calibrate", "check_out"),
         "write_calibration": ("calibrate", "write")}


__getattr__ = lazy_names(__name__, _LAZY, globals())
