"""Experiments: sweeps of configurations into a resumable store, reports and measurements.

* :mod:`.sweep`: grids, their expansion, the runner (local processes or Dask);
* :mod:`.store`: the SQLite results store (whole rows only, resumable);
* :mod:`.report`: slope fits, claims and figures from a store;
* :mod:`.crossover`: the square-tiling vs FlashAttention crossover measurement.

``__all__`` is the package's public API (docs/api.md), the names the command line uses; the
report's (:func:`build_report`, :data:`DEFAULT_DPI`, :data:`DPI_RANGE`) load on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..core.lazy import lazy_names
from .store import LatexOptions, ResultsStore, export_target
from .sweep import (
    DEFAULT_MAX_CONFIGS,
    PRESETS,
    Config,
    Grid,
    SweepInterrupted,
    SweepSummary,
    dry_run,
    expand,
    grid_from_mapping,
    grids_from_toml,
    override_grid,
    parse_causal,
    parse_values,
    parse_window,
    run_sweep,
)

if TYPE_CHECKING:  # the lazily loaded names, for type checkers
    from .cp import cp_db_figure, cp_figure, cp_rows, cp_sweep
    from .report import ReportOptions, build_report
    from .report.style import DEFAULT_DPI, DPI_RANGE

__all__ = ["DEFAULT_DPI", "DEFAULT_MAX_CONFIGS", "DPI_RANGE", "PRESETS", "Config", "Grid",
           "LatexOptions", "ReportOptions", "ResultsStore", "cp_db_figure", "cp_figure", "cp_rows", "cp_sweep", "SweepInterrupted", "SweepSummary", "build_report",
           "dry_run", "expand", "export_target", "grid_from_mapping", "grids_from_toml", "override_grid", "parse_causal",
           "parse_values", "parse_window", "run_sweep"]

#: Names loaded on first use (the report's modules): public name -> (module, its name there).
_LAZY = {"build_report": ("report", "build_report"), "ReportOptions": ("report", "ReportOptions"),
         "cp_figure": ("cp", "cp_figure"), "cp_db_figure": ("cp", "cp_db_figure"),
         "cp_rows": ("cp", "cp_rows"), "cp_sweep": ("cp", "cp_sweep"), "DEFAULT_DPI": ("report.style", "DEFAULT_DPI"),
         "DPI_RANGE": ("report.style", "DPI_RANGE")}


__getattr__ = lazy_names(__name__, _LAZY, globals())
