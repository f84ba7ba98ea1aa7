"""Sweeps: grids of configurations run into a results database (:mod:`attnio.store`).

A :class:`Grid` names value lists for ``N`` (or ``Nq`` x ``Nkv``), ``d``, ``M``, the algorithms
(``"all"`` = every registered one, whatever its kind), the mask (``causal`` False/True/both), the
mode (``count``: shapes only; ``compute``: random standard-normal data, max error against
:func:`attnio.reference.attention`), a seed and an optional ``eps`` for approximate algorithms.
:func:`expand` turns grids into :class:`Config` s and records, for each configuration an algorithm
cannot run, a *skipped* row with the reason (``M < min_M``, an approximate algorithm without
``eps``, an error of its parameters).  :func:`run_sweep` runs what the database does not hold yet
(local processes, or a Dask distributed cluster), writing each batch of rows in one transaction.

Value lists use ``START:STOP:xF`` (geometric, factor F), ``START:STOP:+S`` (arithmetic), or
commas: ``"256:16384:x2"``, ``"16,64,128"``, ``"64,256:1024:x4"``.

>>> [c.M for c in expand(Grid(N=(64,), d=(8,), M=parse_values("M", "64:256:x2"),
...                          algorithms=("flash2",))).configs]
[64, 128, 256]
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import math
import os
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import numpy as np
import tomllib

from . import algorithms as _alg
from .algorithms.base import Shape
from .errors import AttnioError, CapacityError, ParameterError
from .store import ResultsStore

__all__ = [
    "PRESETS",
    "Config",
    "Expansion",
    "Grid",
    "SweepSummary",
    "bounds_for",
    "expand",
    "grids_from_toml",
    "parse_causal",
    "parse_values",
    "run_config",
    "run_sweep",
]

_MAX_VALUES = 100_000


# ----------------------------------------------------------------------------- value lists
def parse_values(name: str, spec: Any) -> tuple[int, ...]:
    """Expand ``"a:b:xF"``, ``"a:b:+S"``, ``"a,b,c"`` (or an int / a list) into sorted ints."""
    if isinstance(spec, bool):
        raise ParameterError(f"{name}: expected integers, got {spec!r}")
    if isinstance(spec, (int, np.integer)):
        return (_positive(name, int(spec)),)
    if isinstance(spec, (list, tuple)):
        out: set[int] = set()
        for s in spec:
            out.update(parse_values(name, s))
        return tuple(sorted(out))
    if not isinstance(spec, str):
        raise ParameterError(f"{name}: expected a value list like '256:16384:x2', got {spec!r}")
    out = set()
    for part in (p.strip() for p in spec.split(",")):
        if not part:
            continue
        if ":" not in part:
            out.add(_positive(name, _int(name, part)))
            continue
        bits = part.split(":")
        if len(bits) not in (2, 3):
            raise ParameterError(f"{name}: range {part!r} must be START:STOP[:xF|:+S]")
        lo, hi = _int(name, bits[0]), _int(name, bits[1])
        step = bits[2].strip() if len(bits) == 3 else "x2"
        _positive(name, lo)
        if hi < lo:
            raise ParameterError(f"{name}: range {part!r} has STOP {hi} < START {lo} (an empty grid)")
        if step.startswith(("x", "*")):
            f = _int(name, step[1:])
            if f < 2:
                raise ParameterError(f"{name}: geometric factor in {part!r} must be >= 2, got {f}")
            v = lo
            while v <= hi:
                out.add(v)
                v *= f
                _guard(name, out)
        elif step.startswith("+") or step.lstrip("-").isdigit():
            s = _int(name, step.lstrip("+"))
            if s < 1:
                raise ParameterError(f"{name}: arithmetic step in {part!r} must be >= 1, got {s}")
            for v in range(lo, hi + 1, s):
                out.add(v)
                _guard(name, out)
        else:
            raise ParameterError(f"{name}: step {step!r} in {part!r} must be xF (geometric) or +S")
    if not out:
        raise ParameterError(f"{name}: {spec!r} gives no values (an empty grid)")
    return tuple(sorted(out))


def _int(name: str, s: str) -> int:
    try:
        return int(s.strip())
    except ValueError:
        raise ParameterError(f"{name}: {s.strip()!r} is not an integer") from None


def _positive(name: str, v: int) -> int:
    if v < 1:
        raise ParameterError(f"{name}: values must be integers >= 1, got {v}")
    return v


def _guard(name: str, out: set) -> None:
    if len(out) > _MAX_VALUES:
        raise ParameterError(f"{name}: more than {_MAX_VALUES} values; use a coarser step")


def parse_causal(spec: Any) -> tuple[bool, ...]:
    """``"both"`` -> (False, True); ``"true"/"yes"/"1"`` -> (True,); ``"false"/"no"/"0"`` -> (False,)."""
    if isinstance(spec, bool):
        return (spec,)
    if isinstance(spec, (list, tuple)):
        return tuple(sorted({b for s in spec for b in parse_causal(s)}))
    s = str(spec).strip().lower()
    if s == "both":
        return (False, True)
    if s in ("true", "yes", "1", "causal", "on"):
        return (True,)
    if s in ("false", "no", "0", "none", "off"):
        return (False,)
    raise ParameterError(f"causal must be 'both', 'true' or 'false', got {spec!r}")


def parse_algorithms(spec: Any) -> tuple[str, ...]:
    """``"all"`` (every registered algorithm), ``"kind:matmul"``, or a comma list of names."""
    if isinstance(spec, str):
        parts = [p.strip() for p in spec.split(",") if p.strip()]
    else:
        parts = [str(p).strip() for p in spec]
    if not parts:
        raise ParameterError("algo: no algorithm named (an empty grid); use 'all' or names")
    out: list[str] = []
    for p in parts:
        if p == "all":
            new = _alg.names(None)
        elif p.startswith("kind:"):
            new = _alg.names(p[5:])
            if not new:
                raise ParameterError(f"algo: no registered algorithm of kind {p[5:]!r}")
        else:
            new = [_alg.get(p).name]  # UnknownNameError suggests close names
        out.extend(n for n in new if n not in out)
    return tuple(out)


# ----------------------------------------------------------------------------- grids
@dataclass(frozen=True)
class Grid:
    """One rectangular grid.  ``Nq``/``Nkv`` (both given) replace the square ``N`` list."""

    N: tuple[int, ...] = ()
    d: tuple[int, ...] = (64,)
    M: tuple[int, ...] = (16384,)
    algorithms: tuple[str, ...] = ("all",)
    causal: tuple[bool, ...] = (False,)
    mode: str = "count"
    seed: int = 0
    eps: float | None = None
    entry_bound: float = 1.0
    Nq: tuple[int, ...] = ()
    Nkv: tuple[int, ...] = ()

    def sizes(self) -> list[tuple[int, int]]:
        if self.Nq or self.Nkv:
            if not (self.Nq and self.Nkv):
                raise ParameterError("give both Nq and Nkv (or N for square problems)")
            return [(q, k) for q in self.Nq for k in self.Nkv]
        return [(n, n) for n in self.N]


@dataclass(frozen=True)
class Config:
    """One configuration of a sweep; :meth:`hash` is its primary key in the store."""

    algorithm: str
    Nq: int
    Nkv: int
    d: int
    M: int
    causal: bool
    mode: str = "count"
    seed: int = 0
    eps: float | None = None
    entry_bound: float | None = None

    def key(self) -> dict:
        k = {"algorithm": self.algorithm, "Nq": self.Nq, "Nkv": self.Nkv, "d": self.d,
             "M": self.M, "causal": self.causal, "mode": self.mode}
        if self.mode == "compute":
            k["seed"] = self.seed
        if self.eps is not None:
            k["eps"] = float(self.eps)
        if self.entry_bound is not None:
            k["entry_bound"] = float(self.entry_bound)
        return k

    def hash(self) -> str:
        blob = json.dumps(self.key(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()[:32]

    @property
    def shape(self) -> Shape:
        return Shape(self.Nq, self.Nkv, self.d)


@dataclass
class Expansion:
    """Configurations to run, and (configuration, reason) pairs that cannot run."""

    configs: list[Config] = field(default_factory=list)
    skipped: list[tuple[Config, str]] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.configs) + len(self.skipped)


def expand(grids: Grid | Iterable[Grid]) -> Expansion:
    """All configurations of the grids (deduplicated, in grid order), with skip reasons."""
    if isinstance(grids, Grid):
        grids = [grids]
    grids = list(grids)
    if not grids:
        raise ParameterError("grid: no grid given (an empty grid)")
    out = Expansion()
    seen: set[str] = set()
    for g in grids:
        if g.mode not in ("count", "compute"):
            raise ParameterError(f"mode must be 'count' or 'compute', got {g.mode!r}")
        names = parse_algorithms(g.algorithms)
        sizes = g.sizes()
        if not sizes or not g.d or not g.M or not g.causal:
            empty = [n for n, v in (("N", sizes), ("d", g.d), ("M", g.M), ("causal", g.causal)) if not v]
            raise ParameterError(f"grid: no values for {', '.join(empty)} (an empty grid)")
        if g.eps is not None and not (0 < g.eps < 1):
            raise ParameterError(f"eps must be in (0, 1), got {g.eps}")
        if not (isinstance(g.entry_bound, (int, float)) and 0 < g.entry_bound < math.inf):
            raise ParameterError(f"entry_bound must be a positive number, got {g.entry_bound!r}")
        for name in names:
            alg = _alg.get(name)
            for (nq, nkv) in sizes:
                for d in g.d:
                    for causal in g.causal:
                        min_m, why = _min_M(alg, _alg_shape(alg, (nq, nkv, d)), causal)
                        for M in g.M:
                            eps = None if alg.exact else g.eps
                            eb = None if alg.exact else float(g.entry_bound)
                            cfg = Config(alg.name, nq, nkv, d, M, causal, g.mode, g.seed, eps, eb)
                            h = cfg.hash()
                            if h in seen:
                                continue
                            seen.add(h)
                            reason = why or _skip_reason(alg, cfg, min_m)
                            if reason:
                                out.skipped.append((cfg, reason))
                            else:
                                out.configs.append(cfg)
    if not out.configs and not out.skipped:
        raise ParameterError("grid: it expands to no configuration (an empty grid)")
    return out


def _min_M(alg, shape: Shape, causal: bool) -> tuple[int | None, str | None]:
    try:
        return alg.min_M(shape, causal), None
    except (ParameterError, ValueError) as e:
        return None, f"{alg.name} cannot run this shape: {e}"


def _skip_reason(alg, cfg: Config, min_m: int | None) -> str | None:
    if min_m is not None and cfg.M < min_m:
        return f"M={cfg.M} < min_M={min_m} of {alg.name} for d={cfg.d}"
    if alg.kind == "matmul" and cfg.causal:
        return f"{alg.name} is a matmul building block (S = Q·Kᵀ): it has no causal mask"
    if alg.kind not in ("attention", "matmul"):
        return f"{alg.name} has kind {alg.kind!r}, which the sweep does not know how to run"
    if not alg.exact and cfg.eps is None:
        return f"{alg.name} is approximate and needs an error target: give --eps"
    return None


# ----------------------------------------------------------------------------- presets
def _g(**kw) -> Grid:
    conv = {"N": "N", "d": "d", "M": "M", "Nq": "Nq", "Nkv": "Nkv"}
    for k in conv:
        if k in kw:
            kw[k] = parse_values(k, kw[k])
    if "causal" in kw:
        kw["causal"] = parse_causal(kw["causal"])
    if "algorithms" in kw:
        kw["algorithms"] = tuple(kw["algorithms"].split(","))
    return Grid(**kw)


#: Named sweeps.  ``paper`` is the default reproduction sweep of the seed papers (count mode):
#: N-scaling at fixed d, M (both masks); M-scaling across the M = d^2 crossover for three head
#: dimensions; approximate attention on a small head dimension when an approximate algorithm is
#: registered.  ``smoke`` is a seconds-long subset for trying the pipeline.
PRESETS: dict[str, list[Grid]] = {
    "paper": [
        _g(N="1024:65536:x2", d="64", M="4096,16384", causal="false"),
        _g(N="1024:16384:x2", d="64", M="4096", causal="true"),
        _g(N="16384", d="32,64,128", M="64:1048576:x2", causal="false"),
        _g(N="1024:65536:x2", d="8", M="65536,262144", eps=1e-2, causal="false"),
        *(_g(N="256", d="8", M="65536,262144", eps=e, causal="false", mode="compute",
             algorithms="approx_poly,flash2") for e in (1e-1, 1e-2, 1e-3)),
    ],
    "smoke": [
        _g(N="256:2048:x2", d="16", M="1024", causal="both"),
        _g(N="1024", d="16", M="64:16384:x2", causal="false"),
    ],
}


def grids_from_toml(path: str) -> list[Grid]:
    """Grids from a TOML file: top-level keys (one grid) and/or ``[[grid]]`` tables, keys
    ``N Nq Nkv d M algo causal mode seed eps`` (values as on the command line or TOML lists)."""
    try:
        with open(path, "rb") as f:
            doc = tomllib.load(f)
    except FileNotFoundError:
        raise ParameterError(f"config: no such file {path!r}") from None
    except tomllib.TOMLDecodeError as e:
        raise ParameterError(f"config: {path!r} is not valid TOML ({e})") from None
    tables = list(doc.pop("grid", []))
    if doc:
        tables.insert(0, doc)
    return [grid_from_mapping(t, where=path) for t in tables]


_GRID_KEYS = {"N", "Nq", "Nkv", "d", "M", "algo", "algorithms", "causal", "mode", "seed", "eps",
              "entry_bound"}


def grid_from_mapping(t: Mapping[str, Any], *, where: str = "grid") -> Grid:
    unknown = set(t) - _GRID_KEYS
    if unknown:
        raise ParameterError(f"{where}: unknown key(s) {sorted(unknown)}; known: {sorted(_GRID_KEYS)}")
    kw: dict[str, Any] = {}
    for k in ("N", "Nq", "Nkv", "d", "M"):
        if k in t:
            kw[k] = parse_values(k, t[k])
    algo = t.get("algo", t.get("algorithms", "all"))
    kw["algorithms"] = tuple(algo.split(",")) if isinstance(algo, str) else tuple(algo)
    if "causal" in t:
        kw["causal"] = parse_causal(t["causal"])
    for k in ("mode", "seed", "eps", "entry_bound"):
        if k in t:
            kw[k] = t[k]
    return Grid(**kw)


# ----------------------------------------------------------------------------- bounds
def _alg_shape(alg, cfg_or_sizes) -> Any:
    """The algorithm's own shape: attention ``Shape(Nq, Nkv, d)``; for a ``matmul`` algorithm the
    score product S = Q·Kᵀ of the same sizes, ``(m, k, n) = (Nq, d, Nkv)``."""
    nq, nkv, d = cfg_or_sizes
    if alg.kind == "matmul":
        return (nq, d, nkv)
    return Shape(nq, nkv, d)


def _bound_dict(b) -> dict:
    return {"value": float(b.value), "theorem": str(b.theorem),
            "assumptions": _jsonable(getattr(b, "assumptions", None)),
            "explicit": bool(b.explicit), "regime": str(getattr(b, "regime", "") or "")}


def bounds_for(cfg: Config, kind: str = "attention") -> dict[str, dict]:
    """Lower bounds applicable to a configuration, ``{name: {value, theorem, explicit, ...}}``.

    Attention: :func:`attnio.bounds.applicable` (every bound whose preconditions hold); a
    ``matmul`` row (S = Q·Kᵀ, m×k×n = Nq×d×Nkv): :func:`attnio.bounds.matmul` and
    :func:`attnio.bounds.matmul_cosma`.  Bounds whose preconditions fail are left out.
    """
    from . import bounds as _b

    out: dict[str, dict] = {}
    if kind == "attention":
        found = _b.applicable(cfg.Nq, cfg.d, cfg.M, Nkv=cfg.Nkv, causal=cfg.causal)
    elif kind == "matmul":
        found = []
        for fn in (_b.matmul, _b.matmul_cosma):
            try:
                found.append(fn(cfg.Nq, cfg.d, cfg.Nkv, cfg.M))
            except ValueError:
                continue
    else:
        found = []
    for i, b in enumerate(found):
        out[str(getattr(b, "name", "") or f"bound{i}")] = _bound_dict(b)
    return out


def _floor(cfg: Config, kind: str) -> int | None:
    """Read-once floor: every input word read once and the output written once."""
    if kind == "attention":
        return (cfg.Nq + 2 * cfg.Nkv) * cfg.d + cfg.Nq * cfg.d
    if kind == "matmul":
        return cfg.Nq * cfg.d + cfg.d * cfg.Nkv + cfg.Nq * cfg.Nkv
    return None


def _jsonable(x: Any) -> Any:
    if x is None or isinstance(x, (str, int, float, bool)):
        return x
    if isinstance(x, Mapping):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple, set)):
        return [_jsonable(v) for v in x]
    return str(x)


# ----------------------------------------------------------------------------- one configuration
def _base_row(cfg: Config, alg) -> dict:
    from . import __version__

    return {
        "config_hash": cfg.hash(), "algorithm": cfg.algorithm, "kind": alg.kind,
        "exact": bool(alg.exact), "Nq": cfg.Nq, "Nkv": cfg.Nkv, "d": cfg.d, "M": cfg.M,
        "causal": cfg.causal, "mode": cfg.mode, "seed": cfg.seed if cfg.mode == "compute" else None,
        "eps": cfg.eps, "entry_bound": cfg.entry_bound, "version": __version__,
        "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }


def skipped_row(cfg: Config, reason: str) -> dict:
    row = _base_row(cfg, _alg.get(cfg.algorithm))
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
    """Compute-mode inputs, seeded by (seed, sizes): standard normal; for an approximate
    algorithm Q and K uniform in [-B, B] (B = entry_bound, the range its guarantee assumes)."""
    rng = np.random.default_rng([cfg.seed, cfg.Nq, cfg.Nkv, cfg.d])
    if cfg.entry_bound is not None:
        B = cfg.entry_bound
        Q = rng.uniform(-B, B, (cfg.Nq, cfg.d))
        K = rng.uniform(-B, B, (cfg.Nkv, cfg.d))
        return Q, K, rng.standard_normal((cfg.Nkv, cfg.d))
    return (rng.standard_normal((cfg.Nq, cfg.d)), rng.standard_normal((cfg.Nkv, cfg.d)),
            rng.standard_normal((cfg.Nkv, cfg.d)))


def run_config(cfg: Config | Mapping) -> dict:
    """Run one configuration and return its row (status ok, or skipped/error with a reason)."""
    from . import reference
    from .runner import run

    if isinstance(cfg, Mapping):
        cfg = Config(**cfg)
    alg = _alg.get(cfg.algorithm)
    row = _base_row(cfg, alg)
    t0 = time.perf_counter()
    try:
        tiling = _tiling_for(alg, cfg)
        shape = _alg_shape(alg, (cfg.Nq, cfg.Nkv, cfg.d))
        err = None
        if alg.kind == "matmul":
            from .algorithms.matmul import run_matmul

            if cfg.mode == "count":
                res = run_matmul(shape=shape, M=cfg.M, mode="count", tiling=tiling)
            else:
                Q, K, _ = _data(cfg)
                res = run_matmul(Q, K.T.copy(), M=cfg.M, tiling=tiling)
                err = float(np.abs(res.output - Q @ K.T).max())
            wall = time.perf_counter() - t0
            pred = alg.predicted_io(shape, cfg.M, tiling=res.tiling)
        else:
            if cfg.mode == "count":
                res = run(alg.name, shape=shape, M=cfg.M, mode="count", causal=cfg.causal,
                          tiling=tiling)
            else:
                Q, K, V = _data(cfg)
                res = run(alg.name, Q, K, V, M=cfg.M, causal=cfg.causal, tiling=tiling)
                ref = reference.attention(Q, K, V, causal=cfg.causal)
                err = float(np.abs(res.output - ref).max())
            wall = time.perf_counter() - t0
            pred = alg.predicted_io(shape, cfg.M, tiling=res.tiling, causal=cfg.causal)
    except CapacityError as e:  # the algorithm's own tiling rule broke the capacity: a bug
        row.update(status="error", reason=f"CapacityError: {e}", wall_s=time.perf_counter() - t0)
        return row
    except (ParameterError, ValueError) as e:  # it cannot run this configuration
        row.update(status="skipped", reason=f"{alg.name}: {e}", wall_s=time.perf_counter() - t0)
        return row
    except Exception as e:  # noqa: BLE001 - recorded on the row, retried on the next run
        row.update(status="error", reason=f"{type(e).__name__}: {e}", wall_s=time.perf_counter() - t0)
        return row
    io = res.io
    bounds = bounds_for(cfg, alg.kind)
    explicit = {k: v for k, v in bounds.items() if v["explicit"]}
    best = max(explicit, key=lambda k: explicit[k]["value"]) if explicit else None
    bound = explicit[best]["value"] if best else None
    floor = _floor(cfg, alg.kind)
    row.update(
        status="ok", reason=None, reads=io.reads, writes=io.writes, total=io.total, peak=io.peak,
        steps=io.steps, per_array={k: [v.reads, v.writes] for k, v in io.per_array.items()},
        predicted_reads=pred.reads, predicted_writes=pred.writes,
        tiling=_tiling_json(res.tiling), bounds=bounds, bound=bound, bound_name=best,
        ratio=(io.total / bound) if bound else None, floor=floor, max_err=err, wall_s=wall,
    )
    return row


def _tiling_json(t: Any) -> dict:
    if dataclasses.is_dataclass(t):
        return _jsonable(dataclasses.asdict(t))
    return _jsonable(t) if isinstance(t, Mapping) else {"value": _jsonable(t)}


def run_batch(cfgs: Sequence[Mapping]) -> list[dict]:
    """Run several configurations (one task of a pool or a Dask worker)."""
    return [run_config(c) for c in cfgs]


# ----------------------------------------------------------------------------- the sweep
@dataclass
class SweepSummary:
    total: int          # configurations in the grid
    already: int        # present in the database before this run
    ran: int            # run now (ok, skipped at run time or error)
    skipped: int        # skipped rows written now (expansion + run time)
    errors: int
    wall_s: float
    db: str

    def __str__(self) -> str:
        return (f"{self.total} configurations: {self.already} already in {self.db}, "
                f"{self.ran} run now, {self.skipped} stored as skipped with a reason, "
                f"{self.errors} errors ({self.wall_s:.1f} s)")


def _batches(items: list, size: int) -> list[list]:
    return [items[i:i + size] for i in range(0, len(items), size)]


def run_sweep(
    grids: Grid | Iterable[Grid],
    db: str | os.PathLike = "attnio-results.sqlite",
    *,
    jobs: int | None = None,
    scheduler: str | None = None,
    dask: bool = False,
    progress: bool = False,
    on_row: Callable[[dict], None] | None = None,
) -> SweepSummary:
    """Run every configuration of ``grids`` that ``db`` does not hold yet.

    ``jobs``: local worker processes (default: all cores; 1 runs in this process).
    ``scheduler="tcp://HOST:PORT"``: run on that Dask distributed scheduler; ``dask=True``: start a
    local Dask cluster of ``jobs`` workers.  Rows are written as they arrive, in transactions.
    Invalid input (unknown algorithm, empty grid, unusable db) raises before anything is written.
    """
    t0 = time.perf_counter()
    exp = expand(grids)
    if jobs is None:
        jobs = os.cpu_count() or 1
    if not isinstance(jobs, int) or isinstance(jobs, bool) or jobs < 1:
        raise ParameterError(f"jobs must be an integer >= 1, got {jobs!r}")
    if scheduler is not None and not str(scheduler).startswith(("tcp://", "tls://", "inproc://",
                                                                  "ucx://", "ws://", "wss://")):
        raise ParameterError(f"scheduler must be an address like tcp://HOST:PORT, got {scheduler!r}")
    ResultsStore.check(db)  # refuse a foreign/old/unwritable db before connecting anywhere
    with _dask_client(scheduler, jobs, dask) as client:
        store = ResultsStore(db)
        try:
            done = store.done_hashes()
            already = sum(1 for c in exp.configs if c.hash() in done)
            already += sum(1 for c, _ in exp.skipped if c.hash() in done)
            skip_rows = [skipped_row(c, r) for c, r in exp.skipped if c.hash() not in done]
            store.insert(skip_rows)
            todo = [c for c in exp.configs if c.hash() not in done]
            counts = {"ran": 0, "skipped": len(skip_rows), "errors": 0}

            with _Writer(store) as writer, _Progress(len(todo), progress) as bar:
                for rows in (_execute(todo, jobs=jobs, client=client) if todo else ()):
                    for r in rows:
                        counts["ran"] += 1
                        counts["skipped"] += r["status"] == "skipped"
                        counts["errors"] += r["status"] == "error"
                        if on_row:
                            on_row(r)
                    writer.add(rows)
                    bar.advance(len(rows))
        finally:
            store.close()
    return SweepSummary(len(exp), already, counts["ran"], counts["skipped"], counts["errors"],
                        time.perf_counter() - t0, os.fspath(db))


@contextlib.contextmanager
def _dask_client(scheduler: str | None, jobs: int, dask: bool) -> Iterator[Any]:
    """A Dask distributed client (remote scheduler or a local cluster), or None."""
    if not (scheduler or dask):
        yield None
        return
    try:
        from distributed import Client, LocalCluster
    except ImportError:  # pragma: no cover - distributed is installed here
        raise ParameterError("--dask/--scheduler need Dask distributed: pip install 'attnio[dask]'") from None
    if scheduler:
        try:
            client = Client(scheduler, timeout="10s")
        except (OSError, TimeoutError) as e:
            raise AttnioError(f"cannot reach Dask scheduler {scheduler}: {e}") from None
        with client:
            yield client
        return
    with LocalCluster(n_workers=jobs, threads_per_worker=1, processes=True,
                      dashboard_address=None) as cluster, Client(cluster) as client:
        yield client


class _Writer:
    """Buffers rows and commits them in one transaction at least every 0.2 s."""

    def __init__(self, store: ResultsStore, every_s: float = 0.2):
        self.store, self.every_s = store, every_s
        self.buf: list[dict] = []
        self.last = time.monotonic()

    def add(self, rows: list[dict]) -> None:
        self.buf.extend(rows)
        if time.monotonic() - self.last >= self.every_s or len(self.buf) >= 512:
            self.flush()

    def flush(self) -> None:
        if self.buf:
            self.store.insert(self.buf)
            self.buf = []
        self.last = time.monotonic()

    def __enter__(self) -> _Writer:
        return self

    def __exit__(self, *exc) -> None:
        self.flush()  # rows that arrived are written even when the loop was interrupted


def _cost(c: Config) -> float:
    """A rough cost estimate, to start the slowest configurations first (shorter tail)."""
    work = c.Nq * c.Nkv * c.d / math.sqrt(c.M)
    return work * (50.0 if c.mode == "compute" else 1.0) * (8.0 if c.causal else 1.0)


def _execute(todo: list[Config], *, jobs: int, client: Any = None) -> Iterator[list[dict]]:
    todo = sorted(todo, key=_cost, reverse=True) if jobs > 1 or client is not None else todo
    payload = [dataclasses.asdict(c) for c in todo]
    if client is not None:
        from distributed import as_completed

        workers = max(1, len(client.scheduler_info().get("workers", {})) or jobs)
        size = max(1, min(32, math.ceil(len(payload) / (workers * 16))))
        futures = client.map(run_batch, _batches(payload, size), pure=False)
        for fut in as_completed(futures):
            yield fut.result()
        return
    if jobs == 1 or len(payload) == 1:
        for p in payload:
            yield [run_config(p)]
        return
    import multiprocessing as mp
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

    size = 1 if len(payload) <= 20_000 else 32  # one task each: the slow ones do not queue up
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(["attnio.sweep"])
    with ProcessPoolExecutor(max_workers=jobs, mp_context=ctx) as ex:
        pending = {ex.submit(run_batch, b) for b in _batches(payload, size)}
        try:
            while pending:
                finished, pending = wait(pending, return_when=FIRST_COMPLETED)
                for f in finished:
                    yield f.result()
        finally:
            for f in pending:
                f.cancel()


class _Progress:
    """A rich progress bar with rate and ETA on stderr (nothing when disabled)."""

    def __init__(self, total: int, enabled: bool):
        self.total, self.enabled = total, enabled and total > 0
        self._p = None

    def __enter__(self) -> _Progress:
        if self.enabled:
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                ProgressColumn,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )
            from rich.text import Text

            class Rate(ProgressColumn):
                def render(self, task):
                    el = task.elapsed
                    s = task.completed / el if el else None
                    return Text(f"{s:,.1f} cfg/s" if s else "- cfg/s")

            self._p = Progress(TextColumn("sweep"), BarColumn(), MofNCompleteColumn(), Rate(),
                               TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(),
                               console=Console(stderr=True))
            self._p.start()
            self._task = self._p.add_task("sweep", total=self.total)
        return self

    def advance(self, n: int) -> None:
        if self._p is not None:
            self._p.advance(self._task, n)

    def __exit__(self, *exc) -> None:
        if self._p is not None:
            self._p.stop()
