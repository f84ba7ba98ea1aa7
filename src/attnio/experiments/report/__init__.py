"""The reproduction report: log-log figures, scaling fits and a table of the seed papers' claims.

:func:`build_report` reads a results database (:mod:`attnio.experiments.store`) and writes to a
directory:

* figures, PNG and PDF (SVG on request), log-log: total I/O against each swept axis (N, M, d) for
  every setting (mask, window, heads), with the best explicit bound drawn, the read-once floor and
  M = d²; the ratio to the best explicit bound against M; overlays comparing settings that differ
  in one thing (GQA against full heads, each window, causal against not); approximate-attention
  error against I/O when compute-mode rows of approximate algorithms exist.  Each figure has a
  caption stating its fixed parameters; see :mod:`.style` for how every series stays visible;
* ``figures.json``: each figure's name, caption and the numbers it plots;
* ``fits.json``: every fitted slope, its points and the rule that chose them (:mod:`.fits`);
* ``REPORT.md``: the reproduction table (:mod:`.claims`: one row per claim, the measured figure
  and pass/fail), the best configuration per workload point, the fits, the figures with their
  captions, and every figure the caps left out;
* ``index.html``: the same, self-contained (images embedded as data URIs).

Modules: :mod:`.rows` (settings; the bounds each row is held to), :mod:`.fits`, :mod:`.claims`,
:mod:`.style`, :mod:`.figures`, :mod:`.plan` (which figures, the cap), :mod:`.pages`,
:mod:`.build`.
"""

from __future__ import annotations

from .build import Report, ReportOptions, build_report
from .claims import Claim, claims
from .fits import Fit, fit_slope, series_fits
from .pages import _best_md, best_configurations
from .plan import FIGS_PER_AXIS
from .rows import approximate_bounds, for_report, setting_label
from .style import FORMATS

__all__ = ["FIGS_PER_AXIS", "FORMATS", "Claim", "Fit", "Report", "ReportOptions", "approximate_bounds",
           "best_configurations", "build_report", "claims", "fit_slope", "for_report",
           "series_fits", "setting_label"]

_best_md = _best_md  # tests and the docs' generator read the Markdown table of the best rows
