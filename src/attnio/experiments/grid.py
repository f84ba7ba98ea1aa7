"""Grids and their configurations: what a sweep runs.

A :class:`Grid` names value lists for ``N`` (or ``Nq`` x ``Nkv``), ``d``, ``M``, the algorithms
(``"all"`` = every registered one), the mask (``causal``: none, bottom-right aligned ``True``,
``"top_left"``), the workload (``batch``, ``heads``, ``kv_heads`` for grouped-query attention, a
sliding ``window``), the mode (``count``: shapes only; ``compute``: random data, max error against
the float64 reference), a seed, an optional ``eps`` for approximate algorithms, ``verify`` and
``backward``.  :func:`expand` (or :func:`iter_expand`, streaming) turns grids into
:class:`Config` s, each holding one :class:`~attnio.core.workload.Shape`.

A grid expands to meaningful configurations only: a sliding window is paired with the causal
masks of the grid, never with "no mask" (``causal=(False, True), window=(None, 512)`` gives three
masks, not four); a ``kv_heads`` value is paired with the ``heads`` values it divides.  A value
that pairs with nothing (a window in a grid without a causal mask, a ``kv_heads`` that divides no
``heads``) is refused, like ``N=0``, before anything runs.  What remains and an algorithm cannot
run (``M < min_M``, a window it does not support, an approximate algorithm without ``eps``)
becomes a *skipped* row with the reason; a forward-only algorithm in a ``backward`` grid keeps
its forward row (marked forward-only, see :mod:`attnio.experiments.row`).

>>> [c.M for c in expand(Grid(N=(64,), d=(8,), M=(64, 128, 256),
...                          algorithms=("flash2",))).configs]
[64, 128, 256]
>>> len(expand(Grid(N=(64,), d=(8,), M=(4096,), algorithms=("flash2",), causal=(False, True),
...                 window=(None, 16))))
3
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .. import algorithms as _alg
from ..algorithms import mapper
from ..algorithms.protocol import NO_WINDOW
from ..core.checks import check_real
from ..core.errors import ParameterError
from ..core.workload import Shape
from .plan_series import series
from .values import _positive, parse_algorithms

__all__ = ["DEFAULT_MAX_CONFIGS", "Config", "Expansion", "Grid", "check_grid_size", "expand",
           "iter_expand"]

#: A sweep refuses a grid of more configurations than this (``max_configs=``, ``--max-configs``):
#: about 17 minutes at 1,000 count-mode configurations a second.
DEFAULT_MAX_CONFIGS = 1_000_000


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
    eps: float | tuple[float, ...] | None = None  # one error target or several (approximate only)
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
                raise ParameterError("give both Nq and Nkv (or N for square problems)",
                                     param="Nq" if not self.Nq else "Nkv")
            return [(q, k) for q in self.Nq for k in self.Nkv]
        return [(n, n) for n in self.N]


def mask_key(shape: Shape) -> bool | str:
    """The mask as a grid names it: False, True (causal, bottom-right aligned) or "top_left"."""
    if not shape.causal:
        return False
    return True if shape.causal_align == "bottom_right" else "top_left"


@dataclass(frozen=True)
class Config:
    """One configuration of a sweep: an algorithm, a workload (:class:`Shape`: sizes, heads and
    mask), a fast memory of ``M`` words, the mode and, for approximate algorithms, ``eps`` and
    ``entry_bound``.  :meth:`hash` is its primary key in the store.

    The hash holds only what was asked, and the workload fields only when they differ from a
    single head without a window, so the rows of a single-head sweep keep their hashes.
    ``verify`` (replay the trace through LRU and OPT) adds columns to the same configuration's
    row and is not part of the hash.  ``shape`` may be given as anything
    :meth:`Shape.coerce` takes (a mapping of its fields, as a Dask task carries it).

    >>> Config("flash2", Shape(64, 64, 8, causal=True), 256).key()["causal"]
    True
    """

    algorithm: str
    shape: Shape
    M: int
    mode: str = "count"
    seed: int = 0
    eps: float | None = None
    entry_bound: float | None = None
    verify: bool = False
    backward: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.shape, Shape):
            object.__setattr__(self, "shape", Shape.coerce(self.shape))

    def key(self) -> dict:
        s = self.shape
        k = {"algorithm": self.algorithm, "Nq": s.Nq, "Nkv": s.Nkv, "d": s.d, "M": self.M,
             "causal": mask_key(s), "mode": self.mode}
        if self.mode == "compute":
            k["seed"] = self.seed
        if self.eps is not None:
            k["eps"] = float(self.eps)
        if self.entry_bound is not None:
            k["entry_bound"] = float(self.entry_bound)
        if (s.batch, s.heads, s.kv_heads) != (1, 1, 1):
            k.update(batch=s.batch, heads=s.heads, kv_heads=s.kv_heads)
        if s.window is not None:
            k["window"] = s.window
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

    def describe(self) -> str:
        """``flash2 N=64 d=8 causal=bottom_right M=256``: what a dry run prints."""
        return f"{self.algorithm} {self.shape.describe()} M={self.M}"


@dataclass
class Expansion:
    """Configurations to run, and (configuration, reason) pairs that cannot run."""

    configs: list[Config] = field(default_factory=list)
    skipped: list[tuple[Config, str]] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.configs) + len(self.skipped)


def _unique(vals: Iterable) -> tuple:
    return tuple(dict.fromkeys(vals))


#: (batch, heads, kv_heads, window, mask) of one workload of a grid.
_Workload = tuple[int, int, int, "int | None", "bool | str"]


class GridPlan:
    """One grid, validated and resolved (algorithms, workloads), that can count its
    configurations arithmetically, yield them one at a time, and tell whether it holds one."""

    def __init__(self, g: Grid):
        if g.mode not in ("count", "compute"):
            raise ParameterError(f"mode must be 'count' or 'compute', got {g.mode!r}",
                                 param="mode")
        if isinstance(g.seed, bool) or not isinstance(g.seed, (int, np.integer)) or g.seed < 0:
            # a negative seed was an error row per configuration (numpy takes seeds >= 0 only)
            raise ParameterError(f"seed must be an integer >= 0, got {g.seed!r}", param="seed")
        self.names = parse_algorithms(g.algorithms)
        self.algs = [series(n) for n in self.names]  # "plan": the planner's series
        sizes = _unique(g.sizes())
        if not sizes or not g.d or not g.M or not g.causal:
            empty = [n for n, v in (("N", sizes), ("d", g.d), ("M", g.M), ("causal", g.causal))
                     if not v]
            raise ParameterError(f"grid: no values for {', '.join(empty)} (an empty grid)",
                                 param=empty[0])
        lists = (("Nq", g.Nq), ("Nkv", g.Nkv)) if g.Nq or g.Nkv else (("N", g.N),)
        for name, vals in (*lists, ("d", g.d), ("M", g.M)):
            for v in vals:
                _integer(name, v)
        self.eps_values = parse_eps(g.eps)
        self.eps = self.eps_values[0]  # the first (the only one, in most grids)
        self.entry_bound = check_real("entry_bound", g.entry_bound, lo=0, lo_open=True)
        self.g = g
        self.sizes = sizes
        self.d = _unique(int(v) for v in g.d)
        self.M = _unique(int(v) for v in g.M)
        self.workloads = _workloads(g)
        self.seed = int(g.seed)
        self._members: tuple[set[Any], ...] | None = None

    def size(self) -> int:
        """Configurations of this grid (the product of its value lists; an approximate algorithm
        once per error target), in O(1)."""
        per_alg = sum(1 if a.exact else len(self.eps_values) for a in self.algs)
        return per_alg * len(self.sizes) * len(self.d) * len(self.workloads) * len(self.M)

    def dims(self) -> list[tuple[str, int]]:
        """(name, number of values) of each dimension, for messages."""
        return [("algorithms", len(self.algs)), ("N", len(self.sizes)), ("d", len(self.d)),
                ("M", len(self.M)), ("workloads", len(self.workloads))]

    def configs(self) -> Iterator[tuple[Config, str | None]]:
        """(configuration, skip reason or None), in grid order, one at a time."""
        g = self.g
        shapes = [Shape(nq, nkv, d, batch=b, heads=h, kv_heads=kvh, causal=mask is not False,
                        causal_align="top_left" if mask == "top_left" else "bottom_right",
                        window=w)
                  for (nq, nkv) in self.sizes for d in self.d
                  for (b, h, kvh, w, mask) in self.workloads]
        for alg in self.algs:
            eb = None if alg.exact else float(self.entry_bound)
            for eps in ((None,) if alg.exact else self.eps_values):
                for shape in shapes:
                    for M in self.M:
                        cfg = Config(alg.name, shape, M, g.mode, self.seed, eps, eb,
                                     bool(g.verify), bool(g.backward))
                        yield cfg, _skip_reason(alg, cfg)

    def holds(self, cfg: Config) -> bool:
        """Whether this grid has a configuration of the same key (the same row) as ``cfg``."""
        if self._members is None:
            self._members = (set(self.names), set(self.sizes), set(self.d), set(self.M),
                             set(self.workloads))
        names, sizes, ds, Ms, wls = self._members
        if cfg.algorithm not in names or cfg.mode != self.g.mode \
                or cfg.backward != bool(self.g.backward):
            return False
        alg = series(cfg.algorithm)
        eps_ok = (None,) if alg.exact else self.eps_values
        eb = None if alg.exact else float(self.entry_bound)
        if cfg.mode == "compute" and cfg.seed != self.seed:
            return False
        s = cfg.shape
        return ((s.Nq, s.Nkv) in sizes and s.d in ds and cfg.M in Ms
                and (s.batch, s.heads, s.kv_heads, s.window, mask_key(s)) in wls
                and (None if cfg.eps is None else float(cfg.eps)) in eps_ok
                and (None if cfg.entry_bound is None else float(cfg.entry_bound)) == eb)


def parse_eps(eps: Any) -> tuple[float | None, ...]:
    """The error targets of a grid: None (none: approximate algorithms are skipped), one number
    in (0, 1), or several (a sequence, or a comma list ``"1e-1,1e-2,1e-3"``), each checked;
    duplicates dropped, order kept."""
    if eps is None:
        return (None,)
    if isinstance(eps, str):
        parts = [p.strip() for p in eps.split(",") if p.strip()]
        try:
            vals: list[Any] = [float(p) for p in parts]
        except ValueError:
            raise ParameterError(f"eps must be a number or a comma list of numbers in (0, 1), "
                                 f"got {eps!r}", param="eps") from None
    elif isinstance(eps, (list, tuple)):
        vals = list(eps)
    else:
        vals = [eps]
    if not vals:
        raise ParameterError("eps: no value given (an empty list)", param="eps")
    out = _unique(check_real("eps", v, lo=0, hi=1, lo_open=True, hi_open=True) for v in vals)
    return tuple(out)


def _integer(name: str, v: Any) -> int:
    if isinstance(v, (int, np.integer)) and not isinstance(v, bool):
        return _positive(name, int(v))
    raise ParameterError(f"{name}: values must be integers >= 1, got {v!r}", param=name)


def _mask(c: Any) -> bool | str:
    """A grid's mask value: False, True (bottom-right aligned) or "top_left"."""
    if c is False or c is True or c == "top_left":
        return bool(c) if isinstance(c, (bool, np.bool_)) else c
    if c == "bottom_right":
        return True
    raise ParameterError(f"causal: values must be False, True (bottom_right) or 'top_left', "
                         f"got {c!r}", param="causal")


def _workloads(g: Grid) -> list[_Workload]:
    """(batch, heads, kv_heads, window, mask) of a grid's meaningful workloads: a window only
    with a causal mask, a kv_heads value only with the heads it divides.  A value that pairs
    with nothing is refused (a ParameterError naming it)."""
    for name in ("batch", "heads", "kv_heads"):
        vals = getattr(g, name)
        if name != "kv_heads" and not vals:
            raise ParameterError(f"grid: no values for {name} (an empty grid)", param=name)
        for v in vals:
            _integer(name, v)
    if not g.window:
        raise ParameterError("grid: no values for window (an empty grid); use (None,) for none",
                             param="window")
    windows = _unique(None if w is None else _integer("window", w) for w in g.window)
    masks = _unique(_mask(c) for c in g.causal)
    heads = _unique(int(h) for h in g.heads)
    kv_heads = _unique(int(k) for k in g.kv_heads)
    for kvh in kv_heads:
        if not any(h % kvh == 0 for h in heads):
            raise ParameterError(
                f"kv_heads: {kvh} divides no value of heads ({', '.join(map(str, heads))}): "
                "grouped-query attention needs heads to be a multiple of kv_heads",
                param="kv_heads")
    if any(w is not None for w in windows) and not any(m is not False for m in masks):
        raise ParameterError(
            f"window: a sliding window needs a causal mask, and causal is none; add --causal "
            f"true (or both: none without a window, causal with each window), got window="
            f"{','.join('none' if w is None else str(w) for w in windows)}", param="window")
    out: list[_Workload] = []
    for b in g.batch:
        for h in heads:
            for kvh in (kv_heads or (h,)):
                if h % kvh:
                    continue  # not grouped-query attention: not generated
                for w in windows:
                    for m in masks:
                        if w is None or m is not False:  # a window needs a causal mask
                            out.append((int(b), h, kvh, w, m))
    return list(_unique(out))


def _skip_reason(alg: _alg.Algorithm, cfg: Config) -> str | None:
    """Why the sweep skips ``cfg`` (None: it runs): the mapper's
    :func:`~attnio.algorithms.mapper.can_run`, worded for the sweep's table (the stored reasons
    read ``M=64 < min_M=68 of flash2 for d=16``), or an approximate algorithm without an error
    target."""
    shape = cfg.shape
    why = mapper.can_run(alg, shape, cfg.M)
    if why == NO_WINDOW:
        return f"{alg.name} does not support a sliding window (supports_window is False)"
    if why is not None and (need := mapper.needs_M(alg, shape, cfg.M)) is not None:
        return f"M={cfg.M} < min_M={need} of {alg.name} for d={shape.d}"
    if why is not None:  # a reason of the schedule's own (a mask it does not run)
        return f"{alg.name} cannot run this shape: {why}"
    if not alg.exact and cfg.eps is None:
        return f"{alg.name} is approximate and needs an error target: give --eps"
    return None


# ----------------------------------------------------------------------------- expansion
def plans(grids: Grid | Iterable[Grid]) -> list[GridPlan]:
    """The grids, validated (a ParameterError naming the first bad value)."""
    if isinstance(grids, Grid):
        grids = [grids]
    grids = list(grids)
    if not grids:
        raise ParameterError("grid: no grid given (an empty grid)")
    return [GridPlan(g) for g in grids]


def checked_size(ps: list[GridPlan], max_configs: int | None) -> int:
    """The grids' size; ParameterError (naming the value lists) when it exceeds
    ``max_configs``, before anything is expanded."""
    n = sum(p.size() for p in ps)
    if max_configs is not None and n > max_configs:
        biggest = max(ps, key=lambda p: p.size())
        parts = " x ".join(f"{v:,} {k}" for k, v in biggest.dims() if v > 1)
        raise ParameterError(
            f"grid: {n:.3g} configurations ({parts}) is more than max_configs={max_configs:,}; "
            "use coarser value lists (e.g. --N 256:65536:x2), or raise --max-configs",
            param="max_configs")
    return n


def check_grid_size(grids: Grid | Iterable[Grid], max_configs: int | None) -> int:
    """The grids' size, counted arithmetically (instant for a grid of 10^15); ParameterError
    when it exceeds ``max_configs``."""
    return checked_size(plans(grids), max_configs)


def iter_expand(grids: Grid | Iterable[Grid]) -> Iterator[tuple[Config, str | None]]:
    """Every configuration of the grids, one at a time and in grid order, with its skip reason
    (None: it can run); a configuration an earlier grid already has is not repeated.  Memory
    does not grow with the grid (no set of seen configurations is kept)."""
    return iter_plans(plans(grids))


def iter_plans(ps: list[GridPlan]) -> Iterator[tuple[Config, str | None]]:
    for k, plan in enumerate(ps):
        earlier = ps[:k]
        for cfg, why in plan.configs():
            if earlier and any(p.holds(cfg) for p in earlier):
                continue
            yield cfg, why


def expand(grids: Grid | Iterable[Grid], *, max_configs: int | None = DEFAULT_MAX_CONFIGS
           ) -> Expansion:
    """All configurations of the grids (deduplicated, in grid order), with skip reasons, in
    memory: for grids of at most ``max_configs`` (checked arithmetically first)."""
    ps = plans(grids)
    checked_size(ps, max_configs)
    out = Expansion()
    for cfg, why in iter_plans(ps):
        if why:
            out.skipped.append((cfg, why))
        else:
            out.configs.append(cfg)
    if not out.configs and not out.skipped:
        raise ParameterError("grid: it expands to no configuration (an empty grid)")
    return out
