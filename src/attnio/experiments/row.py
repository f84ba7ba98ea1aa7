"""One configuration of a sweep run into one row of the results store.

:func:`run_config` runs a :class:`~attnio.experiments.grid.Config` through :func:`attnio.run`
(count mode: shapes only; compute mode: seeded random inputs, the max error against the float64
reference, and with ``backward`` the gradients' error too), and returns its row: every count, the
closed form's prediction, the tiling, the certificate (the lower bounds that apply, the best
explicit one and the ratio, :func:`certificate`), the read-once floor and, with ``verify``, the
LRU and OPT replays of the element trace (:func:`verify_columns`).

A configuration the algorithm refuses with a :class:`~attnio.core.errors.ParameterError` (a user
error: it cannot run these parameters) becomes a *skipped* row with the reason; anything else
(a ``CapacityError`` of its own tiling rule, a ``ZeroDivisionError`` in a closed form, a
``ValueError`` from numpy) is a bug: an *error* row with the exception, which the sweep counts
(exit code 1) and a rerun tries again.  In a ``backward`` grid an algorithm without a backward
pass keeps its forward row: status ``ok``, ``backward`` 0 and ``reason`` starting with
:data:`FORWARD_ONLY`.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from typing import Any

import numpy as np

from ..algorithms import mapper
from ..algorithms.protocol import NO_BACKWARD
from ..core import masks
from ..core.errors import ParameterError
from ..core.version import __version__ as _VERSION
from ..core.workload import Shape
from ..runner import Certificate, run
from ..runner import certificate as _certificate
from .grid import Config
from .plan_series import PLAN, chosen, series
from .store import row_values

__all__ = ["FORWARD_ONLY", "VERIFY_MAX_EVENTS", "bounds_for", "certificate_columns", "count_certificate",
           "run_batch",
           "run_config", "skipped_row", "verify_columns"]

#: The start of ``reason`` on the forward row of an algorithm without a backward pass in a
#: ``backward`` grid (status ok: its forward counts are there, its backward columns are null).
FORWARD_ONLY = "forward only"

#: ``verify``: a trace longer than this many events is not replayed (its columns stay null and
#: ``verify_reason`` says why).  Recording the trace and the four replays (LRU and OPT at M and 2M)
#: cost a few seconds per configuration at the limit (`python benchmarks/bench_replay.py` measures
#: the replay throughput).
VERIFY_MAX_EVENTS = 2_000_000


# ----------------------------------------------------------------------------- the certificate
def _bound_dict(b) -> dict:
    return {"value": float(b.value), "theorem": str(b.theorem),
            "assumptions": _jsonable(getattr(b, "assumptions", None)),
            "explicit": bool(b.explicit), "regime": str(getattr(b, "regime", "") or "")}


def _bounds_json(cert: Certificate, key: tuple) -> tuple[dict, str]:
    """The ``bounds`` column of a certificate (``{name: {value, theorem, ...}}``) and its JSON,
    cached by ``key``: the bounds do not depend on the algorithm's count, so a grid over several
    algorithms encodes them once per workload."""
    hit = _BOUNDS_DOC.get(key)
    if hit is None:
        doc = {b.name: _bound_dict(b) for b in cert.bounds}
        hit = (doc, json.dumps(doc, sort_keys=True))
        if len(_BOUNDS_DOC) > 4096:
            _BOUNDS_DOC.clear()
        _BOUNDS_DOC[key] = hit
    return hit


_BOUNDS_DOC: dict[tuple, tuple[dict, str]] = {}


def certificate_columns(cert: Certificate, backward: Certificate | None = None, *,
                        key: tuple | None = None, encoded: bool = False) -> dict[str, Any]:
    """The certificate columns of a row, from the certificates the run attached
    (:func:`attnio.runner.certificate`, the one function that computes one): ``bounds`` (every
    bound that binds the count), ``bound`` and ``bound_name`` (the largest explicit one),
    ``ratio`` (``total / bound``; None for an approximate algorithm no approximate bound binds),
    and with a backward certificate the same for the backward pass.  ``encoded``: ``bounds`` as
    its JSON text (as the store holds it); ``key``: the workload, to encode its bounds once."""
    doc, text = (_bounds_json(cert, key) if key is not None else
                 ({b.name: _bound_dict(b) for b in cert.bounds}, None))
    if encoded and text is None:
        text = json.dumps(doc, sort_keys=True)
    best = cert.best_bound if cert.best_bound.explicit else None
    out: dict[str, Any] = {
        "bounds": text if encoded else doc, "bound": None if best is None else float(best.value),
        "bound_name": None if best is None else best.name, "ratio": cert.ratio}
    if backward is not None:
        bb = backward.best_bound if backward.best_bound.explicit else None
        out.update(backward_bound=None if bb is None else float(bb.value),
                   backward_bound_name=None if bb is None else bb.name,
                   backward_ratio=backward.ratio)
    return out


def count_certificate(shape: Shape, M: int, total: int, backward_total: int | None = None, *,
                encoded: bool = False) -> dict[str, Any]:
    """The certificate columns of an exact count ``total`` (and ``backward_total``) on a
    workload, without a run: :func:`certificate_columns` of :func:`attnio.runner.certificate`."""
    bwd = (None if backward_total is None else
           _certificate(shape, M, backward_total, backward=True))
    return certificate_columns(_certificate(shape, M, total), bwd, key=(shape, M, True, None),
                               encoded=encoded)


def bounds_for(cfg: Config) -> dict[str, dict[str, Any]]:
    """Lower bounds applicable to a configuration, ``{name: {value, theorem, explicit, ...}}``:
    :func:`attnio.bounds.applicable_to` (every bound whose preconditions hold)."""
    return count_certificate(cfg.shape, cfg.M, 0)["bounds"]


def _floor(shape: Shape) -> int:
    """Read-once floor: every input word read once and the output written once."""
    q, kv = shape.n_heads * shape.Nq, shape.n_kv_heads * shape.Nkv
    return (q + 2 * kv) * shape.d + q * shape.d


def _jsonable(x: Any) -> Any:
    if x is None or isinstance(x, (str, int, float, bool)):
        return x
    if isinstance(x, Mapping):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple, set)):
        return [_jsonable(v) for v in x]
    return str(x)


def _tiling_json(t: Any) -> dict:
    if dataclasses.is_dataclass(t) and not isinstance(t, type):  # an instance: a tiling
        return _jsonable(dataclasses.asdict(t))
    return _jsonable(t) if isinstance(t, Mapping) else {"value": _jsonable(t)}


# ----------------------------------------------------------------------------- rows
def _base_row(cfg: Config, alg) -> dict:
    s = cfg.shape
    return {
        "config_hash": cfg.hash(), "algorithm": cfg.algorithm, "kind": "attention",
        "exact": bool(alg.exact), "Nq": s.Nq, "Nkv": s.Nkv, "d": s.d, "M": cfg.M,
        "causal": s.causal, "causal_align": s.causal_align if s.causal else None,
        "batch": s.batch, "heads": s.heads, "kv_heads": s.kv_heads, "window": s.window,
        "mode": cfg.mode, "seed": cfg.seed if cfg.mode == "compute" else None,
        "eps": cfg.eps, "entry_bound": cfg.entry_bound, "version": _VERSION,
        "backward": cfg.backward,
        "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }


def skipped_row(cfg: Config, reason: str) -> dict:
    """The row of a configuration that cannot run: status ``skipped`` and the reason."""
    row = _base_row(cfg, series(cfg.algorithm))
    row.update(status="skipped", reason=reason)
    return row


def _tiling_for(alg, cfg: Config):
    """None (the default tiling) for exact algorithms; for approximate ones the mapping
    ``{"eps": eps, "entry_bound": B}`` of their Tiling (|Q|, |K| <= B fixes the score range)."""
    if alg.exact:
        return None
    fields = {f.name for f in dataclasses.fields(alg.Tiling)}
    if not {"eps", "entry_bound"} <= fields:
        raise ParameterError(f"{alg.name}: its Tiling has no eps/entry_bound fields to pass "
                             f"eps={cfg.eps} to")
    return {"eps": cfg.eps, "entry_bound": cfg.entry_bound}


def _data(cfg: Config) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Compute-mode inputs, seeded by (seed, sizes[, batch, heads, kv_heads]): standard normal;
    for an approximate algorithm Q and K uniform in [-B, B] (B = entry_bound, the range its
    guarantee assumes).  One head: (N, d) matrices; several: (B, H, N, d) and (B, Hkv, Nkv, d)."""
    s = cfg.shape
    kvh = s.n_kv_heads // s.batch
    multi = (s.batch, s.heads, kvh) != (1, 1, 1)
    seed = [cfg.seed, s.Nq, s.Nkv, s.d] + ([s.batch, s.heads, kvh] if multi else [])
    rng = np.random.default_rng(seed)
    qs = (s.batch, s.heads, s.Nq, s.d) if multi else (s.Nq, s.d)
    ks = (s.batch, kvh, s.Nkv, s.d) if multi else (s.Nkv, s.d)
    if cfg.entry_bound is not None:
        B = cfg.entry_bound
        Q = rng.uniform(-B, B, qs)
        K = rng.uniform(-B, B, ks)
        return Q, K, rng.standard_normal(ks)
    return rng.standard_normal(qs), rng.standard_normal(ks), rng.standard_normal(ks)


def verify_columns(cfg: Config, alg, tiling: Any) -> dict:
    """``lru_M, opt_M, lru_2M, opt_2M`` (total words: reads + writes of a write-back cache of M
    and 2M words, 1-word lines) from replaying the schedule's element trace
    (:func:`attnio.trace`, recorded with the tiling the explicit run used), ``trace_events``, and
    ``verify_reason`` (None when replayed; else why the columns are null).  Exact attention
    algorithms in count mode only, traces of at most :data:`VERIFY_MAX_EVENTS` events."""
    out: dict[str, Any] = {"lru_M": None, "opt_M": None, "lru_2M": None, "opt_2M": None,
                           "trace_events": None}
    if not alg.exact:
        out["verify_reason"] = f"verify replays exact algorithms only ({alg.name} is not)"
        return out
    if cfg.mode != "count":
        out["verify_reason"] = "verify runs in count mode only (the trace does not depend on data)"
        return out
    # every visible (query, key) score is touched at least once: a cheap lower bound on the events
    least = cfg.shape.n_heads * masks.row_counts(cfg.shape).pairs
    if least > VERIFY_MAX_EVENTS:
        out["verify_reason"] = (f"trace longer than VERIFY_MAX_EVENTS={VERIFY_MAX_EVENTS:,} "
                                f"(at least {least:,} score events)")
        return out
    from ..cachesim.caches import replay
    from ..cachesim.tracing import trace

    tr = trace(alg.name, shape=cfg.shape, M=cfg.M, tiling=tiling)
    n = len(tr)
    out["trace_events"] = n
    if n > VERIFY_MAX_EVENTS:
        out["verify_reason"] = f"trace of {n:,} events > VERIFY_MAX_EVENTS={VERIFY_MAX_EVENTS:,}"
        return out
    for f, tag in ((1, "M"), (2, "2M")):
        for p in ("lru", "opt"):
            out[f"{p}_{tag}"] = replay(tr, f * cfg.M, p).total
    out["verify_reason"] = None
    return out


def _measure(cfg: Config, alg, backward: bool, tiling: Any = None) -> tuple[Any, float | None]:
    """(the run's result, the max error against the float64 reference in compute mode);
    ``tiling`` (given: the planner's choice) replaces the algorithm's default."""
    shape = cfg.shape
    if tiling is None:
        tiling = _tiling_for(alg, cfg)
    if cfg.mode == "count":
        return run(alg.name, shape=shape, M=cfg.M, mode="count", tiling=tiling,
                   backward=backward), None
    Q, K, V = _data(cfg)
    dO = (np.random.default_rng([cfg.seed, 1, shape.Nq, shape.d]).standard_normal(Q.shape)
          if backward else None)
    res = run(alg.name, Q, K, V, M=cfg.M, shape=shape, tiling=tiling, backward=backward,
              grad_output=dO, check=True)  # the run checks against the float64 reference
    errs = [e for e in (res.max_abs_err, res.max_abs_grad_err if backward else None)
            if e is not None]
    return res, (max(errs) if errs else None)


def run_config(cfg: Config | Mapping) -> dict:
    """Run one configuration and return its row (status ok, or skipped/error with a reason)."""
    return _run_row(cfg, encoded=False)


def _run_row(cfg: Config | Mapping, encoded: bool) -> dict:
    """The row of one configuration; ``encoded``: the JSON columns as strings (for the store)."""
    if isinstance(cfg, Mapping):
        cfg = Config(**cfg)
    alg = series(cfg.algorithm)
    row = _base_row(cfg, alg)
    backward = cfg.backward and mapper.supports(alg, NO_BACKWARD)  # else: its forward row, marked
    t0 = time.perf_counter()
    try:
        picked = None
        if cfg.algorithm == PLAN:  # the planner's choice, run as it chose it
            alg, picked, _ = chosen(cfg.shape, cfg.M, backward)
        res, err = _measure(cfg, alg, backward, picked)
        wall = time.perf_counter() - t0
        # the closed form (the tiling was validated by the run); the forward of a backward run
        # writes the logsumexp too
        cost = alg.cost(res.shape, res.tiling, lse=backward)
        pred = cost.io
        verify = verify_columns(cfg, alg, res.tiling) if cfg.verify else {}
    except ParameterError as e:  # it cannot run this configuration (a user error, not a bug)
        row.update(status="skipped", reason=f"{alg.name}: {e}", wall_s=time.perf_counter() - t0)
        return row
    except Exception as e:  # noqa: BLE001 - a bug: an error row, counted, retried on the next run
        row.update(status="error", reason=f"{type(e).__name__}: {e}", wall_s=time.perf_counter() - t0)
        return row
    io, b = res.io, (res.backward_io if backward else None)
    per_array: dict[str, list[int]] | str = {k: [v.reads, v.writes]
                                             for k, v in io.per_array.items()}
    tiling_doc: dict[str, Any] | str = _tiling_json(res.tiling)
    if cfg.algorithm == PLAN:  # the row of the planner's series names the schedule it chose
        tiling_doc = {"schedule": alg.name, **_tiling_json(res.tiling)}
    if encoded:
        per_array = json.dumps(per_array, sort_keys=True)
        tiling_doc = json.dumps(tiling_doc, sort_keys=True)
    row.update(
        status="ok", reason=None, reads=io.reads, writes=io.writes, total=io.total, peak=io.peak,
        steps=io.steps, per_array=per_array,
        predicted_reads=pred.reads, predicted_writes=pred.writes, tiling=tiling_doc,
        floor=_floor(res.shape), max_err=err, wall_s=wall, **verify,
        **certificate_columns(res.certificate, res.backward_certificate if b is not None else None,
                              key=(res.shape, cfg.M, alg.exact, cost.features),
                              encoded=encoded))
    if b is not None:
        row.update(backward=True, backward_algorithm=res.backward_algorithm,
                   backward_reads=b.reads, backward_writes=b.writes, backward_total=b.total)
    elif cfg.backward:
        row.update(backward=False, reason=f"{FORWARD_ONLY}: {alg.name} has no backward pass "
                                          "(supports_backward is False); its forward counts")
    return row


def run_batch(cfgs: Sequence[Config | Mapping]) -> list[dict]:
    """Run several configurations (one task of a Dask worker)."""
    return [run_config(c) for c in cfgs]


def run_values(cfgs: Sequence[Config]) -> list[tuple]:
    """One task of the local pool: configurations in, store rows as value tuples out (compact to
    send between processes, ready for one ``executemany``)."""
    return [row_values(_run_row(c, encoded=True)) for c in cfgs]


def prepare(cfgs: Sequence[Config]) -> None:
    """The certificates' few-segment bound searches of these configurations in batches
    (:func:`attnio.bounds.prepare`, the same values): a sweep calls it once per task, before
    its rows.  Only a warm-up: a configuration it cannot take is left to its row, which reports
    it."""
    from .. import bounds as _bounds

    work = [(c.shape, c.M) for c in cfgs if isinstance(c.shape, Shape) and type(c.M) is int]
    back = any(c.backward for c in cfgs)
    try:
        _bounds.prepare(work, backward=back)
    except Exception:  # noqa: BLE001 - the rows compute (and report) whatever failed here
        return


def run_encoded(cfg: Config) -> tuple:
    """The store row of one configuration, as a value tuple."""
    return row_values(_run_row(cfg, encoded=True))
