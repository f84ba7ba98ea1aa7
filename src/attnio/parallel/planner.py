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

__all__ = ["CPPlan", "plan", "plan_bound"]


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


def plan_bound(shape: Shape, P: int, *, backward: bool = False) -> tuple[int, str]:
    """The bound the planner certifies against, and its theorem: the forward pass's
    (:func:`~attnio.parallel.bounds.bound`), or with ``backward`` both passes', each starting
    from the declared layout: the averaging bounds (Theorems 1 and 3) of the two passes add, the
    busiest processor's (Theorem 2) counts for the larger pass."""
    if not backward:
        b = bound(shape, P)
        return int(b.value), b.theorem.split(";")[0]
    import math

    from .bounds import busiest_bound, group_bound, linear_bound

    avg = sum(math.ceil(max(linear_bound(shape, P, backward=bw),
                            group_bound(shape, P, backward=bw))) for bw in (False, True))
    busy = max(math.floor(busiest_bound(shape, P, backward=bw)) for bw in (False, True))
    return ((avg, "Theorems 1/3 over both passes") if avg >= busy
            else (busy, "Theorem 2 (the busiest processor, one pass)"))


def _key(c: CommCost, order: dict[str, int]) -> tuple[int, int, int]:
    return (c.words_per_device, c.total, order[c.scheme])


def _with_backward(shape: Shape, P: int, c: CommCost) -> CommCost:
    """``c`` plus its scheme's backward pass (words add per processor; work counted twice)."""
    from .backward import cost_backward

    b = cost_backward(c.scheme, shape, P, c.params)

    def per() -> tuple[tuple[int, ...], tuple[int, ...]]:
        return (tuple(x + y for x, y in zip(c.sent, b.sent)),
                tuple(x + y for x, y in zip(c.received, b.received)))

    # the busiest processor is the same in both passes (every processor alike, or the grid's
    # cells with δ_q = 0 in both): the peaks add
    work = None if c.work is None else tuple(2 * w for w in c.work)
    return CommCost(c.scheme, c.params, P, c.words_per_device + b.words_per_device,
                    c.total + b.total, per, work)


def plan(shape: Any, P: int, scheme: str | None = None, *, link: str | None = None,
         device: str = "h100", dtype: str = "bf16", backward: bool = False) -> CPPlan:
    """The least critical-path words over every scheme (or only ``scheme``) for P processors;
    with ``link`` (a :data:`~attnio.parallel.timing.LINKS` preset) the least predicted time
    (overlapped; ties: fewer words) on ``device`` in ``dtype`` instead.  ``backward``: the
    forward and backward passes together, over the schemes with a backward schedule
    (:data:`attnio.parallel.backward.SCHEMES`).  Each pass starts from the declared layout and
    processes every required pair, so the averaging bounds (Theorems 1 and 3) of the two passes
    add, and the busiest processor's (Theorem 2) counts for the larger pass alone."""
    from . import SCHEMES, get

    shape = Shape.coerce(shape)
    P = check_P(P)
    mods: list[ModuleType] = [get(scheme)] if scheme is not None else list(SCHEMES.values())
    if backward:
        from .backward import SCHEMES as WITH_BACKWARD

        if scheme is not None and scheme not in WITH_BACKWARD:
            raise ParameterError(f"scheme {scheme!r} has no backward schedule here; those that "
                                 f"do: {', '.join(WITH_BACKWARD)}", param="scheme")
        mods = [m for m in mods if m.NAME in WITH_BACKWARD]
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
            if backward:
                c = _with_backward(shape, P, c)
            n += 1
            if mod.NAME not in best or _key(c, order) < _key(best[mod.NAME], order):
                best[mod.NAME] = c
    if not best:
        param, msg = reasons[0] if reasons else ("P", "no scheme applies")
        raise ParameterError(f"{param}: no scheme can run it: {msg}", param=param)
    ranked = sorted(best.values(), key=lambda c: _key(c, order))
    pick = ranked[0]
    pick = get(pick.scheme).cost(shape, P, pick.params, work=True)
    if backward:
        pick = _with_backward(shape, P, pick)
    timed = None
    if link is not None:
        from .timing import predict

        scored = []
        for mod in mods:
            ms = mod.mapspace(shape, P)
            for params in ms.candidates:
                c = mod.cost(shape, P, params, work=True)
                if backward:
                    c = _with_backward(shape, P, c)
                t = predict(shape, c, link, device, dtype)
                scored.append((t["time_s"], *_key(c, order), c, t))
        scored.sort(key=lambda x: x[:4])
        pick, timed = scored[0][4], scored[0][5]
        ranked = [pick] + [x[4] for x in scored[1:] if x[4].scheme != pick.scheme][:1]
    bval, theorem = plan_bound(shape, P, backward=backward)
    return CPPlan(shape, P, pick, bval, theorem,
                  ranked[1] if len(ranked) > 1 else None, n, timed)


@dataclass(frozen=True)
class CPBounds:
    """The proven bounds on words per device (``attnio cp bound``): the best (``bound``, a
    :class:`~attnio.parallel.bounds.Bound`) and each theorem's value (Theorem 4 only with a local
    ``memory``); with a ``scheme``, its plan's words per device (its backward's with
    ``backward``) and their ratio to the bound (None when the bound is 0)."""

    shape: Shape
    P: int
    backward: bool
    memory: int | None
    bound: Any
    linear: float
    busiest: float
    groups: float
    memory_value: float | None
    scheme: str | None = None
    params: dict[str, Any] | None = None
    words_per_device: int | None = None
    ratio: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """The JSON object of ``attnio cp bound --json``."""
        b = self.bound
        out: dict[str, Any] = {
            "bound": int(b.value), "theorem": b.theorem, "P": self.P,
            "shape": self.shape.describe(), "backward": self.backward, "memory": self.memory,
            "theorem1_linear": self.linear, "theorem2_busiest": self.busiest,
            "theorem3_groups": self.groups, "theorem4_memory": self.memory_value,
            "assumptions": list(b.assumptions)}
        if self.scheme is not None:
            out.update(scheme=self.scheme, params=self.params,
                       words_per_device=self.words_per_device, ratio=self.ratio)
        return out


def bounds_of(shape: Any, P: int, *, memory: int | None = None, backward: bool = False,
              scheme: str | None = None) -> CPBounds:
    """Every proven bound on the words per device of ``shape`` over P processors, forward or
    ``backward``: the best of Theorems 1-3 (and 4 with a local ``memory`` of L words) and each
    one's value; with ``scheme``, that scheme's least words per device (:func:`plan`) beside
    them, and their ratio to the bound."""
    from . import get
    from .bounds import busiest_bound, group_bound, linear_bound, memory_bound

    shape = Shape.coerce(shape)
    P = check_P(P)
    if scheme is not None:
        get(scheme)  # an unknown name, before anything else
    b = bound(shape, P, memory=memory, backward=backward)
    linear = float(linear_bound(shape, P, backward=backward))
    busiest = busiest_bound(shape, P, backward=backward)
    groups = float(group_bound(shape, P, backward=backward))
    mem = None if memory is None else float(memory_bound(shape, P, memory, backward=backward))
    if scheme is None:
        return CPBounds(shape, P, backward, memory, b, linear, busiest, groups, mem)
    s = plan(shape, P, scheme)
    words = s.words_per_device
    if backward:
        from .backward import cost_backward

        words = cost_backward(s.scheme, shape, P, s.params).words_per_device
    return CPBounds(shape, P, backward, memory, b, linear, busiest, groups, mem, s.scheme,
                    s.params, words, None if not b.value else words / b.value)
