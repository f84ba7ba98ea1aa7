"""Context-parallel sweeps: every scheme's best candidate over P (closed forms,
:mod:`attnio.parallel`) with the bound, into the results database; the words-per-device figure
with fitted log-log slopes.

The rows live in the ``cp_results`` table of the same SQLite database as the sweep rows (the
database is opened, checked and set up by :class:`~attnio.experiments.store.ResultsStore`
first; the one-chip ``results`` table is left as it is).  A row is one (scheme, workload, P,
pass) and its primary key the hash of those (:func:`cp_hash`), so a rerun skips the rows present
and an interrupted sweep leaves whole rows only (one transaction a batch): resumable like
``attnio sweep``.  ``status`` is ``ok`` (the least words per device over the scheme's mapspace,
its parameters, total words, the most input-row words a processor holds, the bound and the ratio),
``skipped`` (the scheme cannot run it: ``reason`` names the parameter; the bound is still stored)
or ``error`` (retried by a rerun).  ``attnio cp sweep`` and ``attnio cp figure`` drive it.

>>> import os, tempfile
>>> from attnio.core.workload import Shape
>>> db = os.path.join(tempfile.mkdtemp(), "cp.sqlite")
>>> s = cp_sweep(db, Shape(4096, 4096, 64, heads=8), (1, 2, 4, 8), ("ring", "ulysses"))
>>> (s.total, s.ran, s.skipped), cp_sweep(db, Shape(4096, 4096, 64, heads=8), (8,), ("ring",)).ran
((8, 8, 0), 0)
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from ..core.errors import ParameterError
from ..core.workload import Shape

__all__ = ["CP_COLUMNS", "CPSweepSummary", "cp_db_figure", "cp_figure", "cp_hash", "cp_report_section",
           "cp_rows", "cp_row", "cp_sweep", "fit_slopes"]

#: (name, SQLite type) of every column of the ``cp_results`` table.
CP_COLUMNS: tuple[tuple[str, str], ...] = (
    ("config_hash", "TEXT"),
    ("status", "TEXT"),            # ok | skipped | error
    ("reason", "TEXT"),
    ("scheme", "TEXT"),
    ("params", "TEXT"),            # JSON: the best candidate's parameters
    ("P", "INTEGER"),
    ("Nq", "INTEGER"),
    ("Nkv", "INTEGER"),
    ("d", "INTEGER"),
    ("batch", "INTEGER"),
    ("heads", "INTEGER"),
    ("kv_heads", "INTEGER"),
    ("causal", "TEXT"),            # none | bottom_right | top_left
    ("window", "INTEGER"),
    ("backward", "INTEGER"),       # 1: the forward and backward passes together
    ("words_per_device", "INTEGER"),   # the critical path: max over processors, sent + received
    ("total_words", "INTEGER"),
    ("footprint", "INTEGER"),      # most words of input rows a processor holds
    ("bound", "INTEGER"),
    ("bound_theorem", "TEXT"),
    ("ratio", "REAL"),             # words_per_device / bound
    ("version", "TEXT"),
    ("created_at", "TEXT"),
)
_NAMES = tuple(c for c, _ in CP_COLUMNS)


def _mask(shape: Shape) -> str:
    return shape.causal_align if shape.causal else "none"


def cp_hash(scheme: str, shape: Shape, P: int, backward: bool = False) -> str:
    """The row's key: what was asked (scheme, workload, P, pass), not the library version."""
    key = {"scheme": scheme, "Nq": shape.Nq, "Nkv": shape.Nkv, "d": shape.d, "batch": shape.batch,
           "heads": shape.heads, "kv_heads": shape.kv_heads, "causal": _mask(shape),
           "window": shape.window, "P": P, "backward": bool(backward)}
    blob = json.dumps(key, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:32]


def cp_row(scheme: str, shape: Shape, P: int, backward: bool = False) -> dict[str, Any]:
    """One row: the scheme's best candidate at P by closed form, or why it cannot run."""
    from ..core.version import __version__
    from ..parallel import footprint, get
    from ..parallel.planner import plan, plan_bound

    row: dict[str, Any] = {
        "config_hash": cp_hash(scheme, shape, P, backward), "scheme": scheme, "P": P,
        "Nq": shape.Nq, "Nkv": shape.Nkv, "d": shape.d, "batch": shape.batch,
        "heads": shape.heads, "kv_heads": shape.kv_heads, "causal": _mask(shape),
        "window": shape.window, "backward": int(bool(backward)), "version": __version__,
        "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    try:
        row["bound"], row["bound_theorem"] = plan_bound(shape, P, backward=backward)
        ms = get(scheme).mapspace(shape, P)
        if not ms.supported:
            param, msg = ms.reasons[0] if ms.reasons else ("P", "no legal parameters")
            row.update(status="skipped", reason=f"{param}: {msg}")
            return row
        p = plan(shape, P, scheme, backward=backward)
        fp = max(footprint(scheme, shape, P, p.params, backward=backward))
        row.update(status="ok", params=json.dumps(p.params, sort_keys=True),
                   words_per_device=p.words_per_device, total_words=p.total_words,
                   footprint=fp, ratio=None if not row["bound"] else
                   p.words_per_device / row["bound"])
    except ParameterError as e:
        row.update(status="skipped", reason=str(e))
    except Exception as e:  # noqa: BLE001 - stored, retried by a rerun
        row.update(status="error", reason=f"{type(e).__name__}: {e}")
    return row


def _open(path: str) -> sqlite3.Connection:
    from .store import ResultsStore

    ResultsStore(path).close()  # refuses what is not an attnio store; sets up WAL and schema
    con = sqlite3.connect(path, timeout=5.0)
    cols = ",\n  ".join(f"{n} {t}{' PRIMARY KEY' if n == 'config_hash' else ''}"
                        for n, t in CP_COLUMNS)
    with con:
        con.execute(f"CREATE TABLE IF NOT EXISTS cp_results (\n  {cols}\n)")
    return con


@dataclass(frozen=True)
class CPSweepSummary:
    total: int      # rows the sweep asks for
    already: int    # present before (ok or skipped)
    ran: int        # computed now
    skipped: int    # of them, skipped (the scheme cannot run it)
    errors: int
    db: str

    def __str__(self) -> str:
        return (f"{self.total} context-parallel rows: {self.already} already in {self.db}, "
                f"{self.ran} computed now ({self.skipped} skipped with a reason, "
                f"{self.errors} errors)")


def cp_sweep(path: str, shape: Shape, Ps: Iterable[int], schemes: Sequence[str], *,
             backward: bool = False, batch: int = 64) -> CPSweepSummary:
    """Every scheme of ``schemes`` at every P of ``Ps`` on ``shape`` into ``path``'s
    ``cp_results``; rows already there (ok or skipped) are not recomputed, error rows are."""
    from ..parallel import get
    from ..parallel.base import check_P

    Ps = sorted({check_P(P) for P in Ps})
    for s in schemes:
        get(s)  # an unknown name, before anything is written
    con = _open(path)
    try:
        done = {r[0] for r in con.execute(
            "SELECT config_hash FROM cp_results WHERE status != 'error'")}
        todo = [(s, P) for P in Ps for s in schemes
                if cp_hash(s, shape, P, backward) not in done]
        total = len(Ps) * len(schemes)
        ran = skipped = errors = 0
        marks = ", ".join("?" * len(_NAMES))
        for i in range(0, len(todo), batch):
            rows = [cp_row(s, shape, P, backward) for s, P in todo[i:i + batch]]
            with con:  # one transaction a batch: whole rows only
                con.executemany(f"INSERT OR REPLACE INTO cp_results ({', '.join(_NAMES)}) "
                                f"VALUES ({marks})", [tuple(r.get(n) for n in _NAMES)
                                                      for r in rows])
            ran += len(rows)
            skipped += sum(r["status"] == "skipped" for r in rows)
            errors += sum(r["status"] == "error" for r in rows)
        return CPSweepSummary(total, total - len(todo), ran, skipped, errors, path)
    finally:
        con.close()


def cp_rows(path: str) -> list[dict[str, Any]]:
    """Every row of ``path``'s ``cp_results`` (read-only), ``params`` decoded."""
    from .store import ResultsStore, _ro_uri

    ResultsStore(path, readonly=True).close()
    con = sqlite3.connect(_ro_uri(path), uri=True)
    try:
        con.row_factory = sqlite3.Row
        tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if "cp_results" not in tables:
            raise ParameterError(f"{path!r} holds no context-parallel rows: run `attnio cp "
                                 f"sweep --db {path} ...` first", param="db")
        out = [dict(r) for r in con.execute("SELECT * FROM cp_results ORDER BY P, scheme")]
    finally:
        con.close()
    for r in out:
        r["params"] = json.loads(r["params"]) if r["params"] else None
    return out


def _workload(r: dict[str, Any]) -> str:
    mask = "" if r["causal"] == "none" else f" causal={r['causal']}"
    win = "" if r["window"] is None else f" window={r['window']}"
    kv = "" if r["kv_heads"] == r["heads"] else f" kv_heads={r['kv_heads']}"
    b = "" if r["batch"] == 1 else f" batch={r['batch']}"
    n = f"N={r['Nq']}" if r["Nq"] == r["Nkv"] else f"Nq={r['Nq']} Nkv={r['Nkv']}"
    return (f"{n} d={r['d']} heads={r['heads']}{kv}{b}{mask}{win}"
            + (" (forward + backward)" if r["backward"] else ""))


def fit_slopes(rows: Sequence[dict[str, Any]], lo: int = 64, hi: int = 1024
               ) -> dict[str, dict[str, float]]:
    """Least-squares log-log slopes of words per device against P over ``lo <= P <= hi``, per
    workload and scheme (and ``bound``), from at least two points with words > 0."""
    import numpy as np

    series: dict[str, dict[str, list[tuple[int, float]]]] = {}
    bounds: dict[str, dict[int, float]] = {}
    for r in rows:
        w = _workload(r)
        if r["bound"] is not None:
            bounds.setdefault(w, {})[r["P"]] = r["bound"]
        if r["status"] == "ok":
            series.setdefault(w, {}).setdefault(r["scheme"], []).append(
                (r["P"], r["words_per_device"]))
    out: dict[str, dict[str, float]] = {}
    for w in sorted(set(series) | set(bounds)):
        named = dict(series.get(w, {}))
        named["bound"] = sorted(bounds.get(w, {}).items())
        for name, pts in named.items():
            pts = [(p, v) for p, v in pts if lo <= p <= hi and v > 0]
            if len(pts) >= 2:
                x = np.log([p for p, _ in pts])
                y = np.log([v for _, v in pts])
                out.setdefault(w, {})[name] = float(np.polyfit(x, y, 1)[0])
    return out


def cp_db_figure(db: str, out: str, *, lo: int = 64,
                 hi: int = 1024) -> dict[str, dict[str, float]]:
    """:func:`cp_figure` of every row of ``db``'s ``cp_results`` (``attnio cp figure``): the
    slopes fitted over ``[lo, hi]``, by workload and scheme."""
    return cp_figure(cp_rows(db), out, lo=lo, hi=hi)


def cp_figure(rows: Sequence[dict[str, Any]], out: str, *, lo: int = 64, hi: int = 1024,
              schemes: Sequence[str] = ("ring", "zigzag", "ulysses", "usp", "grid",
                                        "window_ring")) -> dict[str, dict[str, float]]:
    """Words per device against P, log-log, one panel per workload: every scheme's best
    candidate and the bound, each labelled with its slope fitted over ``[lo, hi]``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    slopes = fit_slopes(rows, lo, hi)
    work = sorted({_workload(r) for r in rows})
    if not work:
        raise ParameterError("no context-parallel rows to draw", param="db")
    fig, axes = plt.subplots(1, len(work), figsize=(5.5 * len(work), 4.2), squeeze=False)
    for ax, w in zip(axes[0], work):
        mine = [r for r in rows if _workload(r) == w]
        for name in (*schemes, "bound"):
            if name == "bound":
                pts = sorted({(r["P"], r["bound"]) for r in mine if r["bound"]})
            else:
                pts = sorted((r["P"], r["words_per_device"]) for r in mine
                             if r["scheme"] == name and r["status"] == "ok"
                             and r["words_per_device"] > 0)
            if not pts:
                continue
            sl = slopes.get(w, {}).get(name)
            label = name + ("" if sl is None else f" (slope {sl:+.2f})")
            style = {"color": "k", "linestyle": "--"} if name == "bound" else {
                "color": f"C{schemes.index(name) % 10}", "marker": "o", "markersize": 3}
            ax.loglog([p for p, _ in pts], [v for _, v in pts], label=label, base=2, **style)
        ax.set_xlabel("P (devices)")
        ax.set_ylabel("words per device (sent + received)")
        ax.set_title(w, fontsize=9)
        ax.legend(fontsize=7)
        ax.grid(True, which="both", alpha=0.3)
    fig.suptitle(f"Context parallelism: words per device against P (slopes fitted over "
                 f"P = {lo}..{hi})", fontsize=10)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return slopes


def cp_report_section(db: str, out: str) -> str | None:
    """For ``attnio report``: when ``db`` holds context-parallel rows, draw their figure into
    ``out`` (``cp_words_vs_P.png``), write the slopes (``cp_fits.json``) and append a section to
    ``out/REPORT.md``; the figure's name, or None when there are no such rows."""
    import os

    try:
        rows = cp_rows(db)
    except ParameterError:
        return None
    if not rows:
        return None
    name = "cp_words_vs_P.png"
    slopes = cp_figure(rows, os.path.join(out, name))
    with open(os.path.join(out, "cp_fits.json"), "w") as fh:
        json.dump({"fit_P": [64, 1024], "slopes": slopes}, fh, indent=1)
        fh.write("\n")
    lines = ["", "## Context parallelism", "",
             f"{len(rows)} rows of `attnio cp sweep`: every scheme's best candidate (closed form) "
             "and the bound, words per device against P; log-log slopes fitted over "
             "P = 64..1024 (docs/parallel.md).", "", f"![words per device against P]({name})", "",
             "| workload | series | slope |", "|---|---|---|"]
    for w, sl in slopes.items():
        lines += [f"| {w} | {k} | {v:+.3f} |" for k, v in sl.items()]
    with open(os.path.join(out, "REPORT.md"), "a") as fh:
        fh.write("\n".join(lines) + "\n")
    return name
