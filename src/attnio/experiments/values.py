"""Value lists of a sweep grid: sizes, masks, windows and algorithm names, parsed.

Sizes use ``START:STOP:xF`` (geometric, factor F), ``START:STOP:+S`` (arithmetic), or commas:
``"256:16384:x2"``, ``"16,64,128"``, ``"64,256:1024:x4"``.  Every value is checked against the
library's limits here (sizes at most :data:`~attnio.core.workload.MAX_SIZE`, fast memory at most
:data:`~attnio.core.workload.MAX_M`), so a grid that parses holds only workloads a
:class:`~attnio.core.workload.Shape` accepts.

>>> parse_values("N", "256:2048:x2")
(256, 512, 1024, 2048)
>>> parse_causal("both"), parse_window("none,64")
((False, True), (None, 64))
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import algorithms as _alg
from ..core.errors import ParameterError
from ..core.workload import MAX_M, MAX_SIZE

__all__ = ["parse_algorithms", "parse_causal", "parse_values", "parse_window"]

_MAX_VALUES = 100_000


def parse_values(name: str, spec: Any) -> tuple[int, ...]:
    """Expand ``"a:b:xF"``, ``"a:b:+S"``, ``"a,b,c"`` (or an int / a list) into sorted ints."""
    if isinstance(spec, bool):
        raise ParameterError(f"{name}: expected integers, got {spec!r}", param=name)
    if isinstance(spec, (int, np.integer)):
        return (_positive(name, int(spec)),)
    if isinstance(spec, (list, tuple)):
        _flat(name, spec)
        out: set[int] = set()
        for s in spec:
            out.update(parse_values(name, s))
        return tuple(sorted(out))
    if not isinstance(spec, str):
        raise ParameterError(f"{name}: expected a value list like '256:16384:x2', got {spec!r}", param=name)
    out = set()
    for part in (p.strip() for p in spec.split(",")):
        if not part:
            continue
        if ":" not in part:
            out.add(_positive(name, _int(name, part)))
            continue
        bits = part.split(":")
        if len(bits) not in (2, 3):
            raise ParameterError(f"{name}: range {part!r} must be START:STOP[:xF|:+S]", param=name)
        lo, hi = _int(name, bits[0]), _int(name, bits[1])
        step = bits[2].strip() if len(bits) == 3 else "x2"
        _positive(name, lo)
        if hi < lo:
            raise ParameterError(f"{name}: range {part!r} has STOP {hi} < START {lo} (an empty grid)", param=name)
        _positive(name, hi)
        if step.startswith(("x", "*")):
            f = _int(name, step[1:])
            if f < 2:
                raise ParameterError(f"{name}: geometric factor in {part!r} must be >= 2, got {f}", param=name)
            v = lo
            while v <= hi:
                out.add(v)
                v *= f
                _guard(name, out)
        elif step.startswith("+") or step.lstrip("-").isdigit():
            s = _int(name, step.lstrip("+"))
            if s < 1:
                raise ParameterError(f"{name}: arithmetic step in {part!r} must be >= 1, got {s}", param=name)
            for v in range(lo, hi + 1, s):
                out.add(v)
                _guard(name, out)
        else:
            raise ParameterError(f"{name}: step {step!r} in {part!r} must be xF (geometric) or +S", param=name)
    if not out:
        raise ParameterError(f"{name}: {spec!r} gives no values (an empty grid)", param=name)
    return tuple(sorted(out))


def _flat(name: str, spec: list | tuple) -> None:
    """A list of values, not of lists (a TOML ``N = [[64, 128]]`` is refused)."""
    if any(isinstance(v, (list, tuple, dict)) for v in spec):
        raise ParameterError(f"{name}: expected a list of values, got a nested list {spec!r}",
                             param=name)


def _int(name: str, s: str) -> int:
    try:
        return int(s.strip())
    except ValueError:
        raise ParameterError(f"{name}: {s.strip()!r} is not an integer", param=name) from None


def _positive(name: str, v: int) -> int:
    """``v`` if it is an integer in [1, the limit of ``name``], else a ParameterError."""
    if v < 1:
        raise ParameterError(f"{name}: values must be integers >= 1, got {v}", param=name)
    limit = MAX_M if name == "M" else MAX_SIZE
    if v > limit:
        raise ParameterError(f"{name}: values must be at most 2**{limit.bit_length() - 1} "
                             f"({limit:,}), got {v:,}", param=name)
    return v


def _guard(name: str, out: set) -> None:
    if len(out) > _MAX_VALUES:
        raise ParameterError(f"{name}: more than {_MAX_VALUES} values; use a coarser step", param=name)


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
        _flat("causal", spec)
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
        f"(none + bottom_right + top_left), got {spec!r}", param="causal")


def parse_window(spec: Any) -> tuple:
    """Sliding windows of a grid: ``"none"`` (no window) and/or integers >= 1, e.g.
    ``"none,64,256"`` or ``"64:1024:x4"``."""
    if spec is None:
        return (None,)
    if isinstance(spec, (list, tuple)):
        _flat("window", spec)
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
            raise ParameterError(f"window: {spec!r} gives no values (an empty grid)", param="window")
        return ((None,) if has_none else ()) + vals
    return parse_values("window", spec)


def parse_algorithms(spec: Any) -> tuple[str, ...]:
    """``"all"`` (every registered algorithm), ``"exact"``, ``"approximate"``, or a comma list
    of names; ``"plan"`` is the planner's choice as a series of its own
    (:mod:`attnio.experiments.plan_series`; never part of ``all``)."""
    if isinstance(spec, str):
        parts = [p.strip() for p in spec.split(",") if p.strip()]
    else:
        parts = [str(p).strip() for p in spec]
    if not parts:
        raise ParameterError("algo: no algorithm named (an empty grid); use 'all' or names",
                             param="algo")
    out: list[str] = []
    for p in parts:
        if p == "plan":  # the planner's choice per configuration (plan_series)
            new = ["plan"]
        elif p in ("all", "kind:attention"):
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

