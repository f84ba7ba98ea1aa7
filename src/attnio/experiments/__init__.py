"""Experiments: sweeps of configurations into a resumable store, reports and measurements.

* :mod:`.sweep`: grids, their expansion, the runner (local processes or Dask);
* :mod:`.store`: the SQLite results store (whole rows only, resumable);
* :mod:`.report`: slope fits, claims and figures from a store;
* :mod:`.crossover`: the square-tiling vs FlashAttention crossover measurement.
"""

from .store import ResultsStore
from .sweep import PRESETS, Config, Grid, SweepSummary, expand, run_sweep

__all__ = ["PRESETS", "Config", "Grid", "ResultsStore", "SweepSummary", "expand", "run_sweep"]
