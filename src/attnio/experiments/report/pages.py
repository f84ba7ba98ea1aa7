"""The report's pages: the best configuration per workload point (``best.csv``), ``REPORT.md``
and a self-contained ``index.html`` (images embedded as data URIs)."""

from __future__ import annotations

import base64
import csv
import html
import os
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

from .claims import Claim
from .figures import FigureFile
from .fits import FLOOR_SHARE, Fit
from .rows import _DEFAULT_SETTING, _all_ok, _decoded, _setting, for_report, setting_label

__all__ = ["best_configurations"]

#: Rows of each best-configuration table in REPORT.md (all of them are in best.csv).
BEST_ROWS = 40


def best_configurations(rows: Iterable[dict]) -> list[dict]:
    """Per setting and workload point (Nq, Nkv, d, M, mode, eps, backward): the row of least
    total I/O, with the runner-up and its excess, and the ratio to the largest explicit bound
    (forward; and with the backward pass counted, the backward schedule, its count and its ratio
    to the largest explicit backward bound).  The planner's series (``plan``) names a schedule
    the group holds when that schedule was swept too: it is ranked only where it is alone."""
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for r in _all_ok(for_report(rows)):
        groups[(_setting(r), r["Nq"], r["Nkv"], r["d"], r["M"], r["mode"], r["eps"],
                bool(r.get("backward")))].append(r)
    out = []
    for key, rs in groups.items():
        rs = [r for r in rs if r["algorithm"] != "plan"] or rs
        rs = sorted(rs, key=lambda r: (r["total"] + (r.get("backward_total") or 0),
                                       r["algorithm"]))
        b, second = rs[0], (rs[1] if len(rs) > 1 else None)
        tiling = _decoded(b["tiling"])
        out.append({
            "setting": setting_label(key[0]), "Nq": b["Nq"], "Nkv": b["Nkv"], "d": b["d"],
            "M": b["M"], "mode": b["mode"], "eps": b["eps"], "algorithm": b["algorithm"],
            "tiling": _tiling_text(tiling), "total": b["total"],
            "ratio": b["ratio"], "bound_name": b["bound_name"],
            "backward_algorithm": b.get("backward_algorithm"),
            "backward_total": b.get("backward_total"),
            "backward_ratio": b.get("backward_ratio"),
            "backward_bound_name": b.get("backward_bound_name"),
            "runner_up": second["algorithm"] if second else None,
            "runner_up_excess": (second["total"] / b["total"] - 1) if second else None,
            "algorithms": len(rs), "_key": (key[0] != _DEFAULT_SETTING, str(key[0]), key[1:5]),
        })
    out.sort(key=lambda r: r.pop("_key"))
    return out


def _tiling_text(t: dict) -> str:
    keep = {k: v for k, v in t.items() if v is not None and not isinstance(v, (dict, list))
            and k not in ("M_rule", "scale", "kernel_error", "radius", "allow_unbounded",
                          "radius_pass", "variant")}
    return " ".join(f"{k}={v}" for k, v in keep.items())


def _write_best_csv(best: list[dict], path: str) -> None:
    cols = ["setting", "Nq", "Nkv", "d", "M", "mode", "eps", "algorithm", "tiling", "total",
            "ratio", "bound_name", "backward_algorithm", "backward_total", "backward_ratio",
            "backward_bound_name", "runner_up", "runner_up_excess", "algorithms"]
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(cols)
        for r in best:
            w.writerow(["" if r[c] is None else r[c] for c in cols])




# ----------------------------------------------------------------------------- REPORT.md
@dataclass
class Page:
    """What REPORT.md and index.html show."""

    summary: dict
    claims: list[Claim]
    fits: list[Fit]
    figures: list[FigureFile]
    skipped: list[tuple[str, int]]
    best: list[dict] = field(default_factory=list)
    settings: list[str] = field(default_factory=list)
    not_drawn: list[str] = field(default_factory=list)
    formats: tuple[str, ...] = ("png",)


def summary(rows, meta, db) -> dict:
    st: dict[str, int] = defaultdict(int)
    for r in rows:
        st[r["status"]] += 1
    return {"db": os.path.basename(db), "rows": len(rows), "status": dict(st),
            "versions": sorted({r["version"] for r in rows if r.get("version")}),
            "algorithms": sorted({r["algorithm"] for r in rows}),
            "schema": meta.get("schema_version"), "provenance": _provenance(meta)}


def _provenance(meta) -> str | None:
    """Where the rows were swept (the database's ``last_sweep_*`` metadata), in one sentence."""
    m = {k[len("last_sweep_"):]: v for k, v in meta.items() if k.startswith("last_sweep_")}
    if not m:
        return None
    commit = m.get("git_commit", "none")
    where = "" if commit == "none" else f" at git commit {commit[:12]}{'+dirty' if commit.endswith('+dirty') else ''}"
    return (f"swept with attnio {m.get('attnio', '?')}{where}, Python {m.get('python', '?')} "
            f"on {m.get('platform', '?')} (host {m.get('host', '?')}), last run "
            f"{m.get('at', '?')}")


def skips(rows) -> list[tuple[str, int]]:
    c: dict[str, int] = defaultdict(int)
    for r in rows:
        if r["status"] in ("skipped", "error"):
            reason = r.get("reason") or ""
            key = f"{r['status']}: {r['algorithm']}: " + (
                "M < min_M" if " < min_M=" in reason else reason[:120])
            c[key] += 1
    return sorted(c.items())


_MARK = {"pass": "PASS", "fail": "FAIL", "not covered": "not covered"}


def _backward_cells(b: dict) -> tuple[str, str]:
    """The backward I/O (with its schedule) and its ratio to the backward bound, or dashes."""
    if b.get("backward_total") is None:
        return "–", "–"
    r = b.get("backward_ratio")
    return (f"{b['backward_total']:,} ({b['backward_algorithm']})",
            f"{r:.2f}" if r else "–")


def _best_cells(b: dict) -> list[str]:
    ratio = f"{b['ratio']:.2f}" if b["ratio"] else "–"
    ru = f"{b['runner_up']} (+{100 * b['runner_up_excess']:.1f}%)" if b["runner_up"] else "–"
    mode = "" if b["mode"] == "count" else f" ({b['mode']})"
    eps = "" if b["eps"] is None else f" ε={b['eps']:g}"
    return [str(b["Nq"]), str(b["Nkv"]), str(b["d"]), str(b["M"]),
            f"{b['algorithm']}{eps}{mode}", b["tiling"], f"{b['total']:,}", ratio,
            *_backward_cells(b), ru]


_BEST_HEAD = ["Nq", "Nkv", "d", "M", "best", "tiling", "total I/O", "× bound", "backward I/O",
              "backward × bound", "runner-up"]


def _best_md(best: list[dict]) -> list[str]:
    lines: list[str] = []
    if not best:
        return ["No configuration ran, so there is no best configuration to show.", ""]
    for setting in dict.fromkeys(b["setting"] for b in best):
        rs = [b for b in best if b["setting"] == setting]
        lines += [f"### {setting}", "", "| " + " | ".join(_BEST_HEAD) + " |",
                  "|" + "---|" * len(_BEST_HEAD)]
        lines += ["| " + " | ".join(_best_cells(b)) + " |" for b in rs[:BEST_ROWS]]
        if len(rs) > BEST_ROWS:
            lines.append(f"| … {len(rs) - BEST_ROWS} more rows in best.csv |"
                         + " |" * (len(_BEST_HEAD) - 1))
        lines.append("")
    return lines


def _claims_md(table: list[Claim]) -> list[str]:
    covered = [c for c in table if c.status != "not covered"]
    missing = [c for c in table if c.status == "not covered"]
    lines = ["## Claims this grid covers", ""]
    if covered:
        lines += ["| claim | source | criterion | measured | result |", "|---|---|---|---|---|"]
        lines += [f"| {c.claim} | {c.source} | {c.criterion} | {c.measured} | "
                  f"**{_MARK[c.status]}** |" for c in covered]
        npass = sum(c.status == "pass" for c in covered)
        lines += ["", f"{npass} of {len(covered)} covered claims pass."]
    else:
        lines.append("None: the grid has no data for any claim of the seed papers.")
    if missing:
        lines += ["", "Not covered by this grid (no data, so neither passed nor failed):", ""]
        lines += [f"- {c.claim}: {c.measured}" for c in missing]
    return lines


def _fits_md(fits: list[Fit]) -> list[str]:
    if not fits:
        return []
    lines = [f"Fits: least squares of log(total I/O) on log(N) or log(M); exact algorithms "
             f"only on points whose read-once floor (Nq + 2Nkv)·d + Nq·d is below "
             f"{FLOOR_SHARE:.0%} of the total; M-series fitted separately on M < d² and "
             "M ≥ d²; each series within one setting, no window.", "",
             "## Fitted slopes", "",
             "| algorithm | variable | fixed | region | slope | points used | left out (floor) |",
             "|---|---|---|---|---|---|---|"]
    for f in fits:
        fixed = (f"d={f.d}, M={f.M}" if f.var == "N" else f"N={f.N}, d={f.d}") + (
            f", {setting_label(f.setting)}" if f.setting != _DEFAULT_SETTING else "") + (
            f", eps={f.eps}" if f.eps is not None else "") + (
            f", {f.mode}" if f.mode != "count" else "")
        lines.append(f"| {f.algorithm} | {f.var} | {fixed} | {f.region.replace('d2', 'd²')} | "
                     f"{f.label} | {len(f.points)} | {f.excluded} |")
    return lines + [""]


def markdown(p: Page) -> str:
    s = p.summary
    lines = ["# attnio report", "",
             f"Database `{s['db']}`: {s['rows']} rows "
             f"({', '.join(f'{v} {k}' for k, v in sorted(s['status'].items()))}), "
             f"attnio {', '.join(s['versions'])}, schema {s['schema']}; "
             f"algorithms: {', '.join(s['algorithms'])}.", ""]
    if s.get("provenance"):
        lines += [f"Provenance: {s['provenance']}.", ""]
    if p.settings:
        lines += ["Settings present: " + "; ".join(p.settings) + ".", ""]
    lines += _claims_md(p.claims)
    lines += ["", "## Best configuration per setting", "",
              "For every workload point, the algorithm (and tiling) of least total I/O, its ratio "
              "to the best explicit lower bound (exact-attention bounds for exact algorithms, "
              "approximate-attention bounds for approximate ones), and the runner-up; every "
              "point is in `best.csv`.", ""]
    lines += _best_md(list(p.best))
    lines += _fits_md(p.fits)
    if p.figures:
        lines += ["## Figures", ""]
        for i, fig in enumerate(p.figures, 1):
            others = ", ".join(f"[{f.upper()}]({fig.name[:-4]}.{f})" for f in p.formats
                               if f != "png")
            lines += [f"![{fig.name}]({fig.name})", "", f"*Figure {i}.* {fig.caption}"
                      + (f" ({others})" if others else ""), ""]
    if p.not_drawn:
        lines += ["## Figures not drawn", "", f"{len(p.not_drawn)} figures were left out "
                  "(raise `--max-figures` or `--figs-per-axis` to draw them):", ""]
        lines += [f"- {w}" for w in p.not_drawn] + [""]
    if p.skipped:
        lines += ["## Skipped and failed configurations", "", "| what | rows |", "|---|---|"]
        lines += [f"| {html.escape(k)} | {v} |" for k, v in p.skipped]
        lines.append("")
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------- index.html
_CSS = ("body{font-family:sans-serif;max-width:1100px;margin:auto;padding:1em}"
        "table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ccc;padding:3px 6px}"
        ".pass{color:#060;font-weight:bold}.fail{color:#a00;font-weight:bold}"
        ".na{color:#777;font-weight:bold}img{max-width:100%}figcaption{font-size:13px;"
        "color:#333;margin-bottom:1.5em}")


def _table(head: list[str], rows: list[list[str]], cls: list[str] | None = None) -> str:
    e = html.escape
    out = ["<table><tr>" + "".join(f"<th>{e(h)}</th>" for h in head) + "</tr>"]
    for i, r in enumerate(rows):
        cells = [f"<td>{e(c)}</td>" for c in r]
        if cls and cls[i]:
            cells[-1] = f"<td class='{cls[i]}'>{e(r[-1])}</td>"
        out.append("<tr>" + "".join(cells) + "</tr>")
    return "".join(out) + "</table>"


def page_html(p: Page, folder: str) -> str:
    e = html.escape
    s = p.summary
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>attnio report</title>"
             f"<style>{_CSS}</style></head><body>", "<h1>attnio report</h1>",
             f"<p>Database <code>{e(s['db'])}</code>: {s['rows']} rows ("
             + e(", ".join(f"{v} {k}" for k, v in sorted(s["status"].items())))
             + f"), attnio {e(', '.join(s['versions']))}; algorithms: "
             f"{e(', '.join(s['algorithms']))}.</p>"
             + (f"<p>Provenance: {e(s['provenance'])}.</p>" if s.get("provenance") else ""),
             "<h2>Claims this grid covers</h2>"]
    covered = [c for c in p.claims if c.status != "not covered"]
    cls = {"pass": "pass", "fail": "fail"}
    parts.append(_table(["claim", "source", "criterion", "measured", "result"],
                        [[c.claim, c.source, c.criterion, c.measured, _MARK[c.status]]
                         for c in covered], [cls[c.status] for c in covered]))
    missing = [c for c in p.claims if c.status == "not covered"]
    if missing:
        parts.append("<p>Not covered by this grid:</p><ul>"
                     + "".join(f"<li>{e(c.claim)}: {e(c.measured)}</li>" for c in missing)
                     + "</ul>")
    parts.append("<h2>Best configuration per setting</h2>")
    for setting in dict.fromkeys(b["setting"] for b in p.best):
        rs = [b for b in p.best if b["setting"] == setting][:BEST_ROWS]
        parts.append(f"<h3>{e(setting)}</h3>" + _table(_BEST_HEAD, [_best_cells(b) for b in rs]))
    parts.append("<h2>Figures</h2>")
    for i, fig in enumerate(p.figures, 1):
        with open(os.path.join(folder, fig.name), "rb") as f:
            b64 = base64.b64encode(f.read()).decode()
        parts.append(f"<figure><img alt='{e(fig.name)}' src='data:image/png;base64,{b64}'>"
                     f"<figcaption><b>Figure {i}.</b> {e(fig.caption)}</figcaption></figure>")
    if p.not_drawn:
        parts.append("<h2>Figures not drawn</h2><ul>"
                     + "".join(f"<li>{e(w)}</li>" for w in p.not_drawn) + "</ul>")
    parts.append("<h2>Fitted slopes</h2>" + _table(
        ["algorithm", "var", "d", "N", "M", "setting", "region", "slope", "points"],
        [[f.algorithm, f.var, str(f.d), str(f.N or ""), str(f.M or ""),
          setting_label(f.setting), f.region, f.label, str(len(f.points))] for f in p.fits]))
    if p.skipped:
        parts.append("<h2>Skipped and failed configurations</h2>"
                     + _table(["what", "rows"], [[k, str(v)] for k, v in p.skipped]))
    parts.append("</body></html>\n")
    return "\n".join(parts)
