"""The report's figures: I/O against a swept axis, the ratio to the bound, error against I/O,
and overlays that compare settings on one axes.  Each returns a :class:`FigureFile` (its PNG's
name and a caption that states every fixed parameter)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .fits import FLOOR_SHARE, _make_fit
from .rows import _bounds, setting_label
from .style import (
    DEFAULT_DPI,
    _shade,
    finish,
    new_figure,
    save,
    series_label,
    set_x_ticks,
    set_y_ticks,
)

__all__ = ["FigureFile"]


@dataclass
class FigureFile:
    """A figure the report wrote: ``name`` (the PNG; the other formats share its stem), its
    caption, and the setting it shows (a label; overlays name the settings they compare)."""

    name: str
    caption: str
    setting: str = ""
    #: what it plots: {line label: [[x, y], ...]} (the series and the bound lines), written to
    #: figures.json so that a test can compare the numbers without drawing
    data: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Look:
    """What every figure of one report shares: the output folder, the formats, the series
    styles, and whether every bound is drawn (else the best explicit one)."""

    out: str
    formats: Sequence[str]
    styles: dict
    all_bounds: bool = False
    dpi: int = DEFAULT_DPI  # dots per inch of the PNG figures


_XLABEL = {"N": "N (= Nq = Nkv)", "M": "M (fast-memory words)", "d": "d (head dimension)"}
_BEST_EXACT = "best explicit lower bound"
_BEST_APPROX = "best explicit approximate-attention bound"


def _by_series(rows: list[dict], axis: str) -> dict[tuple, list[dict]]:
    g: dict[tuple, list[dict]] = defaultdict(list)
    for r in rows:
        g[(r["algorithm"], r["eps"] if not r["exact"] else None)].append(r)
    return {k: sorted(v, key=lambda r: r[axis]) for k, v in g.items()}


def figure_data(rows, axis, *, value="total", all_bounds=False) -> dict[str, list]:
    """The lines a figure of ``rows`` against ``axis`` plots: each series by its label (the
    algorithm, and ε for approximate ones) and each bound line by its name."""
    out = {series_label(*k): [[r[axis], r[value]] for r in rs if r.get(value)]
           for k, rs in sorted(_by_series(rows, axis).items(), key=lambda kv: str(kv[0]))}
    if value == "total":
        out.update({name: [list(p) for p in pts]
                    for name, pts in _bound_lines(rows, axis, all_bounds).items()})
    return out


def _slope_text(alg, rs, axis, d) -> str:
    """The fitted log-log slope(s) of a series, or '' when none can be fitted."""
    exact = bool(rs[0]["exact"])
    regions = [rs] if axis != "M" else [
        [r for r in rs if r["M"] < d * d], [r for r in rs if r["M"] >= d * d]]
    parts = []
    for sel in regions:
        f = None
        if len({r[axis] for r in sel}) >= 2:
            f = _make_fit((alg, sel[0]["d"], None, None, (None,) * 5, sel[0]["mode"],
                           sel[0]["eps"]), axis, "all", sel, exact)
        parts.append("–" if f is None or f.slope is None else f"{f.slope:+.2f}".replace("-", "−"))
    if all(p == "–" for p in parts):
        return ""
    if len(parts) == 1:
        return f"slope {parts[0]}"
    if "–" in parts:
        return (f"slope {parts[1]} at M ≥ d²" if parts[0] == "–" else
                f"slope {parts[0]} at M < d²")
    return f"slopes {parts[0]} | {parts[1]}"


@dataclass(frozen=True)
class Overlay:
    """How one setting's lines differ when several are drawn on one axis: the line style
    (None: the series'), markers filled or hollow (None: the series'), a shade of the colour
    (1: as is) and a suffix to each label."""

    ls: Any = None
    filled: bool | None = None
    shade: float = 1.0
    suffix: str = ""


def draw_series(ax, rows, axis, styles, *, value="total", slopes=True, d=None,
                overlay: Overlay = Overlay()) -> list[str]:
    """One line per (algorithm, ε), widest first; a series whose points equal one drawn
    before says so in its label.  Returns the labels drawn."""
    ls, filled, shade, suffix = overlay.ls, overlay.filled, overlay.shade, overlay.suffix
    series = _by_series(rows, axis)
    order = sorted(series, key=lambda k: (styles[k].order, k[0], k[1] or 0))
    seen: dict[tuple, str] = {}
    labels = []
    for z, key in enumerate(order):
        rs = [r for r in series[key] if r.get(value)]
        if not rs:
            continue
        pts = tuple((r[axis], r[value]) for r in rs)
        notes = [f"= {seen[pts]}"] if pts in seen else []
        if slopes:
            notes += [t for t in [_slope_text(key[0], rs, axis, d or rs[0]["d"])] if t]
        label = series_label(*key) + (f" ({'; '.join(notes)})" if notes else "")
        seen.setdefault(pts, series_label(*key))
        kw = styles[key].kwargs()
        if ls is not None:
            kw["ls"] = ls
        if shade != 1.0:
            kw["color"] = kw["mec"] = _shade(kw["color"], shade)
        if filled is not None:
            kw["mfc"] = kw["mec"] if filled else "none"
        ax.plot([p[0] for p in pts], [p[1] for p in pts], label=label + suffix, zorder=3 + z,
                **kw)
        labels.append(label)
    return labels


def _bound_lines(rows, axis, all_bounds) -> dict[str, list[tuple[float, float]]]:
    """name -> points: the best explicit bound at each x (exact rows; approximate rows on their
    own line), or with ``all_bounds`` every explicit bound by name."""
    lines: dict[str, dict[float, float]] = defaultdict(dict)
    for r in rows:
        if r.get("kind", "attention") != "attention":
            continue
        for name, b in _bounds(r).items():
            if not (b.get("explicit") and b.get("value")):
                continue
            key = name if all_bounds else (_BEST_EXACT if r["exact"] else _BEST_APPROX)
            x = r[axis]
            lines[key][x] = max(lines[key].get(x, 0.0), float(b["value"]))
    return {k: sorted(v.items()) for k, v in lines.items() if len(v) >= 2}


def draw_bounds(ax, rows, axis, all_bounds) -> list[str]:
    drawn = []
    dashes = ["--", (0, (6, 2, 1, 2)), (0, (3, 1, 1, 1, 1, 1)), (0, (8, 3)), (0, (2, 2))]
    for i, (name, pts) in enumerate(sorted(_bound_lines(rows, axis, all_bounds).items())):
        approx = name == _BEST_APPROX or name.startswith("approx")
        color = "#1F5F8B" if approx else ("k" if not all_bounds else str(0.1 + 0.12 * (i % 5)))
        ls = ((0, (1, 1.2)) if approx else "--") if not all_bounds else dashes[i % len(dashes)]
        ax.plot([p[0] for p in pts], [p[1] for p in pts], ls=ls, color=color, lw=1.3,
                zorder=100, label=name if not all_bounds else f"bound: {name}")
        drawn.append(name)
    return drawn


def _inside(x: float, values: list[float]) -> bool:
    return bool(values) and min(values) <= x <= max(values)


def _values(rows, key) -> list[float]:
    return [r[key] for r in rows if r.get(key)]


def _fixed_text(fixed: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in fixed.items())


def _bound_caption(drawn: list[str], all_bounds: bool) -> str:
    if not drawn:
        return " No explicit lower bound applies to these rows."
    if all_bounds:
        return " Grey dashed lines: every applicable explicit lower bound, by name."
    txt = ""
    if _BEST_EXACT in drawn:
        txt += (" Dashed black: the best explicit lower bound on exact attention (the largest "
                "applicable explicit bound at each point).")
    if _BEST_APPROX in drawn:
        txt += (" Dotted dark blue: the best explicit bound on approximate attention "
                "(attnio.bounds.approximate).")
    return txt


def io_vs_axis(rows, axis, fixed: dict, setting: tuple, look: Look, stem: str) -> FigureFile:
    """Total I/O against ``axis`` (N, M or d) with the other two sizes fixed, one line per
    algorithm and ε, the best explicit bound, the read-once floor (against N) and M = d²."""
    fig, ax = new_figure()
    d = fixed.get("d")
    draw_series(ax, rows, axis, look.styles, d=d)
    drawn = draw_bounds(ax, rows, axis, look.all_bounds)
    extra = ""
    if axis == "N":
        fl = sorted({r["N"]: r["floor"] for r in rows if r.get("floor")}.items())
        if len(fl) >= 2:
            ax.plot([p[0] for p in fl], [p[1] for p in fl], ls=(0, (1, 4)), color="0.6", lw=0.9,
                    label="read-once floor", zorder=99)
            extra = " Sparse dots: the read-once floor (inputs read once, output written once)."
    set_x_ticks(ax, _values(rows, axis))
    set_y_ticks(ax, _values(rows, "total") + [p[1] for p in _bound_lines(
        rows, axis, look.all_bounds).get(_BEST_EXACT, [])])
    if axis == "M" and d and _inside(d * d, _values(rows, "M")):
        ax.axvline(d * d, color="0.3", lw=0.8, alpha=0.7, zorder=1)
        ax.annotate(" M = d²", (d * d, 1), xycoords=("data", "axes fraction"), va="top",
                    fontsize=8)
        extra += " Vertical line: M = d²."
    label = setting_label(setting)
    finish(fig, ax, title=f"Total I/O vs {axis} ({_fixed_text(fixed)})\n{label}",
           xlabel=_XLABEL[axis], ylabel="total I/O (words)")
    name = save(fig, look.out, stem, look.formats, look.dpi)
    modes = sorted({r["mode"] for r in rows})
    cap = (f"Total I/O (words, reads + writes) against {axis}, log-log, at "
           f"{_fixed_text(fixed)}; {label}; {' and '.join(modes)} mode. One line per algorithm "
           f"(and per ε for approximate ones), with the slope of its log-log fit (exact "
           f"algorithms on points whose read-once floor is below {FLOOR_SHARE:.0%} of the "
           "total; against M, the slopes below | above M = d²)."
           + _bound_caption(drawn, look.all_bounds) + extra)
    return FigureFile(name, cap, label, figure_data(rows, axis, all_bounds=look.all_bounds))


def ratio_vs_M(rows, N, d, setting, look: Look, stem: str) -> FigureFile | None:
    sub = [r for r in rows if r.get("ratio")]
    if not sub:
        return None
    fig, ax = new_figure((6.4, 4.2))
    draw_series(ax, sub, "M", look.styles, value="ratio", slopes=False)
    ax.axhline(1.0, color="k", lw=0.9)
    set_x_ticks(ax, _values(sub, "M"))
    set_y_ticks(ax, _values(sub, "ratio") + [1.0])
    if _inside(d * d, _values(sub, "M")):
        ax.axvline(d * d, color="0.3", lw=0.8, alpha=0.7)
    label = setting_label(setting)
    finish(fig, ax, title=f"Ratio to the best explicit bound vs M (N={N}, d={d})\n{label}",
           xlabel=_XLABEL["M"], ylabel="total I/O / best explicit bound")
    name = save(fig, look.out, stem, look.formats, look.dpi)
    return FigureFile(name, f"Total I/O divided by the best explicit lower bound at that point "
                            f"(exact algorithms: the exact-attention bounds; approximate ones: "
                            f"attnio.bounds.approximate), against M, at N={N}, d={d}; {label}. "
                            "Horizontal line: ratio 1 (the bound); vertical line (when inside "
                            "the range): M = d².", label, figure_data(sub, "M", value="ratio"))


def error_vs_io(rows, look: Look) -> FigureFile | None:
    sub = [r for r in rows if not r["exact"] and r.get("max_err") is not None and r["max_err"] > 0]
    if not sub:
        return None
    fig, ax = new_figure((6.4, 4.4))
    for key, rs in sorted(_by_series(sub, "total").items(), key=lambda kv: -(kv[0][1] or 0)):
        kw = look.styles[key].kwargs()
        kw["ls"] = "none"
        ax.plot([r["total"] for r in rs], [r["max_err"] for r in rs], label=series_label(*key),
                **kw)
        labels: dict[tuple, list[str]] = defaultdict(list)
        for r in rs:  # one label per point: runs that moved the same words with the same error
            labels[(r["total"], float(f"{r['max_err']:.4g}"), r["Nq"])].append(str(r["M"]))
        for (tot, err, n), Ms in labels.items():
            ax.annotate(f"N={n}, M={'/'.join(Ms)}", (tot, err), fontsize=6, xytext=(4, 2),
                        textcoords="offset points")
    set_x_ticks(ax, _values(sub, "total"))
    set_y_ticks(ax, _values(sub, "max_err"))
    finish(fig, ax, title="Approximate attention: max error vs total I/O",
           xlabel="total I/O (words)", ylabel="max |O − reference|")
    name = save(fig, look.out, "error_vs_io", look.formats, look.dpi)
    return FigureFile(name, "Approximate attention in compute mode: the largest absolute error "
                            "of the output against the float64 reference, against the total "
                            "I/O, one marker style per ε; each point labelled with its N and M.")


_SETTING_LS = ("-", "--", ":", "-.", (0, (5, 1, 1, 1)))


def overlay(rows_by_setting: dict[tuple, list[dict]], names: dict[tuple, str], axis,
            fixed: dict, what: str, common: str, look: Look, stem: str) -> FigureFile:
    """Several settings on one axes: colour and marker say the algorithm (and ε), the line
    style (and a hollow or filled marker) the setting; ``names`` label the settings by what
    differs, ``common`` (in the title) says what they share."""
    from matplotlib.lines import Line2D

    fig, ax = new_figure((6.4, 4.8))
    handles, labels = [], []
    settings = list(rows_by_setting)
    allrows = [r for s in settings for r in rows_by_setting[s]]
    for i, s in enumerate(settings):
        ls = _SETTING_LS[i % len(_SETTING_LS)]
        draw_series(ax, rows_by_setting[s], axis, look.styles, slopes=False,
                    overlay=Overlay(ls, filled=i % 2 == 1, shade=0.7 ** i))
        handles.append(Line2D([], [], color="k", ls=ls, lw=1.4, marker="o",
                              mfc="k" if i % 2 else "none", mec="k"))
        labels.append(names[s])
    for key in sorted(_by_series(allrows, axis), key=lambda k: (k[0], k[1] or 0)):
        st = look.styles[key]
        handles.append(Line2D([], [], color=st.color, marker=st.marker, ls="-", mfc=st.color))
        labels.append(series_label(*key))
    set_x_ticks(ax, _values(allrows, axis))
    set_y_ticks(ax, _values(allrows, "total"))
    finish(fig, ax, title=f"{what}: total I/O vs {axis}\n({_fixed_text(fixed)}; {common})",
           xlabel=_XLABEL[axis], ylabel="total I/O (words)", handles=handles, labels=labels,
           legend_cols=3)
    name = save(fig, look.out, stem, look.formats, look.dpi)
    compared = "; ".join(names[s] for s in settings)
    same = _same_in_every_setting(rows_by_setting, axis)
    cap = (f"{what}: total I/O against {axis}, log-log, at {_fixed_text(fixed)}; {common}; "
           f"compared: {compared}. Colour and marker: the algorithm; line style and marker "
           "fill: the setting (the first solid with hollow markers, the second dashed with "
           "filled ones, the third dotted; later settings in a darker shade)."
           + (f" Equal in every setting compared (the lines coincide): {', '.join(same)}."
              if same else ""))
    return FigureFile(name, cap, f"{common}: {compared}")


def _same_in_every_setting(rows_by_setting: dict[tuple, list[dict]], axis: str) -> list[str]:
    """The series whose points are the same in every setting of an overlay."""
    pts = [{k: tuple((r[axis], r["total"]) for r in v)
            for k, v in _by_series(rs, axis).items()} for rs in rows_by_setting.values()]
    keys = set(pts[0]).intersection(*pts[1:])
    return [series_label(*k) for k in sorted(keys, key=lambda k: (k[0], k[1] or 0))
            if all(p[k] == pts[0][k] for p in pts[1:])]
