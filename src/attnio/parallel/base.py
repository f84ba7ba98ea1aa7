"""What every context-parallel scheme declares: its mapspace, its cost, its run.

A scheme is one module with

* ``NAME`` and ``LAYOUT`` (the declared layout its inputs start and its outputs end in);
* ``mapspace(shape, P) -> Mapspace``: the legal parameters (each a dict) and, when there are none,
  the reasons, each naming the parameter that rules the shape out;
* ``cost(shape, P, params, work=True) -> CommCost``: the closed form, words sent and received
  per processor (and the work per processor), O(P) at most whatever N;
* ``layout(shape, P, params) -> Layout`` and ``execute(cluster, params)``: the run on the
  referee (:class:`~attnio.parallel.cluster.Cluster`), which the tests hold equal to ``cost``.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..core.errors import ParameterError
from ..core.workload import Shape

__all__ = ["CommCost", "Mapspace", "check_P", "divisors", "ulysses_reason"]


def check_P(P: object) -> int:
    """P, the number of processors: an integer in [1, 2**20]."""
    from ..core.checks import check_int

    return check_int("P", P, minimum=1, maximum=1 << 20)


def divisors(n: int) -> list[int]:
    """The divisors of n, increasing."""
    small = [k for k in range(1, math.isqrt(n) + 1) if n % k == 0]
    return sorted(set(small + [n // k for k in small]))


def ulysses_reason(shape: Shape, u: int) -> tuple[str, str] | None:
    """Why the heads cannot be split over u processors (None: they can): query heads must be a
    multiple of u, and the key/value heads a multiple of u or a divisor of it (each processor's
    query heads then share one key/value head, which is replicated)."""
    if u == 1:
        return None
    if shape.heads % u:
        return "heads", f"heads={shape.heads} is not a multiple of the {u} processors its heads " \
                        f"are split over"
    kv = shape.kv_heads
    assert kv is not None
    if kv % u and u % kv:
        return "kv_heads", f"kv_heads={kv} is neither a multiple nor a divisor of the {u} " \
                           f"processors its heads are split over"
    return None


@dataclass(frozen=True)
class Mapspace:
    """The legal parameters of a scheme on a shape and P, or the reasons it has none
    (``(parameter, message)`` pairs)."""

    scheme: str
    candidates: tuple[dict[str, Any], ...]
    reasons: tuple[tuple[str, str], ...] = ()

    @property
    def supported(self) -> bool:
        return bool(self.candidates)

    def error(self) -> ParameterError:
        """The first reason as a ParameterError naming its parameter."""
        param, msg = self.reasons[0] if self.reasons else ("P", "no legal parameters")
        return ParameterError(f"{param}: {self.scheme} cannot run it: {msg}", param=param)

    def check(self, params: dict[str, Any] | None) -> dict[str, Any]:
        """``params`` if legal (None: the first candidate), else a ParameterError."""
        if not self.candidates:
            raise self.error()
        if params is None:
            return dict(self.candidates[0])
        for c in self.candidates:
            if all(params.get(k) == v for k, v in c.items()) and set(params) <= set(c):
                return dict(c)
        raise ParameterError(f"{self.scheme}: parameters {params} are not legal here; legal: "
                             f"{[dict(c) for c in self.candidates[:6]]}"
                             f"{' ...' if len(self.candidates) > 6 else ''}", param="params")


@dataclass(frozen=True)
class CommCost:
    """A scheme's closed form on P processors: the critical path ``words_per_device`` (max over
    processors of words sent plus received), ``total`` (words moved in all), the per-processor
    words ``sent`` and ``received`` (tuples of P, built on first use from ``per_processor``) and
    the ``work`` (visible score pairs) per processor (None when not asked for)."""

    scheme: str
    params: dict[str, Any]
    P: int
    words_per_device: int
    total: int
    per_processor: Callable[[], tuple[tuple[int, ...], tuple[int, ...]]] = field(repr=False)
    work: tuple[int, ...] | None = None

    @functools.cached_property
    def _expanded(self) -> tuple[tuple[int, ...], tuple[int, ...]]:
        return self.per_processor()

    @property
    def sent(self) -> tuple[int, ...]:
        return self._expanded[0]

    @property
    def received(self) -> tuple[int, ...]:
        return self._expanded[1]

    @property
    def words(self) -> tuple[int, ...]:
        return tuple(s + r for s, r in zip(self.sent, self.received))

    def to_dict(self) -> dict[str, Any]:
        w = self.work
        return {"scheme": self.scheme, "params": dict(self.params), "P": self.P,
                "words_per_device": self.words_per_device, "total_words": self.total,
                "max_work": None if w is None else max(w),
                "min_work": None if w is None else min(w)}
