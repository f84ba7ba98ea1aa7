"""``build_report``: read a results database and write the report folder, all or nothing.

The report is written to a temporary folder next to ``out`` (inside it when it exists) and
moved into place only once every file is written, so a full disk or a failing figure leaves no
half-written report: the temporary folder is removed and one line names ``--out``, the path and
the cause.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import tempfile
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

from ...core.errors import ParameterError
from ...core.progress import ProgressCallback
from ..store import ResultsStore
from .claims import Claim, claims
from .figures import FigureFile, Look
from .fits import FLOOR_SHARE, Fit, series_fits
from .pages import Page, _write_best_csv, best_configurations, markdown, page_html, skips, summary
from .plan import FIGS_PER_AXIS, planned_figures
from .rows import _all_ok, _ok_rows, _setting, for_report, setting_label
from .style import DEFAULT_DPI, DPI_RANGE, FORMATS, series_styles

__all__ = ["Report", "ReportOptions", "build_report"]

#: The columns a report reads from every row (a results table without them is not attnio's).
_NEEDED = ("config_hash", "status", "algorithm", "kind", "exact", "Nq", "Nkv", "d", "M", "mode",
           "total")


@dataclass(frozen=True)
class Report:
    out: str
    figures: list[str]
    claims: list[Claim]
    fits: list[Fit]
    rows: int
    best: list[dict] = field(default_factory=list)
    settings: list[str] = field(default_factory=list)
    captions: dict[str, str] = field(default_factory=dict)
    not_drawn: list[str] = field(default_factory=list)

    @property
    def covered(self) -> list[Claim]:
        """The claims this sweep's grid has data for (pass or fail)."""
        return [c for c in self.claims if c.status != "not covered"]

    @property
    def not_covered(self) -> list[Claim]:
        return [c for c in self.claims if c.status == "not covered"]

    @property
    def all_pass(self) -> bool:
        return all(c.status == "pass" for c in self.claims)


def _formats(formats: Sequence[str] | str) -> tuple[str, ...]:
    if isinstance(formats, str):
        formats = [f.strip() for f in formats.split(",") if f.strip()]
    fmts = [f.lower() for f in formats]
    bad = [f for f in fmts if f not in FORMATS]
    if bad or not fmts:
        raise ParameterError(f"formats must be a comma list of {', '.join(FORMATS)}, got "
                             f"{','.join(formats) or repr('')}", param="formats")
    return ("png", *dict.fromkeys(f for f in fmts if f != "png"))


@dataclass(frozen=True)
class ReportOptions:
    """What :func:`build_report` draws and writes, validated on construction.

    ``formats``: the figures' formats besides PNG (a sequence or a comma list of ``png``,
    ``pdf``, ``svg``; PNG is always written); ``html_page``: whether to write ``index.html``;
    ``figs_per_axis``: figures per setting and swept axis (the fixed values with the most points
    first); ``max_figures``: at most this many figures (None: no cap); every figure either leaves
    out is listed in REPORT.md and :attr:`Report.not_drawn`.  ``all_bounds`` draws every
    explicit bound by name instead of the best one.  ``dpi``: the PNG figures' resolution, an
    integer in [50, 1200] (default 120).
    """

    formats: Sequence[str] | str = ("png", "pdf")
    html_page: bool = True
    figs_per_axis: int = FIGS_PER_AXIS
    max_figures: int | None = None
    all_bounds: bool = False
    dpi: int = DEFAULT_DPI

    def __post_init__(self) -> None:
        object.__setattr__(self, "formats", _formats(self.formats))
        for name, v, lo in (("figs_per_axis", self.figs_per_axis, 0),
                            ("max_figures", self.max_figures, 0)):
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < lo):
                raise ParameterError(f"{name.replace('_', '-')} must be an integer >= {lo}, "
                                     f"got {v!r}", param=name)
        lo, hi = DPI_RANGE
        dpi = self.dpi
        if isinstance(dpi, bool) or not isinstance(dpi, int) or not lo <= dpi <= hi:
            raise ParameterError(f"dpi must be an integer in [{lo}, {hi}], got {dpi!r}",
                                 param="dpi")
        for name in ("html_page", "all_bounds"):
            if not isinstance(getattr(self, name), bool):
                raise ParameterError(f"{name} must be True or False, got "
                                     f"{getattr(self, name)!r}", param=name)


def build_report(db: str | os.PathLike, out: str | os.PathLike, *,
                 options: ReportOptions | None = None,
                 progress: ProgressCallback | None = None) -> Report:
    """Read ``db`` and write to ``out``: figures (PNG, and each of the options' ``formats``:
    ``pdf``, ``svg``) for every setting present (mask, window, heads) and every swept axis,
    overlays comparing settings that differ in one thing (GQA against full heads, each window,
    causal against not), ``figures.json`` (each figure's name, caption and the numbers it
    plots), ``best.csv`` (the best configuration of every workload point), ``fits.json``,
    ``REPORT.md`` and (unless ``html_page=False``) ``index.html``.

    ``options``: a :class:`ReportOptions` (default ``ReportOptions()``: PNG and PDF, two figures
    per setting and swept axis, no cap, the best bound, 120 dpi, index.html).
    ``progress(done, total)`` is called per figure.  Any sweep gets a report: a database of one
    row, or of skipped rows only, gets a short one."""
    out = os.fspath(out)
    opts = ReportOptions() if options is None else options
    if not isinstance(opts, ReportOptions):
        raise ParameterError(f"options must be an attnio.experiments.ReportOptions, got "
                             f"{type(opts).__name__}", param="options")
    with ResultsStore(db, readonly=True) as st:
        lacking = [c for c in _NEEDED if c not in st._columns()]
        if lacking:
            raise ParameterError(
                f"db: {os.fspath(db)!r} is not an attnio results database (its results table "
                f"lacks the column(s) {', '.join(lacking)}); give the --db a sweep wrote",
                param="db")
        rows = st.rows(decode=True)
        meta = st.meta()
    if not rows:
        raise ParameterError(f"db {os.fspath(db)!r} holds no rows; run `attnio sweep --db "
                             f"{os.fspath(db)}` first", param="db")
    tmp = _temp_folder(out)
    try:
        rep = _build(rows, meta, os.fspath(db), tmp, opts, progress, out)
        _move_into_place(tmp, out)
    except OSError as e:
        shutil.rmtree(tmp, ignore_errors=True)
        raise _write_error(out, e) from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return rep


def _cp_section(db: str, out: str) -> dict[str, str]:
    """When the database holds context-parallel rows (``attnio cp sweep``): their figure, words
    per device against P with the bound and fitted slopes, and a section of REPORT.md; the
    figure's name and caption (empty without such rows)."""
    from ..cp import cp_report_section

    name = cp_report_section(db, out)
    return {} if name is None else {name: "context parallelism: words per device against P"}


def _temp_folder(out: str) -> str:
    if os.path.exists(out) and not os.path.isdir(out):
        raise ParameterError(f"out: {out!r} exists and is not a directory", param="out")
    where = out if os.path.isdir(out) else (os.path.dirname(os.path.abspath(out)))
    if not os.path.isdir(where):
        raise ParameterError(f"out: the parent directory of {out!r} does not exist", param="out")
    if not os.access(where, os.W_OK):
        raise ParameterError(f"out: directory {where!r} is not writable", param="out")
    try:
        return tempfile.mkdtemp(prefix=".attnio-report-", dir=where)
    except OSError as e:
        raise _write_error(out, e) from None


def _move_into_place(tmp: str, out: str) -> None:
    """The finished report: the temporary folder becomes ``out``, or (``out`` exists) its files
    replace those of the same names in ``out`` (renames on one file system: no space needed)."""
    if not os.path.isdir(out):
        os.rename(tmp, out)
        return
    for name in sorted(os.listdir(tmp)):
        os.replace(os.path.join(tmp, name), os.path.join(out, name))
    os.rmdir(tmp)


def _write_error(out: str, e: OSError) -> ParameterError:
    why = {errno.ENOSPC: "no space left on the device", errno.EDQUOT: "disk quota exceeded",
           errno.EROFS: "read-only file system", errno.EACCES: "permission denied",
           errno.EFBIG: "file too large"}.get(e.errno or 0, e.strerror or str(e))
    return ParameterError(f"out: cannot write the report to {out!r} ({why}); nothing was left "
                          "behind: free some space or choose another --out", param="out")


def _build(rows: list[dict], meta: dict, db: str, tmp: str, opts: ReportOptions,
           progress: ProgressCallback | None, out: str) -> Report:
    """Write the report's files into ``tmp`` (the temporary folder) and return the Report of
    ``out``, the folder they will be moved to."""
    html_page, figs_per_axis, max_figures = opts.html_page, opts.figs_per_axis, opts.max_figures
    rows = for_report(rows)
    every = _all_ok(rows)
    fits = series_fits(_ok_rows(rows))
    table = claims(rows, fits)
    look = Look(tmp, tuple(opts.formats),
                series_styles((r["algorithm"], None if r["exact"] else r["eps"]) for r in every),
                opts.all_bounds, opts.dpi)
    by_setting: dict[tuple, list[dict]] = defaultdict(list)
    for r in every:
        by_setting[_setting(r)].append(r)
    jobs, not_drawn = planned_figures(by_setting, every, look, figs_per_axis)
    if max_figures is not None and len(jobs) > max_figures:
        not_drawn = [f"{j.stem}: {j.what} (beyond max_figures={max_figures})"
                     for j in jobs[max_figures:]] + not_drawn
        jobs = jobs[:max_figures]
    figures: list[FigureFile] = []
    for i, job in enumerate(jobs):
        f = job.draw()
        if f is not None:
            figures.append(f)
        if progress is not None:
            progress(i + 1, len(jobs))
    with open(os.path.join(look.out, "figures.json"), "w") as fh:
        json.dump([asdict(f) for f in figures], fh, indent=None, separators=(",", ":"))
        fh.write("\n")
    best = best_configurations(rows)
    _write_best_csv(best, os.path.join(look.out, "best.csv"))
    with open(os.path.join(look.out, "fits.json"), "w") as fh:
        json.dump({"floor_share": FLOOR_SHARE, "fits": [asdict(x) for x in fits],
                   "claims": [asdict(c) for c in table]}, fh, indent=1)
        fh.write("\n")
    order = sorted(by_setting, key=lambda s: (s != (None, None, 1, 1, 1), str(s)))
    page = Page(summary(rows, meta, db), table, fits, figures, skips(rows), best,
                [setting_label(s) for s in order], not_drawn, tuple(look.formats))
    with open(os.path.join(look.out, "REPORT.md"), "w") as fh:
        fh.write(markdown(page))
    if html_page:
        with open(os.path.join(look.out, "index.html"), "w") as fh:
            fh.write(page_html(page, look.out))
    cp = _cp_section(db, look.out)
    return Report(out, [f.name for f in figures] + list(cp), table, fits, len(rows), best,
                  page.settings, {**{f.name: f.caption for f in figures}, **cp}, not_drawn)
