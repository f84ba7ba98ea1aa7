"""How a report's figures look: one style per series, ticks, the legend, saving.

Every series stays visible: each registered algorithm has a colour no other has (the Okabe-Ito
palette, safe for colour-blind readers, then Paul Tol's; :func:`algorithm_styles`), a marker and a
line style, and series are drawn from the widest (large hollow
markers, thick lines) to the narrowest (small markers, dashed lines; flash_decoding last), so that two algorithms
whose counts coincide (flash2 and flash_decoding do on one head) show as a thin dashed line
inside a wide one, and the later one's legend entry says which it coincides with.  Approximate
algorithms get one series per ε.  Axes whose values are all powers of two get base-2 ticks;
other axes get a tick at each value (few values) or at each decade.  The legend sits below the
axes.  Tick labels are plain text (no mathtext), which keeps drawing fast.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ...core.extras import figure

__all__ = ["DEFAULT_DPI", "DPI_RANGE", "FORMATS", "SeriesStyle", "algorithm_styles",
           "series_styles"]

#: Formats a figure can be saved in (``build_report(formats=...)``, ``--formats``).
FORMATS = ("png", "pdf", "svg")

# Okabe & Ito (2008): eight colours distinguishable under the common colour-vision deficiencies
_OKABE_ITO = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#D55E00", "#56B4E9", "#000000",
              "#F0E442")


@dataclass(frozen=True)
class SeriesStyle:
    color: str
    marker: str
    ls: str | tuple
    ms: float       # marker size
    lw: float       # line width
    filled: bool
    layer: int = 5  # drawing order: lower first; within a layer, the widest first

    @property
    def width(self) -> float:
        """How much a series covers: wide ones are drawn first, narrow ones on top."""
        return self.ms + 2 * self.lw + (2 if not self.filled else 0)

    @property
    def order(self) -> tuple[int, float]:
        return self.layer, -self.width

    def kwargs(self) -> dict:
        return {"color": self.color, "marker": self.marker, "ls": self.ls, "ms": self.ms,
                "lw": self.lw, "mfc": self.color if self.filled else "none",
                "mec": self.color, "mew": 1.2}


#: The registered algorithms' styles (others cycle through the palette).
_KNOWN = {
    "standard": SeriesStyle("#0072B2", "s", "-", 5, 1.4, True),
    "flash1": SeriesStyle("#E69F00", "^", "-", 6, 1.4, True),
    "flash2": SeriesStyle("#009E73", "o", "-", 10, 3.0, False, 0),
    # split-KV flash2: equal to flash2 on one head, drawn last (a dashed line on top of all)
    "flash_decoding": SeriesStyle("#CC79A7", "x", "--", 6, 1.3, True, 9),
    "square_tiling": SeriesStyle("#D55E00", "D", "-.", 5, 1.4, True),
    "approx_poly": SeriesStyle("#56B4E9", "v", ":", 6, 1.6, True),
    # the planner's choice (--algo plan): the least-I/O envelope, black, drawn over the series
    # it equals
    "plan": SeriesStyle("#000000", "*", ":", 9, 2.0, False, 8),
}
#: More colours (Paul Tol's muted and dark schemes), for the registered algorithms beyond the
#: eight of Okabe & Ito: every registered algorithm has a colour of its own.
_MORE = ("#332288", "#882255", "#117733", "#999933", "#AA4499", "#44AA99", "#661100",
         "#6699CC", "#888888")
_PALETTE = _OKABE_ITO + _MORE
_MARKERS = "osD^v<>ph*"
_LINES = ("-", "--", "-.", ":")
_EPS_MARKERS = "v<>P*h"
_EPS_LINES = (":", "-.", (0, (5, 1)), (0, (1, 1)))


def series_styles(keys: Iterable[tuple[str, float | None]]) -> dict[tuple, SeriesStyle]:
    """A style per series (algorithm, eps): the algorithm's own style, and for each further ε
    of an approximate algorithm another marker, line style and a darker shade."""
    keys = sorted(set(keys), key=lambda k: (k[0], -1.0 if k[1] is None else -k[1]))
    out: dict[tuple, SeriesStyle] = {}
    own = algorithm_styles()
    others = 0
    for alg in dict.fromkeys(k[0] for k in keys):
        base = own.get(alg)
        if base is None:  # not registered (a row of an older attnio): the palette's end
            i = others
            others += 1
            base = SeriesStyle(_PALETTE[-1 - i % len(_MORE)], _MARKERS[i % len(_MARKERS)],
                               _LINES[i % len(_LINES)], 5, 1.4, True)
        mine = [k for k in keys if k[0] == alg]
        for j, k in enumerate(mine):
            if j == 0:
                out[k] = base
            else:
                out[k] = SeriesStyle(_shade(base.color, 0.75 ** j), _EPS_MARKERS[j % 6],
                                     _EPS_LINES[j % 4], base.ms, base.lw, j % 2 == 0,
                                     base.layer)
    return out


def algorithm_styles() -> dict[str, SeriesStyle]:
    """The style of every registered attention algorithm: the fixed ones of ``_KNOWN``, then
    the others in registry order, each with a colour no other algorithm has (the palette's
    colours the fixed ones leave, in order), so a colour names one algorithm in every figure of
    every report."""
    from ... import algorithms

    out = dict(_KNOWN)
    free = [c for c in _PALETTE if c not in {st.color for st in _KNOWN.values()}]
    i = 0
    for name in algorithms.names():
        if name in out:
            continue
        out[name] = SeriesStyle(free[i % len(free)], _MARKERS[i % len(_MARKERS)],
                                _LINES[i % len(_LINES)], 5, 1.4, True)
        i += 1
    return out


def _shade(color: str, f: float) -> str:
    r, g, b = (int(color[i:i + 2], 16) for i in (1, 3, 5))
    return "#" + "".join(f"{int(c * f):02x}" for c in (r, g, b))


def series_label(alg: str, eps: float | None) -> str:
    return alg if eps is None else f"{alg} ε={eps:g}"


# ----------------------------------------------------------------------------- ticks
_SUP = str.maketrans("0123456789-", "⁰¹²³⁴⁵⁶⁷⁸⁹⁻")


def _pow2(v: float) -> bool:
    return v > 0 and float(v).is_integer() and (int(v) & (int(v) - 1)) == 0


def _int_label(v: float) -> str:
    return f"{int(v):,}".replace(",", "\u2009") if v >= 10_000 else f"{int(v)}"


def set_x_ticks(ax, values: Sequence[float]) -> None:
    """Log x axis: base 2 with a tick per power of two (thinned to at most 9) when every value
    is a power of two; else a tick at each value (at most 10 values) or at each decade."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    vals = sorted({float(v) for v in values if v and v > 0})
    if not vals:
        return
    if all(_pow2(v) for v in vals):
        ax.set_xscale("log", base=2)
        k0, k1 = int(math.log2(vals[0])), int(math.log2(vals[-1]))
        step = max(1, math.ceil((k1 - k0 + 1) / 9))
        ticks = [2.0 ** k for k in range(k0, k1 + 1, step)]
        big = vals[-1] > 2 ** 16
        ax.xaxis.set_major_locator(FixedLocator(ticks))
        ax.xaxis.set_major_formatter(FuncFormatter(
            lambda v, _: f"2{str(round(math.log2(v))).translate(_SUP)}" if big else _int_label(v)))
    else:
        ax.set_xscale("log")
        ticks = vals if len(vals) <= 10 else [
            10.0 ** k for k in range(math.floor(math.log10(vals[0])),
                                     math.ceil(math.log10(vals[-1])) + 1)]
        ax.xaxis.set_major_locator(FixedLocator(ticks))
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: _int_label(v)))
    ax.xaxis.set_minor_locator(NullLocator())
    pad = 2 ** 0.25
    ax.set_xlim(vals[0] / pad, vals[-1] * pad)


def set_y_ticks(ax, values: Sequence[float]) -> None:
    """Log y axis labelled in plain text: 10ᵏ at each decade (three decades or more), 1 and
    3·10ᵏ (one to three), or 1, 2 and 5·10ᵏ (less)."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    vals = [float(v) for v in values if v and v > 0 and math.isfinite(v)]
    ax.set_yscale("log")
    if not vals:
        return
    lo, hi = min(vals), max(vals)
    k0, k1 = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
    if hi / lo >= 1000:
        step = max(1, math.ceil((k1 - k0 + 1) / 8))
        ticks = [10.0 ** k for k in range(k0, k1 + 1, step)]
    else:  # under three decades: 1 and 3 (under 30x: 1, 2 and 5) per decade
        mults = (1, 3) if hi / lo >= 30 else (1, 2, 5)
        ticks = [m * 10.0 ** k for k in range(k0 - 1, k1 + 1) for m in mults
                 if lo / 1.5 <= m * 10.0 ** k <= hi * 1.5]
    ax.yaxis.set_major_locator(FixedLocator(ticks))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: _sci(v)))
    ax.yaxis.set_minor_locator(NullLocator())  # minor ticks: many artists, little information


def _sci(v: float) -> str:
    if v <= 0:
        return ""
    k = math.floor(math.log10(v) + 1e-9)
    m = v / 10 ** k
    if 0 <= k <= 3 and abs(m - round(m)) < 1e-6:
        return f"{v:g}"
    head = "" if abs(m - 1) < 1e-6 else f"{m:g}×"
    return f"{head}10{str(k).translate(_SUP)}"


# ----------------------------------------------------------------------------- figure, legend
def new_figure(size: tuple[float, float] = (6.4, 4.6)):
    fig = figure(size, "attnio report's figures")
    fig.set_layout_engine("constrained")
    return fig, fig.subplots()


def finish(fig, ax, *, title: str, xlabel: str, ylabel: str, legend_cols: int = 2,
           handles=None, labels=None) -> None:
    """Labels, a light grid, and the legend below the axes (never over the data)."""
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=9.5)
    ax.grid(True, which="major", alpha=0.3)
    if handles is None:
        handles, labels = ax.get_legend_handles_labels()
    if handles:
        fig.legend(handles, labels, loc="outside lower center", fontsize=7, frameon=False,
                   ncols=min(legend_cols, len(handles)), handlelength=3.2,
                   columnspacing=1.2)


#: The resolution of the raster figures (PNG) by default, and the range ``dpi`` may take.
DEFAULT_DPI = 120
DPI_RANGE = (50, 1200)


def save(fig, out: str, stem: str, formats: Sequence[str], dpi: int = DEFAULT_DPI) -> str:
    """Write ``stem.<fmt>`` for every format (PNG always first, at ``dpi`` dots per inch);
    returns the PNG's name.  The constrained layout runs once (then the engine is switched
    off): each file is one draw."""
    fig.draw_without_rendering()
    fig.set_layout_engine("none")
    for fmt in formats:
        meta = {"Software": None} if fmt == "png" else (
            {"Creator": None, "Producer": None, "CreationDate": None} if fmt == "pdf"
            else {"Date": None})
        fig.savefig(os.path.join(out, f"{stem}.{fmt}"), dpi=dpi, metadata=meta)
    return stem + ".png"
