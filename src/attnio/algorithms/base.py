"""The ``Algorithm`` protocol every schedule implements, and the shapes and counts it speaks in.

An algorithm is a stateless object with

* ``name`` (its registry key) and ``summary``;
* ``Tiling``: a frozen dataclass of its tile parameters;
* ``candidate_tilings(shape, M, causal)``: the tilings it considers (the planner scores them);
* ``footprint(shape, tiling, causal)``: the peak fast-memory words the schedule needs;
* ``predicted_io(shape, M, tiling=None, causal=False)``: the closed-form count, exactly as the
  simulator counts it;
* ``schedule(mem, inputs, output, ...)``: the schedule itself, on a :class:`TwoLevelMemory`.

``default_tiling`` picks, among the candidates that fit in M, the one with the least predicted
I/O, ties broken toward fewer, larger steps.
"""

from __future__ import annotations

import dataclasses
import math
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from ..errors import CapacityError, ParameterError, check_int
from ..memory import SlowArray, TwoLevelMemory

__all__ = ["Algorithm", "IOCount", "Shape", "cdiv", "kv_visible_hi", "kv_visible_lo"]


def cdiv(a: int, b: int) -> int:
    """Ceiling division of non-negative integers."""
    return -(-a // b)


@dataclass(frozen=True)
class Shape:
    """Problem size: ``Nq`` queries, ``Nkv`` keys/values, head dimension ``d``.

    ``Shape.coerce`` accepts a Shape, ``(N, d)`` (square: Nq = Nkv = N) or ``(Nq, Nkv, d)``.
    """

    Nq: int
    Nkv: int
    d: int
    batch: int = 1
    heads: int = 1
    kv_heads: int = 1

    def __post_init__(self):
        for name in ("Nq", "Nkv", "d", "batch", "heads", "kv_heads"):
            object.__setattr__(self, name, check_int(name, getattr(self, name), minimum=1))

    @classmethod
    def coerce(cls, shape: Any) -> Shape:
        if isinstance(shape, Shape):
            return shape
        if isinstance(shape, Mapping):
            return cls(**shape)
        try:
            parts = tuple(shape)
        except TypeError:
            raise ParameterError(f"shape must be (N, d), (Nq, Nkv, d) or a Shape, got {shape!r}") from None
        if len(parts) == 2:
            return cls(parts[0], parts[0], parts[1])
        if len(parts) == 3:
            return cls(*parts)
        raise ParameterError(f"shape must be (N, d), (Nq, Nkv, d) or a Shape, got {shape!r}")

    @property
    def N(self) -> int:
        return self.Nq

    @property
    def offset(self) -> int:
        """Causal diagonal offset (bottom-right aligned): query r sees keys c <= r + offset."""
        return self.Nkv - self.Nq


def kv_visible_hi(shape: Shape, row_stop: int, causal: bool) -> int:
    """Keys ``[0, hi)`` are visible to some query row in ``[.., row_stop)`` (bottom-right causal)."""
    if not causal:
        return shape.Nkv
    return max(0, min(shape.Nkv, row_stop + shape.offset))


def kv_visible_lo(shape: Shape, col_start: int, causal: bool) -> int:
    """Queries ``[lo, Nq)`` see key ``col_start`` or later keys (bottom-right causal)."""
    if not causal:
        return 0
    return max(0, col_start - shape.offset)


@dataclass(frozen=True)
class IOCount:
    """A predicted count of reads and writes (words)."""

    reads: int
    writes: int

    @property
    def total(self) -> int:
        return self.reads + self.writes

    def __add__(self, other: IOCount) -> IOCount:
        return IOCount(self.reads + other.reads, self.writes + other.writes)


class Algorithm(ABC):
    """One schedule of attention (or of a building block) on the two-level memory."""

    name: ClassVar[str]
    summary: ClassVar[str]
    kind: ClassVar[str] = "attention"
    exact: ClassVar[bool] = True
    Tiling: ClassVar[type]

    # -------------------------------------------------------------- tilings
    @abstractmethod
    def candidate_tilings(self, shape: Shape, M: int, causal: bool = False) -> Iterable[Any]:
        """Tilings worth considering for this size (all must fit in M)."""

    @abstractmethod
    def footprint(self, shape: Shape, tiling: Any, causal: bool = False) -> int:
        """Peak fast-memory words the schedule needs with this tiling."""

    @abstractmethod
    def min_M(self, shape: Shape, causal: bool = False) -> int:
        """The least M for which some tiling fits."""

    @abstractmethod
    def _predict(self, shape: Shape, tiling: Any, causal: bool) -> IOCount:
        """Closed-form count for a validated tiling."""

    def steps(self, shape: Shape, tiling: Any, causal: bool = False) -> int:
        """Number of tile steps (used to break ties toward fewer, larger steps)."""
        return 0

    def default_tiling(self, shape: Any, M: int, causal: bool = False) -> Any:
        """The least-I/O candidate tiling; ties broken toward fewer steps."""
        shape = Shape.coerce(shape)
        M = check_int("M", M, minimum=1)
        self._check_min_M(shape, M, causal)
        best, best_key = None, None
        for t in self.candidate_tilings(shape, M, causal):
            if self.footprint(shape, t, causal) > M:
                continue
            io = self._predict(shape, t, causal)
            key = (io.total, self.steps(shape, t, causal))
            if best_key is None or key < best_key:
                best, best_key = t, key
        if best is None:  # pragma: no cover - min_M guarantees a candidate
            raise ParameterError(f"{self.name}: no tiling fits in M={M}")
        return best

    def _check_min_M(self, shape: Shape, M: int, causal: bool) -> None:
        m = self.min_M(shape, causal)
        if M < m:
            raise ParameterError(
                f"M={M} is too small for {self.name} with d={shape.d}: it needs M >= {m} words"
            )

    def coerce_tiling(
        self, shape: Shape, M: int, tiling: Any = None, causal: bool = False, inputs: Any = None
    ) -> Any:
        """Validate a user tiling (a Tiling, a mapping of its fields, or None for the default).

        ``inputs`` is ``(Q, K, V)`` in compute mode (None in count mode), for algorithms whose
        parameters depend on the data (an entry bound, say); exact algorithms ignore it.
        """
        if tiling is None or tiling == "auto":
            return self.default_tiling(shape, M, causal)
        if isinstance(tiling, Mapping):
            names = {f.name for f in dataclasses.fields(self.Tiling)}
            unknown = set(tiling) - names
            if unknown:
                raise ParameterError(
                    f"tiling for {self.name} has unknown field(s) {sorted(unknown)}; "
                    f"its fields are {sorted(names)}"
                )
            try:
                tiling = self.Tiling(**tiling)
            except TypeError as e:
                raise ParameterError(f"tiling for {self.name}: {e}") from None
        if not isinstance(tiling, self.Tiling):
            raise ParameterError(f"tiling for {self.name} must be a {self.Tiling.__name__} or a mapping")
        self.validate_tiling(shape, tiling)
        need = self.footprint(shape, tiling, causal)
        if need > M:
            raise CapacityError(f"{self.name} with tiling {tiling}", 0, need, M)
        return tiling

    def validate_tiling(self, shape: Shape, tiling: Any) -> None:
        """Check tile sizes are positive integers (subclasses add their own rules)."""
        for f in dataclasses.fields(tiling):
            v = getattr(tiling, f.name)
            if isinstance(v, int) and not isinstance(v, bool):
                check_int(f"tiling.{f.name}", v, minimum=1)

    # -------------------------------------------------------------- counts
    def predicted_io(
        self, shape: Any, M: int, *, tiling: Any = None, causal: bool = False
    ) -> IOCount:
        """The closed-form count of reads and writes, exactly as the simulator counts them."""
        shape = Shape.coerce(shape)
        M = check_int("M", M, minimum=1)
        t = self.coerce_tiling(shape, M, tiling, causal)
        return self._predict(shape, t, causal)

    # -------------------------------------------------------------- the schedule
    @abstractmethod
    def schedule(
        self,
        mem: TwoLevelMemory,
        Q: SlowArray,
        K: SlowArray,
        V: SlowArray,
        O: SlowArray,
        *,
        shape: Shape,
        tiling: Any,
        causal: bool,
        scale: float,
    ) -> None:
        """Run the schedule: read Q, K, V through ``mem`` and leave the output in O."""

    def __repr__(self) -> str:
        return f"<algorithm {self.name}: {self.summary}>"


def default_scale(d: int, scale: float | None) -> float:
    if scale is None:
        return 1.0 / math.sqrt(d)
    try:
        s = float(scale)
    except (TypeError, ValueError):
        raise ParameterError(f"scale must be a finite real number, got {scale!r}") from None
    if not math.isfinite(s):
        raise ParameterError(f"scale must be a finite real number, got {scale!r}")
    return s
