"""Every registered schedule's choices, counts and outputs frozen (issue 33: the Schedule protocol
and the mapper must change where the code lives, not what it decides).

``tests/data/schedule_regression.json`` records, on a grid of small workloads (unmasked, causal of
both alignments, a sliding window, a block-sparse layout, grouped-query heads, Nq != Nkv, M from
too small to roomy), what the code of commit 87d79b8 did with every registered forward schedule
(approx_poly at eps = 1e-3, entry bound 1) and every registered backward schedule:

* ``run`` in count mode with the default tiling: the tiling, reads and writes (forward and, for
  schedules that write the logsumexp, the backward pass), or the kind and parameter of the refusal
  (approx_poly at d = 4 only: its count-mode run walks its feature blocks one by one);
* every schedule's best candidate tiling as the planner scores it (``plan(..., backward=True)``:
  each candidate's tiling, count, steps and tilings scored, and each skipped one's name);
* on the smallest workloads, ``run`` in compute mode: a checksum of the output and the gradients.

Schedules registered later (not in the file) are not checked here.  Regenerate only when a
change of choice is intended, and say why in the commit:
``PYTHONPATH=src python tests/algorithms/test_schedule_regression.py --write``.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import sys
from typing import Any

import numpy as np
import pytest

import attnio
from attnio import algorithms as _alg
from attnio.core.blockmask import BlockMask
from attnio.core.errors import AttnioError
from attnio.core.workload import Shape
from attnio.runner import BackwardPass

DATA = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data",
                    "schedule_regression.json")
APPROX = {"eps": 1e-3, "entry_bound": 1.0}


def _grid() -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    masks: list[dict[str, Any]] = [{}, {"causal": True}, {"causal": "top_left"},
                                   {"causal": True, "window": 9}, {"block": 8}]
    for N, Nkv, d, heads, kv in ((17, None, 4, 1, None), (40, 23, 8, 4, 2), (64, None, 16, 2, 1),
                                 (30, 70, 8, 1, None)):
        for mask in masks:
            for M in (3 * d + 5, 8 * d + 20, d * d, 4 * d * d, 8192):
                out.append(dict(N=N, Nkv=Nkv, d=d, heads=heads, kv_heads=kv, M=M, **mask))
    return out


GRID = _grid()


def _shape(kw: dict[str, Any]) -> tuple[Shape, int]:
    kw = dict(kw)
    M, N, d, block = kw.pop("M"), kw.pop("N"), kw.pop("d"), kw.pop("block", None)
    if block is not None:
        Nkv = kw["Nkv"] or N
        kw["block_mask"] = BlockMask.random(N, Nkv, block, density=0.5, seed=N + Nkv)
    return Shape.make(N, d, **kw), M


def _plain(x: Any) -> Any:
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        x = dataclasses.asdict(x)
    if isinstance(x, float):
        return float(f"{x:.12g}")
    if isinstance(x, dict):
        return {k: _plain(v) for k, v in x.items()}
    return x


def _refusal(e: AttnioError) -> dict[str, Any]:
    return {"refused": type(e).__name__, "param": getattr(e, "param", None)}


def _run_record(name: str, shape: Shape, M: int) -> dict[str, Any]:
    alg = _alg.get(name)
    tiling = None if alg.exact else dict(APPROX)
    back = BackwardPass() if alg.supports_backward else False
    try:
        res = attnio.run(name, shape=shape, M=M, tiling=tiling, backward=back)
    except AttnioError as e:
        if not back:
            return _refusal(e)
        try:  # the forward alone may run where no backward schedule fits
            res = attnio.run(name, shape=shape, M=M, tiling=tiling)
        except AttnioError as e2:
            return _refusal(e2)
        out = _forward(res)
        out["backward"] = _refusal(e)
        return out
    out = _forward(res)
    if res.backward_io is not None:
        out["backward"] = {"algorithm": res.backward_algorithm,
                           "tiling": _plain(res.backward_tiling),
                           "reads": res.backward_io.reads, "writes": res.backward_io.writes}
    return out


def _forward(res: Any) -> dict[str, Any]:
    return {"tiling": _plain(res.tiling), "reads": res.io.reads, "writes": res.io.writes}


def _backward_records(shape: Shape, M: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in _alg.backward_names():
        try:
            res = attnio.run("flash2", shape=shape, M=M, backward=BackwardPass(algorithm=name))
        except AttnioError as e:
            out[name] = _refusal(e)
            continue
        assert res.backward_io is not None
        out[name] = {"tiling": _plain(res.backward_tiling), "reads": res.backward_io.reads,
                     "writes": res.backward_io.writes}
    return out


def _candidates(c: Any) -> list[dict[str, Any]]:
    return [{"algorithm": x.algorithm, "tiling": _plain(x.tiling), "reads": x.predicted.reads,
             "writes": x.predicted.writes, "steps": x.steps, "tried": x.tried} for x in c]


def _plan_record(shape: Shape, M: int) -> dict[str, Any]:
    from attnio.planner import plan_shape

    try:
        p = plan_shape(shape, M, approx_eps=APPROX["eps"], entry_bound=APPROX["entry_bound"],
                       backward=True)
    except AttnioError as e:
        try:
            p = plan_shape(shape, M, approx_eps=APPROX["eps"],
                           entry_bound=APPROX["entry_bound"])
        except AttnioError as e2:
            return _refusal(e2)
        return {"candidates": _candidates(p.candidates),
                "skipped": sorted(a for a, _ in p.skipped), "backward": _refusal(e)}
    assert p.backward is not None
    return {"candidates": _candidates(p.candidates), "skipped": sorted(a for a, _ in p.skipped),
            "backward": {"candidates": _candidates(p.backward.candidates),
                         "skipped": sorted(a for a, _ in p.backward.skipped)}}


def _checksum(x: np.ndarray) -> list[float]:
    x = np.asarray(x, dtype=np.float64)
    return [float(f"{x.sum():.10g}"), float(f"{np.abs(x).sum():.10g}")]


def _compute_record(name: str, shape: Shape, M: int) -> dict[str, Any]:
    alg = _alg.get(name)
    rng = np.random.default_rng(33)
    q = rng.standard_normal((shape.n_heads * shape.Nq, shape.d)) * 0.5
    k = rng.standard_normal((shape.n_kv_heads * shape.Nkv, shape.d)) * 0.5
    v = rng.standard_normal((shape.n_kv_heads * shape.Nkv, shape.d))
    tiling = None if alg.exact else dict(APPROX)
    try:
        res = attnio.run(name, q, k, v, shape=shape, M=M, tiling=tiling,
                         backward=alg.supports_backward)
    except AttnioError as e:
        return _refusal(e)
    out: dict[str, Any] = {"output": _checksum(res.output), "reads": res.io.reads,
                           "writes": res.io.writes}
    if res.grads is not None:
        out["grads"] = {g: _checksum(res.grads[g]) for g in sorted(res.grads)}
    return out


def _record(kw: dict[str, Any]) -> dict[str, Any]:
    shape, M = _shape(kw)
    # approx_poly's count-mode run walks its r/rb feature blocks one by one: run at d = 4 only
    # (its closed form is in the plan's candidates everywhere)
    runs = [n for n in _alg.names() if _alg.get(n).exact or shape.d <= 4]
    rec: dict[str, Any] = {"run": {n: _run_record(n, shape, M) for n in runs},
                           "backward": _backward_records(shape, M),
                           "registered": _alg.names(),
                           "plan": _plan_record(shape, M)}
    if shape.Nq <= 17 and M >= 4 * shape.d * shape.d:
        rec["compute"] = {n: _compute_record(n, shape, M) for n in _alg.names()}
    return rec


def _close(a: Any, b: Any) -> bool:
    """Equal, value for value (checksums of float outputs within 1e-9 relative)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_close(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b))
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)
    return bool(a == b)


def _load() -> list[dict[str, Any]]:
    with open(DATA) as f:
        return list(json.load(f))


def _recorded_only(rec: dict[str, Any], now: dict[str, Any]) -> dict[str, Any]:
    """``now`` restricted to the schedules ``rec`` knows (later registrations are not checked)."""
    out = dict(now)
    out["registered"] = [n for n in now["registered"] if n in rec["registered"]]
    for key in ("run", "backward", "compute"):
        if key in rec and key in now:
            out[key] = {n: v for n, v in now[key].items() if n in rec[key]}
    if "plan" in rec and "candidates" in now.get("plan", {}):
        known = set(rec["registered"])
        p = dict(now["plan"])
        p["candidates"] = [c for c in p["candidates"] if c["algorithm"] in known]
        p["skipped"] = [a for a in p["skipped"] if a in known]
        if isinstance(p.get("backward"), dict) and "candidates" in p["backward"]:
            kb = set(rec["backward"])
            b = dict(p["backward"])
            b["candidates"] = [c for c in b["candidates"] if c["algorithm"] in kb]
            b["skipped"] = [a for a in b["skipped"] if a in kb]
            p["backward"] = b
        out["plan"] = p
    return out


@pytest.mark.parametrize("i", range(0, len(GRID)))
def test_every_schedule_decides_and_counts_as_recorded(i: int) -> None:
    rec = _load()[i]
    assert rec["workload"] == GRID[i]
    now = _recorded_only(rec, json.loads(json.dumps(_record(GRID[i]))))  # tuples as in the file
    assert now["registered"] == rec["registered"]
    for key in ("run", "backward", "plan", "compute"):
        assert (key in rec) == (key in now), key
        if key in rec:
            for name in (rec[key] if key != "plan" else [None]):
                want = rec[key] if name is None else rec[key][name]
                got = now[key] if name is None else now[key].get(name)
                assert _close(want, got), (GRID[i], key, name, want, got)


def _write() -> None:  # pragma: no cover - regeneration
    out = []
    for kw in GRID:
        out.append({"workload": kw, **_record(kw)})
    with open(DATA, "w") as f:
        json.dump(out, f, indent=0, sort_keys=True)
        f.write("\n")
    print(f"wrote {len(out)} workloads to {DATA}")


if __name__ == "__main__":  # pragma: no cover
    if "--write" in sys.argv:
        _write()
