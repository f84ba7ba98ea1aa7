"""The planner for P processors: the scheme and parameters (Ulysses degree, grid shape, ring
layout) of least critical-path words, with its ratio to the best proven bound, as
:func:`attnio.plan` does for one chip.

Every legal candidate of every scheme's mapspace is scored by its closed form (O(P) each), the
least words per device wins (ties: fewer words in all, then the simpler scheme, in
:data:`~attnio.parallel.SCHEMES` order); the work per processor of the pick is reported beside it
(its causal imbalance).

>>> from attnio.core.workload import Shape
>>> p = plan(Shape(4096, 4096, 128, heads=32), 8)
>>> p.scheme, p.words_per_device, round(p.ratio, 2)
('ulysses', 14680064, 1.5)
"""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType
from typing import Any

from ..core.errors import ParameterError
from ..core.workload import Shape
from .base import CommCost, check_P
from .bounds import bound

__all__ = ["CPPlan", "plan"]


@dataclass(frozen=True)
class CPPlan:
    """The pick: ``scheme`` and ``params``, its ``cost`` (closed form, with the work), the
    ``bound`` (words) and ``ratio`` = words per device / bound (None when the bound is 0), the
    ``runner_up`` (another scheme's best) and how many candidates were scored."""

    shape: Shape
    P: int
    cost: CommCost
    bound: int
    bound_theorem: str
    runner_up: CommCost | None
    candidates: int
    time: dict[str, Any] | None = None

    @property
    def scheme(self) -> str:
        return self.cost.scheme

    @property
    def params(self) -> dict[str, Any]:
        return dict(self.cost.params)

    @property
    def words_per_device(self) -> int:
        return self.cost.words_per_device

    @property
    def total_words(self) -> int:
        return self.cost.total

    @property
    def ratio(self) -> float | None:
        return None if self.bound <= 0 else self.words_per_device / self.bound

    def to_dict(self) -> dict[str, Any]:
        w = self.cost.work or (0,)
        ru = self.runner_up
        return {"scheme": self.scheme, "params": self.params, "P": self.P,
                "words_per_device": self.words_per_device, "total_words": self.total_words,
                "bound": self.bound, "ratio": self.ratio, "bound_theorem": self.bound_theorem,
                "max_work": max(w), "min_work": min(w), "candidates": self.candidates,
                "runner_up": None if ru is None else {"scheme": ru.scheme,
                                                      "params": dict(ru.params),
                                                      "words_per_device": ru.words_per_device},
                "shape": self.shape.describe(), "time": self.time}

    def __repr__(self) -> str:
        w = self.cost.work or (0,)
        ratio = "n/a (bound 0)" if self.ratio is None else f"{self.ratio:.3f}"
        lines = [f"Context-parallel plan for {self.shape.describe()}, P={self.P}",
                 f"  Scheme:            {self.scheme} {self.params or ''}".rstrip(),
                 f"  Words per device:  {self.words_per_device:,} (sent + received, the "
                 f"busiest processor)",
                 f"  Total words:       {self.total_words:,}",
                 f"  Work per device:   {min(w):,} .. {max(w):,} score pairs",
                 f"  Bound:             {self.bound:,} ({self.bound_theorem})",
                 f"  Ratio words/bound: {ratio}"]
        if self.runner_up is not None:
            ru = self.runner_up
            lines.append(f"  Runner-up:         {ru.scheme} {ru.params or ''} "
                         f"{ru.words_per_device:,} words per device")
        if self.time is not None:
            t = self.time
            lines.append(f"  Time ({t['link']}, {t['device']} {t['dtype']} peak): "
                         f"{t['time_s'] * 1e3:.3f} ms overlapped, {t['time_serial_s'] * 1e3:.3f} "
                         f"ms serial; communication {t['comm_s'] * 1e3:.3f} ms, compute "
                         f"{t['compute_s'] * 1e3:.3f} ms: "
                         + ("hidden behind compute" if t["hidden"] else "communication-bound"))
        lines.append(f"  ({self.candidates} candidates scored by closed form)")
        return "\n".join(lines)


def _key(c: CommCost, order: dict[str, int]) -> tuple[int, int, int]:
    return (c.words_per_device, c.total, order[c.scheme])


def plan(shape: Any, P: int, scheme: str | None = None, *, link: str | None = None,
         device: str = "h100", dtype: str = "bf16") -> CPPlan:
    """The least critical-path words over every scheme (or only ``scheme``) for P processors;
    with ``link`` (a :data:`~attnio.parallel.timing.LINKS` preset) the least predicted time
    (overlapped; ties: fewer words) on ``device`` in ``dtype`` instead."""
    from . import SCHEMES, get

    shape = Shape.coerce(shape)
    P = check_P(P)
    mods: list[ModuleType] = [get(scheme)] if scheme is not None else list(SCHEMES.values())
    order = {name: i for i, name in enumerate(SCHEMES)}
    best: dict[str, CommCost] = {}
    reasons: list[tuple[str, str]] = []
    n = 0
    for mod in mods:
        ms = mod.mapspace(shape, P)
        if not ms.supported:
            reasons.extend(ms.reasons)
            if scheme is not None:
                raise ms.error()
            continue
        for params in ms.candidates:
            c = mod.cost(shape, P, params, work=False)
            n += 1
            if mod.NAME not in best or _key(c, order) < _key(best[mod.NAME], order):
                best[mod.NAME] = c
    if not best:
        param, msg = reasons[0] if reasons else ("P", "no scheme applies")
        raise ParameterError(f"{param}: no scheme can run it: {msg}", param=param)
    ranked = sorted(best.values(), key=lambda c: _key(c, order))
    pick = ranked[0]
    pick = get(pick.scheme).cost(shape, P, pick.params, work=True)
    timed = None
    if link is not None:
        from .timing import predict

        scored = []
        for mod in mods:
            ms = mod.mapspace(shape, P)
            for params in ms.candidates:
                c = mod.cost(shape, P, params, work=True)
                t = predict(shape, c, link, device, dtype)
                scored.append((t["time_s"], *_key(c, order), c, t))
        scored.sort(key=lambda x: x[:4])
        pick, timed = scored[0][4], scored[0][5]
        ranked = [pick] + [x[4] for x in scored[1:] if x[4].scheme != pick.scheme][:1]
    b = bound(shape, P)
    return CPPlan(shape, P, pick, int(b.value), b.theorem.split(";")[0],
                  ranked[1] if len(ranked) > 1 else None, n, timed)
