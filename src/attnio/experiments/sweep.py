"""Sweeps: grids of configurations run into a results database (:mod:`attnio.experiments.store`).

A :class:`Grid` names value lists for ``N`` (or ``Nq`` x ``Nkv``), ``d``, ``M``, the algorithms
(``"all"`` = every registered one), the mask (``causal``: none, bottom-right
aligned ``True``, ``"top_left"``), the workload (``batch``, ``heads``, ``kv_heads`` for
grouped-query attention, a sliding ``window``), the mode (``count``: shapes only; ``compute``:
random standard-normal data, max error against :func:`attnio.reference.attention`), a seed, an
optional ``eps`` for approximate algorithms and ``verify`` (replay each exact schedule's element
trace through LRU and Belady's OPT at M and 2M: columns ``lru_M opt_M lru_2M opt_2M``).
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
import copy
import dataclasses
import functools
import hashlib
import itertools
import json
import math
import os
import signal
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from .. import algorithms as _alg
from .. import bounds as _bounds
from ..bounds import backward as _bwd_bounds
from ..core import masks, reference
from ..core.checks import check_real
from ..core.errors import AttnioError, CapacityError, ParameterError
from ..core.extras import require
from ..core.version import __version__ as _VERSION
from ..core.workload import Shape
from ..runner import run
from .store import COLUMN_NAMES, ResultsStore, decode_row, row_values

if TYPE_CHECKING:
    from multiprocessing.connection import Connection

    from rich.progress import Progress

try:  # Python 3.11+
    import tomllib  # novermin (guarded: the tomli backport below on 3.10)
except ModuleNotFoundError:  # pragma: no cover - Python 3.10: the tomli backport
    import tomli as tomllib

__all__ = [
    "PRESETS",
    "Config",
    "Expansion",
    "Grid",
    "SweepSummary",
    "bounds_for",
    "expand",
    "grids_from_toml",
    "VERIFY_MAX_EVENTS",
    "parse_causal",
    "parse_values",
    "parse_window",
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


_CAUSAL_ORDER = {False: 0, True: 1, "top_left": 2}


def parse_causal(spec: Any) -> tuple:
    """Masks of a grid: ``False`` (none), ``True`` (causal, bottom-right aligned) or ``"top_left"``.

    ``"both"`` -> (False, True) (as before); ``"all"`` -> (False, True, "top_left");
    ``"true"/"yes"/"1"/"bottom_right"`` -> (True,); ``"false"/"no"/"0"/"none"`` -> (False,);
    ``"top_left"`` -> ("top_left",); commas combine: ``"none,top_left"``.
    """
    if isinstance(spec, bool):
        return (spec,)
    if isinstance(spec, (list, tuple)):
        return tuple(sorted({b for s in spec for b in parse_causal(s)},
                            key=lambda b: _CAUSAL_ORDER[b]))
    s = str(spec).strip().lower()
    if "," in s:
        return parse_causal([p for p in s.split(",") if p.strip()])
    if s == "both":
        return (False, True)
    if s == "all":
        return (False, True, "top_left")
    if s in ("true", "yes", "1", "causal", "on", "bottom_right", "bottom-right"):
        return (True,)
    if s in ("top_left", "top-left"):
        return ("top_left",)
    if s in ("false", "no", "0", "none", "off"):
        return (False,)
    raise ParameterError(
        "causal must be none, bottom_right (= true), top_left, both (none + bottom_right) or all "
        f"(none + bottom_right + top_left), got {spec!r}")


def parse_window(spec: Any) -> tuple:
    """Sliding windows of a grid: ``"none"`` (no window) and/or integers >= 1, e.g.
    ``"none,64,256"`` or ``"64:1024:x4"``."""
    if spec is None:
        return (None,)
    if isinstance(spec, (list, tuple)):
        out: set = set()
        for s in spec:
            out.update(parse_window(s))
        return tuple(sorted(out, key=lambda w: -1 if w is None else w))
    if isinstance(spec, str):
        parts = [p.strip() for p in spec.split(",") if p.strip()]
        has_none = any(p.lower() in ("none", "off") for p in parts)
        rest = [p for p in parts if p.lower() not in ("none", "off")]
        vals = parse_values("window", ",".join(rest)) if rest else ()
        if not has_none and not vals:
            raise ParameterError(f"window: {spec!r} gives no values (an empty grid)")
        return ((None,) if has_none else ()) + vals
    return parse_values("window", spec)


def parse_algorithms(spec: Any) -> tuple[str, ...]:
    """``"all"`` (every registered algorithm), ``"exact"``, ``"approximate"``, or a comma list
    of names."""
    if isinstance(spec, str):
        parts = [p.strip() for p in spec.split(",") if p.strip()]
    else:
        parts = [str(p).strip() for p in spec]
    if not parts:
        raise ParameterError("algo: no algorithm named (an empty grid); use 'all' or names")
    out: list[str] = []
    for p in parts:
        if p in ("all", "kind:attention"):
            new = _alg.names()
        elif p in ("exact", "approximate"):
            new = _alg.names(exact=p == "exact")
        elif p in ("matmul", "kind:matmul"):
            raise ParameterError("algo: matmul is a building block (attnio.blocks.matmul, "
                                 "`attnio run matmul`), not an attention algorithm: sweeps run "
                                 "the attention registry", param="algo")
        elif p.startswith("kind:"):
            raise ParameterError(f"algo: {p!r}: every registered algorithm is attention; use "
                                 "'all', 'exact', 'approximate' or names", param="algo")
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
    causal: tuple = (False,)        # False | True (bottom-right aligned) | "top_left"
    mode: str = "count"
    seed: int = 0
    eps: float | None = None
    entry_bound: float = 1.0
    Nq: tuple[int, ...] = ()
    Nkv: tuple[int, ...] = ()
    batch: tuple[int, ...] = (1,)
    heads: tuple[int, ...] = (1,)
    kv_heads: tuple[int, ...] = ()  # empty: as many key/value heads as query heads
    window: tuple = (None,)         # None (no window) and/or sliding windows W >= 1
    verify: bool = False            # replay each trace through LRU and OPT (see run_config)
    backward: bool = False          # also count the backward pass (backward_* columns)

    def sizes(self) -> list[tuple[int, int]]:
        if self.Nq or self.Nkv:
            if not (self.Nq and self.Nkv):
                raise ParameterError("give both Nq and Nkv (or N for square problems)")
            return [(q, k) for q in self.Nq for k in self.Nkv]
        return [(n, n) for n in self.N]


@dataclass(frozen=True)
class Config:
    """One configuration of a sweep; :meth:`hash` is its primary key in the store.

    ``causal`` is False, True (bottom-right aligned) or ``"top_left"``; ``batch`` x ``heads`` query
    heads share ``batch`` x ``kv_heads`` key/value heads (``kv_heads=None``: as many as ``heads``);
    ``window`` a sliding window (with a causal mask).  The hash holds only what was asked, and the
    workload fields only when they differ from a single head without a window, so the rows of a
    single-head sweep keep their hashes.  ``verify`` (replay the trace through LRU and OPT) adds
    columns to the same configuration's row and is not part of the hash.
    """

    algorithm: str
    Nq: int
    Nkv: int
    d: int
    M: int
    causal: Any
    mode: str = "count"
    seed: int = 0
    eps: float | None = None
    entry_bound: float | None = None
    batch: int = 1
    heads: int = 1
    kv_heads: int | None = None
    window: int | None = None
    verify: bool = False
    backward: bool = False

    def __post_init__(self):
        if self.causal == "bottom_right":
            object.__setattr__(self, "causal", True)
        if self.kv_heads is None:
            object.__setattr__(self, "kv_heads", self.heads)

    def key(self) -> dict:
        k = {"algorithm": self.algorithm, "Nq": self.Nq, "Nkv": self.Nkv, "d": self.d,
             "M": self.M, "causal": self.causal, "mode": self.mode}
        if self.mode == "compute":
            k["seed"] = self.seed
        if self.eps is not None:
            k["eps"] = float(self.eps)
        if self.entry_bound is not None:
            k["entry_bound"] = float(self.entry_bound)
        if (self.batch, self.heads, self.kv_heads) != (1, 1, 1):
            k.update(batch=self.batch, heads=self.heads, kv_heads=self.kv_heads)
        if self.window is not None:
            k["window"] = self.window
        if self.backward:
            k["backward"] = True
        return k

    def hash(self) -> str:
        h = self.__dict__.get("_hash")
        if h is None:  # computed once per configuration (the sweep asks more than once)
            blob = json.dumps(self.key(), sort_keys=True, separators=(",", ":"))
            h = hashlib.sha256(blob.encode()).hexdigest()[:32]
            object.__setattr__(self, "_hash", h)
        return h

    @property
    def masked(self) -> bool:
        return self.causal is not False

    @property
    def align(self) -> str | None:
        """The causal alignment (None when unmasked)."""
        if self.causal is False:
            return None
        return "top_left" if self.causal == "top_left" else "bottom_right"

    @property
    def n_heads(self) -> int:
        return self.batch * self.heads

    @property
    def shape(self) -> Shape:
        """The workload: sizes, heads and mask (raises ParameterError if they do not fit)."""
        return Shape(self.Nq, self.Nkv, self.d, batch=self.batch, heads=self.heads,
                     kv_heads=self.kv_heads, causal=self.masked,
                     causal_align=self.align or "bottom_right", window=self.window)


@dataclass
class Expansion:
    """Configurations to run, and (configuration, reason) pairs that cannot run."""

    configs: list[Config] = field(default_factory=list)
    skipped: list[tuple[Config, str]] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.configs) + len(self.skipped)


#: A sweep refuses a grid of more configurations than this (``max_configs=``, ``--max-configs``):
#: about 17 minutes at 1,000 count-mode configurations a second.
DEFAULT_MAX_CONFIGS = 1_000_000


def _unique(vals: Iterable) -> tuple:
    return tuple(dict.fromkeys(vals))


class _GridPlan:
    """One grid, validated and resolved (algorithms, workloads), that can count its
    configurations arithmetically, yield them one at a time, and tell whether it holds one."""

    def __init__(self, g: Grid):
        if g.mode not in ("count", "compute"):
            raise ParameterError(f"mode must be 'count' or 'compute', got {g.mode!r}",
                                 param="mode")
        if isinstance(g.seed, bool) or not isinstance(g.seed, (int, np.integer)):
            raise ParameterError(f"seed must be an integer, got {g.seed!r}", param="seed")
        self.names = parse_algorithms(g.algorithms)
        self.algs = [_alg.get(n) for n in self.names]
        sizes = _unique(g.sizes())
        if not sizes or not g.d or not g.M or not g.causal:
            empty = [n for n, v in (("N", sizes), ("d", g.d), ("M", g.M), ("causal", g.causal))
                     if not v]
            raise ParameterError(f"grid: no values for {', '.join(empty)} (an empty grid)")
        for name, vals in (("d", g.d), ("M", g.M)):
            for v in vals:
                _positive(name, v) if isinstance(v, (int, np.integer)) and not isinstance(
                    v, bool) else _bad(name, v)
        self.eps = None if g.eps is None else check_real("eps", g.eps, lo=0, hi=1, lo_open=True,
                                                         hi_open=True)
        self.entry_bound = check_real("entry_bound", g.entry_bound, lo=0, lo_open=True)
        self.g = g
        self.sizes = sizes
        self.d = _unique(int(v) for v in g.d)
        self.M = _unique(int(v) for v in g.M)
        self.causal = _unique(True if c == "bottom_right" else c for c in g.causal)
        self.workloads = _unique(_workloads(g))
        self.seed = int(g.seed)
        self._members: tuple[set[Any], ...] | None = None

    def size(self) -> int:
        """Configurations of this grid (the product of its value lists), in O(1)."""
        return (len(self.algs) * len(self.sizes) * len(self.d) * len(self.workloads)
                * len(self.causal) * len(self.M))

    def configs(self) -> Iterator[tuple[Config, str | None]]:
        """(configuration, skip reason or None), in grid order, one at a time."""
        g = self.g
        for alg in self.algs:
            eps = None if alg.exact else self.eps
            eb = None if alg.exact else float(self.entry_bound)
            for (nq, nkv) in self.sizes:
                for d in self.d:
                    for (batch, heads, kvh, window) in self.workloads:
                        for causal in self.causal:
                            base = Config(alg.name, nq, nkv, d, 1, causal, g.mode, self.seed,
                                          eps, eb, batch, heads, kvh, window, bool(g.verify),
                                          backward=bool(g.backward))
                            pre = _pre_reason(alg, base)
                            min_m, why = (None, pre) if pre else _min_M(alg, base)
                            for M in self.M:
                                cfg = Config(alg.name, nq, nkv, d, M, causal, g.mode, self.seed,
                                             eps, eb, batch, heads, kvh, window, bool(g.verify),
                                             backward=bool(g.backward))
                                yield cfg, why or _skip_reason(alg, cfg, min_m)

    def holds(self, cfg: Config) -> bool:
        """Whether this grid has a configuration of the same key (the same row) as ``cfg``."""
        if self._members is None:
            self._members = (set(self.names), set(self.sizes), set(self.d), set(self.M),
                             set(self.workloads), {_causal_key(c) for c in self.causal})
        names, sizes, ds, Ms, wls, causals = self._members
        if cfg.algorithm not in names or cfg.mode != self.g.mode \
                or cfg.backward != bool(self.g.backward):
            return False
        alg = _alg.get(cfg.algorithm)
        eps = None if alg.exact else self.eps
        eb = None if alg.exact else float(self.entry_bound)
        if cfg.mode == "compute" and cfg.seed != self.seed:
            return False
        return ((cfg.Nq, cfg.Nkv) in sizes and cfg.d in ds and cfg.M in Ms
                and (cfg.batch, cfg.heads, cfg.kv_heads, cfg.window) in wls
                and _causal_key(cfg.causal) in causals
                and (None if cfg.eps is None else float(cfg.eps)) == eps
                and (None if cfg.entry_bound is None else float(cfg.entry_bound)) == eb)


def _causal_key(c: Any) -> Any:
    return True if c == "bottom_right" else c


def _plans(grids: Grid | Iterable[Grid]) -> list[_GridPlan]:
    if isinstance(grids, Grid):
        grids = [grids]
    grids = list(grids)
    if not grids:
        raise ParameterError("grid: no grid given (an empty grid)")
    return [_GridPlan(g) for g in grids]


def grid_size(grids: Grid | Iterable[Grid]) -> int:
    """Configurations of the grids counted arithmetically (duplicates across grids included),
    without expanding them: instant for a grid of 10^15."""
    return sum(p.size() for p in _plans(grids))


def check_grid_size(grids: Grid | Iterable[Grid], max_configs: int | None) -> int:
    """The grids' size; ParameterError (naming the value lists) when it exceeds
    ``max_configs``, before anything is expanded."""
    plans = _plans(grids)
    n = sum(p.size() for p in plans)
    if max_configs is not None and n > max_configs:
        biggest = max(plans, key=lambda p: p.size())
        dims = [("algorithms", len(biggest.algs)), ("N", len(biggest.sizes)),
                ("d", len(biggest.d)), ("M", len(biggest.M)),
                ("workloads", len(biggest.workloads)), ("causal", len(biggest.causal))]
        parts = " x ".join(f"{v:,} {k}" for k, v in dims if v > 1)
        raise ParameterError(
            f"grid: {n:.3g} configurations ({parts}) is more than max_configs={max_configs:,}; "
            "use coarser value lists (e.g. --N 256:65536:x2), or raise --max-configs",
            param="max_configs")
    return n


def iter_expand(grids: Grid | Iterable[Grid]) -> Iterator[tuple[Config, str | None]]:
    """Every configuration of the grids, one at a time and in grid order, with its skip reason
    (None: it can run); a configuration an earlier grid already has is not repeated.  Memory
    does not grow with the grid (no set of seen configurations is kept)."""
    return _iter_plans(_plans(grids))


def _iter_plans(plans: list[_GridPlan]) -> Iterator[tuple[Config, str | None]]:
    for k, plan in enumerate(plans):
        earlier = plans[:k]
        for cfg, why in plan.configs():
            if earlier and any(p.holds(cfg) for p in earlier):
                continue
            yield cfg, why


def expand(grids: Grid | Iterable[Grid], *, max_configs: int | None = DEFAULT_MAX_CONFIGS
           ) -> Expansion:
    """All configurations of the grids (deduplicated, in grid order), with skip reasons, in
    memory: for grids of at most ``max_configs`` (checked arithmetically first)."""
    check_grid_size(grids, max_configs)
    out = Expansion()
    for cfg, why in iter_expand(grids):
        if why:
            out.skipped.append((cfg, why))
        else:
            out.configs.append(cfg)
    if not out.configs and not out.skipped:
        raise ParameterError("grid: it expands to no configuration (an empty grid)")
    return out


def _workloads(g: Grid) -> list[tuple[int, int, int, int | None]]:
    """(batch, heads, kv_heads, window) combinations of a grid, validated."""
    for name in ("batch", "heads", "kv_heads"):
        vals = getattr(g, name)
        if name != "kv_heads" and not vals:
            raise ParameterError(f"grid: no values for {name} (an empty grid)")
        for v in vals:
            _positive(name, v) if isinstance(v, int) and not isinstance(v, bool) else _bad(name, v)
    if not g.window:
        raise ParameterError("grid: no values for window (an empty grid); use (None,) for none")
    for w in g.window:
        if w is not None:
            _positive("window", w) if isinstance(w, int) and not isinstance(w, bool) else _bad(
                "window", w)
    out = []
    for b in g.batch:
        for h in g.heads:
            for kvh in (g.kv_heads or (h,)):
                for w in g.window:
                    out.append((b, h, kvh, w))
    return out


def _bad(name: str, v: Any):
    raise ParameterError(f"{name}: values must be integers >= 1, got {v!r}")


def _pre_reason(alg: _alg.Algorithm, cfg: Config) -> str | None:
    """Why a workload (heads, mask, window) cannot run with ``alg``, before any size check."""
    try:
        _ = cfg.shape  # the workload's own checks: heads % kv_heads, a window needs a mask
    except ParameterError as e:
        return str(e)
    if cfg.window is not None and not alg.supports_window:
        return f"{alg.name} does not support a sliding window (supports_window is False)"
    if cfg.backward and not alg.supports_backward:
        return f"{alg.name} has no backward pass (supports_backward is False)"
    return None


def _min_M(alg: _alg.Algorithm, cfg: Config) -> tuple[int | None, str | None]:
    try:
        return alg.min_M(cfg.shape), None
    except (ParameterError, ValueError) as e:
        return None, f"{alg.name} cannot run this shape: {e}"


def _skip_reason(alg: _alg.Algorithm, cfg: Config, min_m: int | None) -> str | None:
    if min_m is not None and cfg.M < min_m:
        return f"M={cfg.M} < min_M={min_m} of {alg.name} for d={cfg.d}"
    if not alg.exact and cfg.eps is None:
        return f"{alg.name} is approximate and needs an error target: give --eps"
    return None


# ----------------------------------------------------------------------------- presets
def _g(**kw) -> Grid:
    conv = {"N": "N", "d": "d", "M": "M", "Nq": "Nq", "Nkv": "Nkv", "batch": "batch",
            "heads": "heads", "kv_heads": "kv_heads"}
    for k in conv:
        if k in kw:
            kw[k] = parse_values(k, kw[k])
    if "causal" in kw:
        kw["causal"] = parse_causal(kw["causal"])
    if "window" in kw:
        kw["window"] = parse_window(kw["window"])
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
    ``N Nq Nkv d M algo causal mode seed eps entry_bound batch heads kv_heads window verify
    backward``
    (values as on the command line or TOML lists)."""
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
              "entry_bound", "batch", "heads", "kv_heads", "window", "verify", "backward"}


def grid_from_mapping(t: Mapping[str, Any], *, where: str = "grid") -> Grid:
    unknown = set(t) - _GRID_KEYS
    if unknown:
        raise ParameterError(f"{where}: unknown key(s) {sorted(unknown)}; known: {sorted(_GRID_KEYS)}")
    kw: dict[str, Any] = {}
    for k in ("N", "Nq", "Nkv", "d", "M", "batch", "heads", "kv_heads"):
        if k in t:
            kw[k] = parse_values(k, t[k])
    if "window" in t:
        kw["window"] = parse_window(t["window"])
    if "verify" in t:
        if not isinstance(t["verify"], bool):
            raise ParameterError(f"{where}: verify must be true or false, got {t['verify']!r}")
        kw["verify"] = t["verify"]
    if "backward" in t:
        if not isinstance(t["backward"], bool):
            raise ParameterError(f"{where}: backward must be true or false, got "
                                 f"{t['backward']!r}")
        kw["backward"] = t["backward"]
    algo = t.get("algo", t.get("algorithms", "all"))
    if isinstance(algo, str):
        kw["algorithms"] = tuple(algo.split(","))
    elif isinstance(algo, (list, tuple)) and all(isinstance(a, str) for a in algo):
        kw["algorithms"] = tuple(algo)
    else:
        raise ParameterError(f"{where}: algo must be a name, a comma list or a list of names, "
                             f"got {algo!r}", param="algo")
    if "causal" in t:
        kw["causal"] = parse_causal(t["causal"])
    if "mode" in t:
        if t["mode"] not in ("count", "compute"):
            raise ParameterError(f"{where}: mode must be 'count' or 'compute', got "
                                 f"{t['mode']!r}", param="mode")
        kw["mode"] = t["mode"]
    if "seed" in t:
        seed = t["seed"]
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise ParameterError(f"{where}: seed must be an integer, got {seed!r}", param="seed")
        kw["seed"] = seed
    if "eps" in t:
        kw["eps"] = check_real("eps", t["eps"], lo=0, hi=1, lo_open=True, hi_open=True)
    if "entry_bound" in t:
        kw["entry_bound"] = check_real("entry_bound", t["entry_bound"], lo=0, lo_open=True)
    return Grid(**kw)


# ----------------------------------------------------------------------------- bounds
def _bound_dict(b) -> dict:
    return {"value": float(b.value), "theorem": str(b.theorem),
            "assumptions": _jsonable(getattr(b, "assumptions", None)),
            "explicit": bool(b.explicit), "regime": str(getattr(b, "regime", "") or "")}


def bounds_for(cfg: Config) -> dict[str, dict[str, Any]]:
    """Lower bounds applicable to a configuration, ``{name: {value, theorem, explicit, ...}}``:
    :func:`attnio.bounds.applicable_to` (every bound whose preconditions hold)."""
    return {b.name: _bound_dict(b) for b in _bounds.applicable_to(cfg.shape, cfg.M)}


def _floor(cfg: Config) -> int:
    """Read-once floor: every input word read once and the output written once."""
    assert cfg.kv_heads is not None  # Config.__post_init__ fills it in
    q, kv = cfg.n_heads * cfg.Nq, cfg.batch * cfg.kv_heads * cfg.Nkv
    return (q + 2 * kv) * cfg.d + q * cfg.d


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
    return {
        "config_hash": cfg.hash(), "algorithm": cfg.algorithm, "kind": "attention",
        "exact": bool(alg.exact), "Nq": cfg.Nq, "Nkv": cfg.Nkv, "d": cfg.d, "M": cfg.M,
        "causal": cfg.masked, "causal_align": cfg.align, "batch": cfg.batch, "heads": cfg.heads,
        "kv_heads": cfg.kv_heads, "window": cfg.window,
        "mode": cfg.mode, "seed": cfg.seed if cfg.mode == "compute" else None,
        "eps": cfg.eps, "entry_bound": cfg.entry_bound, "version": _VERSION,
        "backward": cfg.backward,
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
    """Compute-mode inputs, seeded by (seed, sizes[, batch, heads, kv_heads]): standard normal;
    for an approximate algorithm Q and K uniform in [-B, B] (B = entry_bound, the range its
    guarantee assumes).  One head: (N, d) matrices; several: (B, H, N, d) and (B, Hkv, Nkv, d)."""
    assert cfg.kv_heads is not None  # Config.__post_init__ fills it in
    multi = (cfg.batch, cfg.heads, cfg.kv_heads) != (1, 1, 1)
    seed = [cfg.seed, cfg.Nq, cfg.Nkv, cfg.d] + ([cfg.batch, cfg.heads, cfg.kv_heads] if multi else [])
    rng = np.random.default_rng(seed)
    qs = (cfg.batch, cfg.heads, cfg.Nq, cfg.d) if multi else (cfg.Nq, cfg.d)
    ks = (cfg.batch, cfg.kv_heads, cfg.Nkv, cfg.d) if multi else (cfg.Nkv, cfg.d)
    if cfg.entry_bound is not None:
        B = cfg.entry_bound
        Q = rng.uniform(-B, B, qs)
        K = rng.uniform(-B, B, ks)
        return Q, K, rng.standard_normal(ks)
    return rng.standard_normal(qs), rng.standard_normal(ks), rng.standard_normal(ks)


#: ``verify``: a trace longer than this many events is not replayed (its columns stay null and
#: ``verify_reason`` says why).  Recording the trace and the four replays (LRU and OPT at M and 2M)
#: cost a few seconds per configuration at the limit (`python benchmarks/bench_replay.py` measures
#: the replay throughput).
VERIFY_MAX_EVENTS = 2_000_000


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
    least = cfg.n_heads * masks.row_counts(cfg.shape).pairs
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


@functools.lru_cache(maxsize=4096)
def _bounds_of(shape: Shape, M: int) -> tuple[dict, str, str | None, float | None]:
    """(bounds, their JSON, the best explicit bound's name and value) of a workload: the bounds
    do not depend on the algorithm, so a grid over several algorithms computes them once."""
    bounds = {b.name: _bound_dict(b) for b in _bounds.applicable_to(shape, M)}
    explicit = {k: v for k, v in bounds.items() if v["explicit"]}
    best = max(explicit, key=lambda k: explicit[k]["value"]) if explicit else None
    return bounds, json.dumps(bounds, sort_keys=True), best, (explicit[best]["value"] if best
                                                             else None)


def run_config(cfg: Config | Mapping) -> dict:
    """Run one configuration and return its row (status ok, or skipped/error with a reason)."""
    return _run_row(cfg, encoded=False)


def _run_row(cfg: Config | Mapping, encoded: bool) -> dict:
    """The row of one configuration; ``encoded``: the JSON columns as strings (for the store)."""
    if isinstance(cfg, Mapping):
        cfg = Config(**cfg)
    alg = _alg.get(cfg.algorithm)
    row = _base_row(cfg, alg)
    t0 = time.perf_counter()
    try:
        tiling = _tiling_for(alg, cfg)
        shape = cfg.shape
        err = None
        if cfg.mode == "count":
            res = run(alg.name, shape=shape, M=cfg.M, mode="count", tiling=tiling,
                      backward=cfg.backward)
        else:
            Q, K, V = _data(cfg)
            dO = (np.random.default_rng([cfg.seed, 1, cfg.Nq, cfg.d]).standard_normal(Q.shape)
                  if cfg.backward else None)
            res = run(alg.name, Q, K, V, M=cfg.M, shape=shape, tiling=tiling,
                      backward=cfg.backward, grad_output=dO)
            ref = reference.attention(Q, K, V, causal=cfg.causal, window=cfg.window)
            err = float(np.abs(res.output - ref).max())
            if cfg.backward:  # the gradients against the float64 reference too
                refg = reference.attention_backward(Q, K, V, dO, causal=cfg.causal,
                                                    window=cfg.window)
                assert res.grads is not None
                err = max([err] + [float(np.abs(res.grads[k] - g).max())
                                   for k, g in zip(("dQ", "dK", "dV"), refg)])
        wall = time.perf_counter() - t0
        pred = alg.predict_total(res.shape, res.tiling)  # the tiling was validated by the run
        if cfg.backward:  # the forward of a backward run writes the logsumexp too
            pred = alg.predict_with_lse(res.shape, res.tiling)
        verify = verify_columns(cfg, alg, res.tiling) if cfg.verify else {}
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
    bounds, bounds_json, best, bound = _bounds_of(shape, cfg.M)
    per_array: dict[str, list[int]] | str = {k: [v.reads, v.writes]
                                             for k, v in io.per_array.items()}
    tiling_doc: dict[str, Any] | str = _tiling_json(res.tiling)
    if encoded:
        per_array = json.dumps(per_array, sort_keys=True)
        tiling_doc = json.dumps(tiling_doc, sort_keys=True)
    row.update(
        status="ok", reason=None, reads=io.reads, writes=io.writes, total=io.total, peak=io.peak,
        steps=io.steps, per_array=per_array,
        predicted_reads=pred.reads, predicted_writes=pred.writes,
        tiling=tiling_doc, bounds=bounds_json if encoded else copy.deepcopy(bounds), bound=bound,
        bound_name=best, ratio=(io.total / bound) if bound else None, floor=_floor(cfg),
        max_err=err, wall_s=wall, **verify,
    )
    if cfg.backward and res.backward_io is not None:
        b = res.backward_io
        _, bname, bbound = _backward_bounds_of(shape, cfg.M)
        row.update(backward=True, backward_algorithm=res.backward_algorithm,
                   backward_reads=b.reads, backward_writes=b.writes, backward_total=b.total,
                   backward_bound=bbound, backward_bound_name=bname,
                   backward_ratio=(b.total / bbound) if bbound else None)
    return row


@functools.lru_cache(maxsize=4096)
def _backward_bounds_of(shape: Shape, M: int) -> tuple[dict, str | None, float | None]:
    """(backward bounds, the best explicit one's name and value) of a workload."""
    bs = {b.name: _bound_dict(b) for b in _bwd_bounds.backward_applicable_to(shape, M)}
    explicit = {k: v for k, v in bs.items() if v["explicit"]}
    best = max(explicit, key=lambda k: explicit[k]["value"]) if explicit else None
    return bs, best, (explicit[best]["value"] if best else None)


def _tiling_json(t: Any) -> dict:
    if dataclasses.is_dataclass(t) and not isinstance(t, type):  # an instance: a tiling
        return _jsonable(dataclasses.asdict(t))
    return _jsonable(t) if isinstance(t, Mapping) else {"value": _jsonable(t)}


def run_batch(cfgs: Sequence[Mapping]) -> list[dict]:
    """Run several configurations (one task of a Dask worker)."""
    return [run_config(c) for c in cfgs]


_CFG_FIELDS = tuple(f.name for f in dataclasses.fields(Config))


def _cfg_tuple(c: Config) -> tuple:
    return tuple(getattr(c, f) for f in _CFG_FIELDS)


def _run_values(cfgs: Sequence[tuple]) -> list[tuple]:
    """One task of the local pool: configurations as field tuples in, store rows as value tuples
    out (compact to send between processes, ready for one ``executemany``)."""
    return [row_values(_run_row(Config(*c), encoded=True)) for c in cfgs]


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


class SweepInterrupted(KeyboardInterrupt):
    """Ctrl-C stopped a sweep: every row that had arrived is in the database (``summary`` says
    how many), the workers are gone, and rerunning the same sweep resumes it."""

    def __init__(self, summary: SweepSummary, written: int = 0):
        super().__init__(str(summary))
        self.summary = summary
        self.written = written

    def line(self) -> str:
        """One line for the command line."""
        s = self.summary
        return (f"interrupted: {self.written:,} rows written to {s.db} by this run "
                f"({s.already:,} were there before); rerun the same command to resume")


@dataclass
class DryRun:
    """What :func:`run_sweep` would do (:func:`dry_run`): nothing is written."""

    total: int       # configurations of the grids
    already: int     # rows the database already holds (ok or skipped): not run again
    to_run: int      # configurations that would run
    skipped: int     # configurations that would be stored as skipped (new ones)
    db: str
    examples: list[tuple[Config, str]] = field(default_factory=list)  # a few skip reasons

    def __str__(self) -> str:
        held = f"{self.already:,} already in {self.db}" if self.already else \
            f"none in {self.db} yet"
        return (f"{self.total:,} configurations: {held}, {self.to_run:,} to run, "
                f"{self.skipped:,} to store as skipped with a reason")


def _done_sets(store: ResultsStore, any_verify: bool) -> tuple[set, set]:
    plain = store.done_hashes()
    return plain, (store.done_hashes(verify=True) if any_verify else plain)


def dry_run(grids: Grid | Iterable[Grid], db: str | os.PathLike | None = None, *,
            max_configs: int | None = DEFAULT_MAX_CONFIGS, examples: int = 10) -> DryRun:
    """Count what :func:`run_sweep` would run against ``db`` (read, never written; None or a
    missing file: an empty database), streaming the grid (memory does not grow with it)."""
    plans = _plans(grids)
    check_grid_size(plans_to_grids(plans), max_configs)
    any_verify = any(p.g.verify for p in plans)
    plain: set[str]
    verified: set[str]
    plain = verified = set()
    path = "(no database)" if db is None else os.fspath(db)
    if db is not None and os.path.exists(path) and os.path.getsize(path) > 0:
        with ResultsStore(path, readonly=True) as st:
            plain, verified = _done_sets(st, any_verify)
    out = DryRun(0, 0, 0, 0, path)
    for cfg, why in _iter_plans(plans):
        out.total += 1
        if (plain or verified) and cfg.hash() in (verified if cfg.verify and not why else plain):
            out.already += 1
        elif why:
            out.skipped += 1
            if len(out.examples) < examples:
                out.examples.append((cfg, why))
        else:
            out.to_run += 1
    return out


def run_sweep(
    grids: Grid | Iterable[Grid],
    db: str | os.PathLike = "attnio-results.sqlite",
    *,
    jobs: int | None = None,
    scheduler: str | None = None,
    dask: bool = False,
    progress: bool = False,
    on_row: Callable[[dict], None] | None = None,
    max_configs: int | None = DEFAULT_MAX_CONFIGS,
) -> SweepSummary:
    """Run every configuration of ``grids`` that ``db`` does not hold yet.

    ``jobs``: local worker processes (default: all cores; 1 runs in this process).
    ``scheduler="tcp://HOST:PORT"``: run on that Dask distributed scheduler; ``dask=True``: start a
    local Dask cluster of ``jobs`` workers.  The grid is streamed (never held in memory) and the
    rows are written as they arrive, many per transaction, so a sweep killed at any instant loses
    no row that had arrived and a rerun resumes it.  Ctrl-C stops the workers at once, writes the
    rows that had arrived and raises :class:`SweepInterrupted`.  Invalid input (unknown
    algorithm, empty grid, a grid of more than ``max_configs`` configurations, an unusable db)
    raises before anything is written.  ``progress``: a progress bar on stderr when it is a
    terminal.
    """
    t0 = time.perf_counter()
    plans = _plans(grids)
    total = check_grid_size(plans_to_grids(plans), max_configs)
    if jobs is None:
        jobs = os.cpu_count() or 1
    if not isinstance(jobs, int) or isinstance(jobs, bool) or jobs < 1:
        raise ParameterError(f"jobs must be an integer >= 1, got {jobs!r}", param="jobs")
    if scheduler is not None and not str(scheduler).startswith(("tcp://", "tls://", "inproc://",
                                                                  "ucx://", "ws://", "wss://")):
        raise ParameterError(f"scheduler must be an address like tcp://HOST:PORT, got {scheduler!r}")
    # the first configuration: an expansion error (a bad workload) raises before anything is open
    stream = _iter_plans(plans)
    first = next(stream, None)
    if first is None:
        raise ParameterError("grid: it expands to no configuration (an empty grid)")
    ResultsStore.check(db)  # refuse a foreign/old/unwritable db before connecting anywhere
    counts = {"total": 0, "already": 0, "ran": 0, "skipped": 0, "errors": 0}

    def summary() -> SweepSummary:
        return SweepSummary(counts["total"], counts["already"], counts["ran"], counts["skipped"],
                            counts["errors"], time.perf_counter() - t0, os.fspath(db))

    pool = None
    with _dask_client(scheduler, jobs, dask) as client:
        store = ResultsStore(db)
        writer = _Writer(store)
        bar = _Progress(total, progress)
        try:
            plain, verified = _done_sets(store, any(p.g.verify for p in plans))
            if client is None and jobs > 1:
                pool = _Pool(jobs)  # before the progress bar's thread: workers are forked
            bar.start()

            def todo() -> Iterator[Config]:
                for cfg, why in itertools.chain([first], stream):
                    counts["total"] += 1
                    if cfg.hash() in (verified if cfg.verify and not why else plain):
                        counts["already"] += 1
                        bar.advance(1)
                    elif why:
                        writer.add([row_values(skipped_row(cfg, why))])
                        counts["skipped"] += 1
                        bar.advance(1)
                    else:
                        yield cfg

            for rows in _execute(todo(), jobs=jobs, client=client, pool=pool):
                for r in rows:
                    status = r[_STATUS]
                    counts["ran"] += 1
                    counts["skipped"] += status == "skipped"
                    counts["errors"] += status == "error"
                    if on_row:
                        on_row(_row_dict(r))
                writer.add(rows)
                bar.advance(len(rows))
            writer.flush()
        except KeyboardInterrupt:
            with _no_interrupts():  # a second Ctrl-C does not break the clean-up
                if pool is not None:
                    pool.terminate()
                    pool = None
                bar.stop()
                writer.flush()  # the rows that had arrived
                store.close()
            raise SweepInterrupted(summary(), writer.written) from None
        finally:
            if pool is not None:
                pool.terminate()
            bar.stop()
            store.close()
    return summary()


def plans_to_grids(plans: list[_GridPlan]) -> list[Grid]:
    return [p.g for p in plans]


_STATUS = COLUMN_NAMES.index("status")


def _row_dict(values: tuple) -> dict:
    return decode_row(dict(zip(COLUMN_NAMES, values)))


@contextlib.contextmanager
def _no_interrupts() -> Iterator[None]:
    """SIGINT ignored inside (main thread only): the clean-up after a Ctrl-C runs to its end."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old)


@contextlib.contextmanager
def _dask_client(scheduler: str | None, jobs: int, dask: bool) -> Iterator[Any]:
    """A Dask distributed client (remote scheduler or a local cluster), or None."""
    if not (scheduler or dask):
        yield None
        return
    distributed = require("distributed", "dask", "a Dask sweep (--dask/--scheduler)")
    Client, LocalCluster = distributed.Client, distributed.LocalCluster
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
    """Buffers rows (value tuples) and commits them, many per transaction, at least every
    0.2 s; ``written`` counts the rows committed."""

    def __init__(self, store: ResultsStore, every_s: float = 0.2):
        self.store, self.every_s = store, every_s
        self.buf: list[tuple] = []
        self.last = time.monotonic()
        self.written = 0

    def add(self, rows: list[tuple]) -> None:
        self.buf.extend(rows)
        if time.monotonic() - self.last >= self.every_s or len(self.buf) >= 2048:
            self.flush()

    def flush(self) -> None:
        if self.buf:
            self.store.insert_values(self.buf)  # interrupted: rolled back, and still buffered
            self.written += len(self.buf)
            self.buf = []
        self.last = time.monotonic()


def _cost(c: Config) -> float:
    """A rough cost estimate, to start the slowest configurations first (shorter tail)."""
    work = c.n_heads * c.Nq * c.Nkv * c.d / math.sqrt(c.M)
    return work * (50.0 if c.mode == "compute" else 1.0) * (8.0 if c.causal else 1.0)


#: Configurations per task of the local pool: count mode runs a configuration in about a
#: millisecond, so tasks of 64 keep the pipes quiet; compute mode sends them one at a time.
_TASK_COUNT, _TASK_COMPUTE = 64, 1
_WINDOW = 4096  # configurations sorted by cost at a time (slowest first) with several workers


def _tasks(todo: Iterator[Config], ordered: bool) -> Iterator[list[tuple]]:
    """Batches of configuration tuples from the stream; with ``ordered``, each window of
    :data:`_WINDOW` configurations slowest first."""
    size = 2 * _TASK_COUNT  # a small first window: the workers start at once
    while True:
        window = list(itertools.islice(todo, size))
        size = min(_WINDOW, 4 * size)
        if not window:
            return
        if ordered:
            window.sort(key=_cost, reverse=True)
        batch: list[tuple] = []
        for c in window:
            batch.append(_cfg_tuple(c))
            if len(batch) >= (_TASK_COMPUTE if c.mode == "compute" else _TASK_COUNT):
                yield batch
                batch = []
        if batch:
            yield batch


def _execute(todo: Iterator[Config], *, jobs: int, client: Any = None,
             pool: _Pool | None = None) -> Iterator[list[tuple]]:
    """Rows (value tuples) of the configurations, as they arrive."""
    if client is not None:
        from distributed import as_completed

        payload = [dataclasses.asdict(c) for c in todo]
        workers = max(1, len(client.scheduler_info().get("workers", {})) or jobs)
        size = max(1, min(32, math.ceil(len(payload) / (workers * 16))))
        payload.sort(key=lambda p: _cost(Config(**p)), reverse=True)
        futures = client.map(run_batch, _batches(payload, size), pure=False)
        for fut in as_completed(futures):
            yield [row_values(_encode(r)) for r in fut.result()]
        return
    if pool is None:  # in this process, one configuration at a time
        for c in todo:
            yield [row_values(_run_row(c, encoded=True))]
        return
    yield from pool.map(_tasks(todo, ordered=True))


def _encode(row: dict) -> dict:
    return {k: (json.dumps(v, sort_keys=True) if isinstance(v, (dict, list)) else v)
            for k, v in row.items()}


def _batches(items: list, size: int) -> list[list]:
    return [items[i:i + size] for i in range(0, len(items), size)]


def _worker(conn) -> None:
    """A pool worker: tasks in, rows out, over one pipe, until the pipe closes.  It ignores
    SIGINT: Ctrl-C reaches the whole process group, and only the parent acts on it (it
    terminates the workers), so a worker never prints a traceback."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    while True:
        try:
            task = conn.recv()
        except (EOFError, OSError):  # the parent is gone (killed): so is the work
            return
        if task is None:
            return
        try:
            conn.send(("ok", _run_values(task)))
        except (BrokenPipeError, OSError):
            return
        except BaseException as e:  # noqa: BLE001 - reported to the parent, which raises it
            try:
                conn.send(("error", f"{type(e).__name__}: {e}"))
            except OSError:
                return


class _Pool:
    """``jobs`` worker processes, each on its own pipe (no queues, locks or semaphores, so
    nothing leaks when they are terminated).  Workers are forked where the platform allows it
    (this process has imported everything already), with SIGINT blocked while they start so a
    Ctrl-C at that instant reaches only the parent; a worker keeps two tasks in flight."""

    def __init__(self, jobs: int):
        import multiprocessing as mp
        import threading

        fork = ("fork" in mp.get_all_start_methods() and threading.active_count() == 1)
        self.ctx = mp.get_context("fork") if fork else mp.get_context("spawn")
        self.procs: list = []
        self.conns: list = []
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        masked = hasattr(signal, "pthread_sigmask")
        old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT}) if masked else None
        try:
            for _ in range(jobs):
                parent, child = self.ctx.Pipe(duplex=True)
                proc = self.ctx.Process(target=_worker, args=(child,), daemon=True)
                proc.start()
                child.close()
                self.procs.append(proc)
                self.conns.append(parent)
        except BaseException:
            self.terminate()
            raise
        finally:
            if old is not None:  # set exactly when masked
                signal.pthread_sigmask(signal.SIG_SETMASK, old)

    def map(self, tasks: Iterator[list[tuple]]) -> Iterator[list[tuple]]:
        """The rows of every task, as they arrive (not in task order)."""
        from multiprocessing.connection import wait

        inflight = {c: 0 for c in self.conns}
        exhausted = False

        def feed(c) -> None:
            nonlocal exhausted
            while not exhausted and inflight[c] < 2:
                task = next(tasks, None)
                if task is None:
                    exhausted = True
                    return
                c.send(task)
                inflight[c] += 1

        for c in self.conns:
            feed(c)
        while any(inflight.values()):
            # wait returns the objects it was given: the pipe ends in self.conns
            for c in cast("list[Connection]", wait([c for c, n in inflight.items() if n])):
                try:
                    kind, payload = c.recv()
                except (EOFError, OSError):
                    proc = self.procs[self.conns.index(c)]
                    proc.join(0.5)
                    raise AttnioError(f"a sweep worker died (exit code {proc.exitcode}); the rows "
                                      "that arrived are saved: rerun the sweep to resume") from None
                inflight[c] -= 1
                if kind != "ok":
                    raise AttnioError(f"a sweep worker failed: {payload}")
                feed(c)
                yield payload
        self.close()

    def close(self) -> None:
        """Let the workers finish (they exit when their pipe closes)."""
        for c in self.conns:
            with contextlib.suppress(OSError):
                c.send(None)
            c.close()
        for p in self.procs:
            p.join(2)
            if p.is_alive():
                p.terminate()
        self.procs, self.conns = [], []

    def terminate(self) -> None:
        """Stop every worker now (SIGTERM, then SIGKILL after 1 s): their work in progress is
        not in the database and runs again on resume."""
        for p in self.procs:
            with contextlib.suppress(Exception):
                p.terminate()
        for c in self.conns:
            with contextlib.suppress(Exception):
                c.close()
        deadline = time.monotonic() + 1.0
        for p in self.procs:
            p.join(max(0.0, deadline - time.monotonic()))
            if p.is_alive():
                with contextlib.suppress(Exception):
                    p.kill()
                    p.join(0.5)
        self.procs, self.conns = [], []


class _Progress:
    """A rich progress bar with rate and ETA on stderr, shown only when stderr is a terminal
    (and ``enabled``)."""

    def __init__(self, total: int, enabled: bool):
        self.total = total
        self.enabled = enabled and total > 0 and _isatty(sys.stderr)
        self._p: Progress | None = None

    def start(self) -> None:
        if self.enabled and self._p is None:
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
                               console=Console(stderr=True), transient=True)
            self._p.start()
            self._task = self._p.add_task("sweep", total=self.total)

    def advance(self, n: int) -> None:
        if self._p is not None:
            self._p.advance(self._task, n)

    def stop(self) -> None:
        if self._p is not None:
            p, self._p = self._p, None
            p.stop()


def _isatty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False
