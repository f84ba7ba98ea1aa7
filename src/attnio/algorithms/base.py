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


ALIGNMENTS = ("bottom_right", "top_left")


@dataclass(frozen=True)
class Shape:
    """Problem size and mask geometry.

    ``Nq`` queries and ``Nkv`` keys/values per head, head dimension ``d``; ``batch`` x ``heads``
    query heads and ``batch`` x ``kv_heads`` key/value heads (default: as many as query heads;
    ``heads % kv_heads == 0``: grouped-query
    attention, multi-query when ``kv_heads == 1``).  ``causal_align`` says where the causal
    diagonal lies when masking is on: ``"bottom_right"`` (query r sees keys c <= r + Nkv - Nq, as
    flash-attn >= 2.1) or ``"top_left"`` (c <= r, as ``scaled_dot_product_attention(is_causal=True)``).
    ``window`` (with a causal mask) limits each query to its ``window`` most recent keys.

    ``Shape.coerce`` accepts a Shape, ``(N, d)`` (square: Nq = Nkv = N) or ``(Nq, Nkv, d)``.
    """

    Nq: int
    Nkv: int
    d: int
    batch: int = 1
    heads: int = 1
    kv_heads: int | None = None  # None: as many as query heads (no grouping)
    causal_align: str = "bottom_right"
    window: int | None = None

    def __post_init__(self):
        if self.kv_heads is None:
            object.__setattr__(self, "kv_heads", self.heads)
        for name in ("Nq", "Nkv", "d", "batch", "heads", "kv_heads"):
            object.__setattr__(self, name, check_int(name, getattr(self, name), minimum=1))
        if self.heads % self.kv_heads:
            raise ParameterError(
                f"heads must be a multiple of kv_heads (grouped-query attention), got heads="
                f"{self.heads} and kv_heads={self.kv_heads}"
            )
        if self.causal_align not in ALIGNMENTS:
            raise ParameterError(
                f"causal alignment must be one of {ALIGNMENTS}, got {self.causal_align!r}"
            )
        if self.window is not None:
            object.__setattr__(self, "window", check_int("window", self.window, minimum=1))

    @classmethod
    def coerce(cls, shape: Any) -> Shape:
        if isinstance(shape, Shape):
            return shape
        if isinstance(shape, Mapping):
            names = {f.name for f in dataclasses.fields(cls)}
            unknown = set(shape) - names
            if unknown:
                raise ParameterError(f"shape has unknown field(s) {sorted(unknown)}; its fields are "
                                     f"{sorted(names)}")
            missing = {"Nq", "Nkv", "d"} - set(shape)
            if missing:
                raise ParameterError(f"shape is missing field(s) {sorted(missing)}")
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
        """Causal diagonal offset: query r sees keys c <= r + offset."""
        return self.Nkv - self.Nq if self.causal_align == "bottom_right" else 0

    @property
    def group(self) -> int:
        """Query heads per key/value head (1 without grouped-query attention)."""
        return self.heads // self.kv_heads

    @property
    def n_heads(self) -> int:
        """Independent query heads: batch x heads."""
        return self.batch * self.heads

    def head(self) -> Shape:
        """The single-head problem every head of this shape solves."""
        return dataclasses.replace(self, batch=1, heads=1, kv_heads=1)


def kv_visible_hi(shape: Shape, row_stop: int, causal: bool) -> int:
    """Keys ``[.., hi)`` are visible to some query row in ``[.., row_stop)``."""
    if not causal:
        return shape.Nkv
    return max(0, min(shape.Nkv, row_stop + shape.offset))


def kv_visible_lo(shape: Shape, col_start: int, causal: bool) -> int:
    """Queries ``[lo, ..)`` see key ``col_start`` or a later key."""
    if not causal:
        return 0
    return max(0, min(shape.Nq, col_start - shape.offset))


def kv_range(shape: Shape, r0: int, r1: int, causal: bool) -> tuple[int, int]:
    """Keys ``[lo, hi)`` that some query row in ``[r0, r1)`` sees (causal and window masks)."""
    hi = kv_visible_hi(shape, r1, causal)
    lo = 0
    if causal and shape.window is not None:
        lo = max(0, min(shape.Nkv, r0 + shape.offset - shape.window + 1))
    return lo, max(lo, hi)


def q_range(shape: Shape, c0: int, c1: int, causal: bool) -> tuple[int, int]:
    """Query rows ``[lo, hi)`` that see some key in ``[c0, c1)`` (causal and window masks)."""
    lo = kv_visible_lo(shape, c0, causal)
    hi = shape.Nq
    if causal and shape.window is not None:
        hi = max(0, min(shape.Nq, c1 - 1 + shape.window - shape.offset))
    return lo, max(lo, hi)


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
    supports_window: ClassVar[bool] = False
    supports_backward: ClassVar[bool] = False
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
            io = self.predict_total(shape, t, causal)
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
            required = [f.name for f in dataclasses.fields(self.Tiling)
                        if f.default is dataclasses.MISSING
                        and f.default_factory is dataclasses.MISSING]
            missing = [n for n in required if n not in tiling]
            if missing:
                raise ParameterError(
                    f"tiling for {self.name} is missing field(s) {missing}; its fields are "
                    f"{sorted(names)}"
                )
            tiling = self.Tiling(**tiling)
        if not isinstance(tiling, self.Tiling):
            raise ParameterError(f"tiling for {self.name} must be a {self.Tiling.__name__} or a mapping")
        self.validate_tiling(shape, tiling)
        need = self.footprint(shape, tiling, causal)
        if need > M:
            raise CapacityError(f"{self.name} with tiling {tiling}", 0, need, M)
        return tiling

    def validate_tiling(self, shape: Shape, tiling: Any) -> None:
        """Check every integer field (tile sizes, counts) is a positive integer (None allowed
        where the field is optional); subclasses add their own rules."""
        for f in dataclasses.fields(tiling):
            kind = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", "")
            if not kind.startswith("int"):
                continue
            v = getattr(tiling, f.name)
            if v is None and "None" in kind:
                continue
            check_int(f"tiling.{f.name}", v, minimum=1)

    # -------------------------------------------------------------- counts
    def predicted_io(
        self, shape: Any, M: int, *, tiling: Any = None, causal: bool = False
    ) -> IOCount:
        """The closed-form count of reads and writes, exactly as the simulator counts them."""
        shape = Shape.coerce(shape)
        M = check_int("M", M, minimum=1)
        t = self.coerce_tiling(shape, M, tiling, causal)
        return self.predict_total(shape, t, causal)

    def predict_total(self, shape: Shape, tiling: Any, causal: bool = False) -> IOCount:
        """Closed form over every head: heads are independent problems (``_predict`` is per head)."""
        c = self._predict(shape, tiling, causal)
        n = shape.n_heads
        return IOCount(n * c.reads, n * c.writes)

    def run_schedule(self, mem: TwoLevelMemory, Q: SlowArray, K: SlowArray, V: SlowArray,
                     O: SlowArray, *, shape: Shape, tiling: Any, causal: bool,
                     scale: float) -> None:
        """Run every head: Q and O stack ``batch x heads`` blocks of Nq rows, K and V stack
        ``batch x kv_heads`` blocks of Nkv rows.  Each query head runs :meth:`schedule` on views of
        its own rows and of its key/value head's rows; schedules that share K/V tiles across a
        query group override this."""
        if shape.n_heads == 1:
            self.schedule(mem, Q, K, V, O, shape=shape, tiling=tiling, causal=causal, scale=scale)
            return
        for hb in mem.blocks(shape.n_heads, 1):
            q, k, v, o = head_views(mem, shape, hb.start, Q, K, V, O)
            self.schedule(mem, q, k, v, o, shape=shape, tiling=tiling, causal=causal, scale=scale)

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


def head_views(mem: TwoLevelMemory, shape: Shape, qh: int, Q, K, V, O):
    """Views of query head ``qh`` (0 <= qh < batch*heads) and of its key/value head."""
    b, h = divmod(qh, shape.heads)
    kvh = b * shape.kv_heads + h // shape.group
    qs = slice(qh * shape.Nq, (qh + 1) * shape.Nq)
    ks = slice(kvh * shape.Nkv, (kvh + 1) * shape.Nkv)
    return (mem.view(Q, qs, f"Q[{b},{h}]"), mem.view(K, ks, f"K[{b},{kvh % shape.kv_heads}]"),
            mem.view(V, ks, f"V[{b},{kvh % shape.kv_heads}]"), mem.view(O, qs, f"O[{b},{h}]"))


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
