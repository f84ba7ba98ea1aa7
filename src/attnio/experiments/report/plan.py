"""Which figures a report draws: every setting's figures against each swept axis, the overlays
that compare settings, and the error plot; then the cap (``max_figures``), with every figure
it leaves out listed by name, never dropped silently.

Order: each setting's first figure before any setting's second one (and the overlays after the
first round), so that a cap still leaves every setting a figure whenever it allows one each.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from .figures import FigureFile, Look, error_vs_io, io_vs_axis, overlay, ratio_vs_M
from .rows import _DEFAULT_SETTING, _slug, setting_label

__all__ = ["FIGS_PER_AXIS", "planned_figures"]

#: Figures drawn per setting and per swept axis (the fixed values with the most points first).
FIGS_PER_AXIS = 2

_AXES = {"N": ("d", "M"), "M": ("N", "d"), "d": ("N", "M")}


@dataclass
class Job:
    """A figure to draw: its file stem, what it shows (for the list of figures not drawn), its
    place in the drawing order, and the function that draws it."""

    stem: str
    what: str
    rank: tuple
    draw: Callable[[], FigureFile | None]


def _count_rows(rows: list[dict]) -> list[dict]:
    """The rows a figure draws: count mode, or compute mode where a point has no count row."""
    have = {(r["algorithm"], r["Nq"], r["Nkv"], r["d"], r["M"]) for r in rows
            if r["mode"] == "count"}
    return [r for r in rows if r["mode"] == "count"
            or (r["algorithm"], r["Nq"], r["Nkv"], r["d"], r["M"]) not in have]


def _groups(rows: list[dict], axis: str) -> dict[tuple, list[dict]]:
    """Square-problem rows varying along ``axis`` (>= 2 values) with the other sizes fixed."""
    g: dict[tuple, list[dict]] = defaultdict(list)
    for r in rows:
        if r["Nq"] != r["Nkv"]:
            continue
        v = {"N": r["Nq"], "d": r["d"], "M": r["M"]}
        g[tuple(v[k] for k in _AXES[axis])].append(dict(r, N=r["Nq"]))
    return {k: v for k, v in g.items() if len({r[axis] for r in v}) >= 2}


def _axis_groups(rows: list[dict], axis: str, per_axis: int) -> list[tuple[tuple, list[dict]]]:
    """Every group of ``axis``, in drawing order: the ones with the most points first, the
    first ``per_axis`` of them spread evenly over the fixed values; then the others."""
    groups = sorted(_groups(rows, axis).items(), key=lambda kv: kv[0])
    if not groups:
        return []
    npts = {k: len({r[axis] for r in v}) for k, v in groups}
    most = max(npts.values())
    best = [kv for kv in groups if npts[kv[0]] == most]
    rest = sorted((kv for kv in groups if npts[kv[0]] < most), key=lambda kv: -npts[kv[0]])
    if len(best) > per_axis > 0:
        step = (len(best) - 1) / max(1, per_axis - 1)
        first = [best[round(i * step)] for i in range(per_axis)]
        best = first + [kv for kv in best if kv not in first]
    return best + rest


def _setting_jobs(i: int, s: tuple, rows: list[dict], look: Look, per_axis: int
                  ) -> tuple[list[Job], list[str]]:
    """One setting's figures (and, beyond ``per_axis`` per axis, what is left out)."""
    jobs: list[Job] = []
    left: list[str] = []
    label = setting_label(s)
    for axis in ("N", "M", "d"):
        for j, (fixed, rs) in enumerate(_axis_groups(rows, axis, per_axis)):
            fx = dict(zip(_AXES[axis], fixed))
            stem = f"io_vs_{axis}_" + "_".join(f"{k}{v}" for k, v in fx.items()) + _slug(s)
            what = f"I/O vs {axis} at {', '.join(f'{k}={v}' for k, v in fx.items())} ({label})"
            if j >= per_axis:
                left.append(f"{stem}: {what} (beyond figs_per_axis={per_axis})")
                continue
            jobs.append(Job(stem, what, (len(jobs), 0, i),
                            partial(io_vs_axis, rs, axis, fx, s, look, stem)))
            if axis == "M" and s[1:] == _DEFAULT_SETTING[1:]:  # one head: the ratio too
                rstem = stem.replace("io_vs_", "ratio_vs_", 1)
                jobs.append(Job(rstem, f"ratio to the bound vs M ({label})", (len(jobs), 0, i),
                                partial(ratio_vs_M, rs, fx["N"], fx["d"], s, look, rstem)))
    return jobs, left


#: (name in a file, title, the setting field that varies: 0 mask, 1 window, 4 KV heads)
_COMPARISONS = (("gqa", "GQA against full heads", 4), ("window", "sliding windows", 1),
                ("causal", "causal against no mask", 0))


def _varying_label(f: int, s: tuple) -> str:
    """The one field a comparison varies, in words (the legend of an overlay)."""
    if f == 0:
        return setting_label((s[0], None, 1, 1, 1))
    if f == 1:
        return "no window" if s[1] is None else f"window {s[1]}"
    heads, kvh = s[3], s[4]
    return (f"{kvh} KV heads (full: one per head)" if kvh == heads else
            f"{kvh} KV heads ({'multi-query' if kvh == 1 else 'GQA'})")


def _common_label(f: int, common: tuple) -> str:
    """The fields an overlay holds fixed, in words (its title), without the varying one: a
    comparison of masks never names a mask here (its settings say which masks it compares)."""
    words = setting_label(common).split(", ")
    if f == 0 or (words and words[0] == "no mask"):
        words = words[1:]
    if f == 4:
        words = [w for w in words if "heads" not in w] + [f"{common[3]} query heads"]
    return ", ".join(words) or "one head"


def _comparisons(settings: list[tuple]) -> list[tuple[str, str, tuple, list[tuple]]]:
    """(kind, title, the common setting, the settings compared) for each group of settings
    that differ in one field only: the KV heads, the window, or the mask."""
    out = []
    for kind, title, f in _COMPARISONS:
        groups: dict[tuple, list[tuple]] = defaultdict(list)
        for s in settings:
            groups[s[:f] + s[f + 1:]].append(s)
        for _, ss in sorted(groups.items(), key=lambda kv: str(kv[0])):
            if len({s[f] for s in ss}) >= 2:
                ss = sorted(ss, key=lambda s: (s[f] is not None, str(s[f]) if f == 0 else
                                               (s[f] or 0) * (-1 if f == 4 else 1)))
                common = list(ss[0])
                common[f] = common[3] if f == 4 else None
                out.append((kind, title, tuple(common), ss))
    return out


def _overlay_job(n: int, comp, by_setting: dict[tuple, list[dict]], look: Look) -> Job | None:
    """An overlay of the compared settings along the first axis (N, M, d) on which they share a
    group of fixed values (the one with the most points)."""
    kind, title, common, ss = comp
    for axis in ("N", "M", "d"):
        gs = [_groups(by_setting[s], axis) for s in ss]
        shared = set(gs[0]).intersection(*gs[1:])
        if not shared:
            continue
        fixed = max(sorted(shared), key=lambda k: min(len({r[axis] for r in g[k]}) for g in gs))
        fx = dict(zip(_AXES[axis], fixed))
        stem = (f"overlay_{kind}_vs_{axis}_" + "_".join(f"{k}{v}" for k, v in fx.items())
                + _slug(common))
        what = f"{title}: I/O vs {axis} ({'; '.join(setting_label(s) for s in ss)})"
        f = {"gqa": 4, "window": 1, "causal": 0}[kind]
        rows = {s: g[fixed] for s, g in zip(ss, gs)}
        names = {s: _varying_label(f, s) for s in ss}
        compared = " against ".join(names[s] for s in ss)
        return Job(stem, what, (1, 1, n), partial(overlay, rows, names, axis, fx, compared,
                                                  _common_label(f, common), look, stem))
    return None


def planned_figures(by_setting: dict[tuple, list[dict]], every: list[dict], look: Look,
                    per_axis: int) -> tuple[list[Job], list[str]]:
    """Every figure of the report in drawing order, and the figures ``per_axis`` leaves out."""
    order = sorted(by_setting, key=lambda s: (s != _DEFAULT_SETTING, str(s)))
    counted = {s: _count_rows(by_setting[s]) for s in order}
    jobs: list[Job] = []
    left: list[str] = []
    for i, s in enumerate(order):
        js, lf = _setting_jobs(i, s, counted[s], look, per_axis)
        jobs += js
        left += lf
    for n, comp in enumerate(_comparisons(order)):
        job = _overlay_job(n, comp, counted, look)
        if job is not None:
            jobs.append(job)
    if any(not r["exact"] and r.get("max_err") for r in every):
        jobs.append(Job("error_vs_io", "approximate attention: error vs I/O", (2, 2, 0),
                        partial(error_vs_io, every, look)))
    jobs.sort(key=lambda j: j.rank)
    return jobs, left
