"""The rows a report reads: settings, and the bounds each row is held to.

A *setting* is what a figure and a best-configuration table hold fixed besides the sizes: (mask
alignment or None, window, batch, heads, kv_heads).

Which bounds apply to a row.  The sweep stores, with every row, the bounds whose preconditions
the workload meets (:func:`attnio.bounds.applicable_to`); those are bounds on *exact* attention
(Saha & Ye and the explicit forward bounds built on them), and they do not bind an algorithm
that computes an approximation.  :func:`for_report` therefore gives each approximate row the
bounds of :mod:`attnio.bounds.approximate` instead (``approx_w_stationary``, explicit for the
feature-space algorithms that form W = ψ(K)ᵀV in fast memory, when the row's tiling names its
feature count ``r``; one head, no mask and no window, the setting that bound is proved in), or
none, and recomputes ``bound``, ``bound_name`` and ``ratio`` from them.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

__all__ = ["approximate_bounds", "for_report", "setting_label"]

_DEFAULT_SETTING = (None, None, 1, 1, 1)
#: the marker :func:`for_report` leaves on an approximate row it has re-bounded (idempotence)
_APPROX_DONE = "_approx_bounds"


def _setting(r: dict) -> tuple:
    """(mask alignment or None, window, batch, heads, kv_heads) of a row."""
    heads = r.get("heads") or 1
    return (r.get("causal_align") if r.get("causal") else None, r.get("window"),
            r.get("batch") or 1, heads, r.get("kv_heads") or heads)


def setting_label(s: tuple) -> str:
    """A setting in words: ``causal (bottom-right), window 256, 8 heads / 2 KV heads (GQA)``."""
    mask, window, batch, heads, kvh = s
    parts = ["no mask" if mask is None else
             f"causal ({'bottom-right' if mask == 'bottom_right' else 'top-left'})"]
    if window is not None:
        parts.append(f"window {window}")
    if batch > 1:
        parts.append(f"batch {batch}")
    if heads > 1 or kvh != heads:
        kind = "" if kvh == heads else (" (multi-query)" if kvh == 1 else " (GQA)")
        parts.append(f"{heads} heads / {kvh} KV heads{kind}")
    return ", ".join(parts)


def _slug(s: tuple) -> str:
    """File-name suffix of a setting ('' and '_causal' for the seed papers' two settings)."""
    mask, window, batch, heads, kvh = s
    out = "" if mask is None else ("_causal" if mask == "bottom_right" else "_topleft")
    if window is not None:
        out += f"_w{window}"
    if batch > 1:
        out += f"_b{batch}"
    if heads > 1 or kvh != heads:
        out += f"_h{heads}kv{kvh}"
    return out


def _all_ok(rows: Iterable[dict]) -> list[dict]:
    return [r for r in rows if r["status"] == "ok" and r.get("total")]


def _ok_rows(rows: Iterable[dict]) -> list[dict]:
    """Rows that ran, in a setting of the seed papers' claims: no sliding window (a window makes
    the count linear in N); any heads, batch and grouping (every head is the same problem) and
    either mask alignment.  Fits and the exponent claims use them, each series within one
    setting."""
    return [r for r in _all_ok(rows) if r.get("window") is None]


def _decoded(v) -> dict:
    return v if isinstance(v, dict) else json.loads(v or "{}")


def approximate_bounds(r: dict) -> dict[str, dict]:
    """The explicit bounds of :mod:`attnio.bounds.approximate` that bind an approximate row, as
    :func:`attnio.runner.certificate` (the one function that computes a certificate) holds an
    approximate count to them: ``approx_w_stationary`` for one unmasked head without a window
    whose tiling names its feature count ``r``; ``{}`` otherwise (no approximate bound is proved
    there).  Rows stored before the sweep held approximate rows to these bounds get them here."""
    from ...core.workload import Shape
    from ...runner import certificate

    t = _decoded(r.get("tiling"))
    heads = r.get("heads") or 1
    if (r.get("causal") or r.get("window") is not None or (r.get("batch") or 1) != 1
            or heads != 1 or (r.get("kv_heads") or heads) != 1 or not t.get("r")
            or not all(r.get(k) for k in ("Nq", "Nkv", "d", "M"))):
        return {}
    cert = certificate(Shape(r["Nq"], r["Nkv"], r["d"]), r["M"], r.get("total") or 0,
                       exact=False, features=int(t["r"]))
    return {b.name: {"value": b.value, "theorem": b.theorem, "explicit": b.explicit,
                     "assumptions": list(b.assumptions)} for b in cert.bounds
            if b.name.startswith("approx_")}


def for_report(rows: Iterable[dict]) -> list[dict]:
    """The rows with each approximate row's bounds replaced by :func:`approximate_bounds` (and
    its ``bound``, ``bound_name``, ``ratio`` recomputed); exact rows unchanged.  Idempotent."""
    out = []
    for r in rows:
        if r.get("exact", True) or r.get(_APPROX_DONE) or r.get("status") != "ok":
            out.append(r)
            continue
        bounds = approximate_bounds(r)
        best = max(bounds, key=lambda k: bounds[k]["value"], default=None)
        value = bounds[best]["value"] if best else None
        out.append(dict(r, bounds=bounds, bound=value, bound_name=best,
                        ratio=(r["total"] / value if value and r.get("total") else None),
                        **{_APPROX_DONE: True}))
    return out


def _bounds(r: dict) -> dict[str, dict]:
    return _decoded(r.get("bounds"))


def _best_bound(r: dict) -> float | None:
    vals = [float(v["value"]) for v in _bounds(r).values() if v.get("explicit") and v.get("value")]
    return max(vals) if vals else None
