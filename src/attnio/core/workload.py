"""The workload: one description of an attention problem, validated once.

A :class:`Shape` holds the sizes (``Nq`` queries and ``Nkv`` keys/values per head, head dimension
``d``), the heads (``batch`` x ``heads`` query heads sharing ``batch`` x ``kv_heads`` key/value
heads: grouped-query attention) and the mask (``causal``, its alignment, a sliding ``window``).
Algorithms, bounds, the planner, the sweeps and the command line all take a Shape, and every
check of these parameters lives in its constructor: nothing downstream validates them again.

>>> s = Shape(1024, 1024, 64, heads=32, kv_heads=8, causal=True, window=256)
>>> s.group, s.n_heads, s.offset, s.masked
(4, 32, 0, True)
>>> Shape.make(N=100, d=8, causal="top_left").causal_align
'top_left'
>>> Shape(4, 4, 2, window=2)
Traceback (most recent call last):
...
attnio.core.errors.ParameterError: window needs a causal mask: pass causal=True
>>> kv_range(Shape(8, 8, 2, causal=True), 0, 4)
(0, 4)

Mask geometry.  Query row r sees keys ``[lo_r, hi_r)`` with ``hi_r = clip(r + 1 + offset, 0,
Nkv)`` and, with a window W, ``lo_r = max(0, r + offset - W + 1)``; ``offset = Nkv - Nq`` when the
diagonal is bottom-right aligned (flash-attn >= 2.1), 0 when top-left aligned (PyTorch's
``is_causal=True``).  Unmasked, every row sees ``[0, Nkv)``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import KW_ONLY, dataclass
from typing import Any

import numpy as np

from .blockmask import BlockMask
from .checks import check_int
from .errors import ParameterError

__all__ = ["ALIGNMENTS", "MAX_M", "MAX_SIZE", "BlockMask", "FastMemory", "Shape", "cdiv",
           "kv_range",
           "kv_visible_hi", "kv_visible_lo",
           "parse_causal", "q_range"]

ALIGNMENTS = ("bottom_right", "top_left")


def cdiv(a: int, b: int) -> int:
    """Ceiling division of non-negative integers."""
    return -(-a // b)


def parse_causal(causal: object, name: str = "causal") -> tuple[bool, str | None]:
    """``causal`` as (masked?, alignment): False/None, True (bottom-right), or an alignment name."""
    if isinstance(causal, np.bool_):  # a numpy boolean is a boolean
        causal = bool(causal)
    if causal is False or causal is None:
        return False, None
    if causal is True:
        return True, "bottom_right"
    if isinstance(causal, str) and causal in ALIGNMENTS:
        return True, causal
    raise ParameterError(f"{name} must be True, False, 'bottom_right' or 'top_left', "
                         f"got {causal!r}", param=name)


_SIZE_FIELDS = ("Nq", "Nkv", "d", "batch", "heads")
#: The largest size of any dimension (2**50, about 1.1e15): products of a few sizes stay far
#: inside float64, so every bound and estimate is a finite number.
MAX_SIZE = 1 << 50
#: The largest fast memory, in words (2**60): beyond every workload MAX_SIZE allows.
MAX_M = 1 << 60


@dataclass(frozen=True)
class Shape:
    """Problem size, heads and mask of one attention workload (validated on construction).

    ``Nq`` queries and ``Nkv`` keys/values per head, head dimension ``d``; ``batch`` x ``heads``
    query heads and ``batch`` x ``kv_heads`` key/value heads (default: as many as query heads;
    ``heads % kv_heads == 0``: grouped-query attention, multi-query when ``kv_heads == 1``).
    ``causal`` turns the causal mask on (True, or an alignment name, which also sets
    ``causal_align``); ``causal_align`` says where the diagonal lies: ``"bottom_right"`` (query r
    sees keys c <= r + Nkv - Nq, as flash-attn >= 2.1) or ``"top_left"`` (c <= r, as
    ``scaled_dot_product_attention(is_causal=True)``).  ``window`` (with a causal mask) limits each
    query to its ``window`` most recent keys.  ``block_mask`` (a
    :class:`~attnio.core.blockmask.BlockMask`) makes the attention block-sparse instead: query
    block i sees key block j iff the layout says so (no causal mask with it: a causal or windowed
    layout is built with ``BlockMask.causal``/``BlockMask.window``).

    ``Shape.coerce`` accepts a Shape, ``(N, d)`` (square), ``(Nq, Nkv, d)`` or a mapping of
    fields; ``Shape.make`` builds one from the arguments the public functions take.
    """

    Nq: int
    Nkv: int
    d: int
    _: KW_ONLY
    batch: int = 1
    heads: int = 1
    kv_heads: int | None = None  # None: as many as query heads (no grouping)
    causal: bool = False
    causal_align: str = "bottom_right"
    window: int | None = None
    block_mask: BlockMask | None = None

    def __post_init__(self) -> None:
        for name in _SIZE_FIELDS:
            object.__setattr__(self, name, check_int(name, getattr(self, name), minimum=1,
                                                     maximum=MAX_SIZE))
        kvh = self.heads if self.kv_heads is None else check_int("kv_heads", self.kv_heads,
                                                                 maximum=MAX_SIZE)
        object.__setattr__(self, "kv_heads", kvh)
        if self.heads % kvh:
            raise ParameterError.worded(
                f"{{heads}} must be a multiple of {{kv_heads}} (grouped-query attention), got "
                f"{{heads}}={self.heads} and {{kv_heads}}={kvh}", param="kv_heads")
        causal = self.causal
        if isinstance(causal, str):  # causal="top_left": the mask and its alignment at once
            masked, align = parse_causal(causal)
            object.__setattr__(self, "causal", masked)
            object.__setattr__(self, "causal_align", align)
        elif not isinstance(causal, bool):
            parse_causal(causal)  # raises with the allowed values
        if self.causal_align not in ALIGNMENTS:
            raise ParameterError(
                f"causal_align must be one of {ALIGNMENTS}, got {self.causal_align!r}",
                param="causal_align")
        if self.window is not None:
            object.__setattr__(self, "window", check_int("window", self.window, minimum=1,
                                                         maximum=MAX_SIZE))
            if not self.causal:
                raise ParameterError.worded("{window} needs a causal mask: pass {causal}",
                                            param="window", causal="causal=True")
        if self.block_mask is not None:
            if not isinstance(self.block_mask, BlockMask):
                raise ParameterError(f"block_mask must be a BlockMask (attnio.BlockMask(layout, "
                                     f"bq, bk)), got {type(self.block_mask).__name__}",
                                     param="block_mask")
            if self.causal:
                raise ParameterError("block_mask and causal cannot be combined: the layout is the "
                                     "mask (BlockMask.causal / BlockMask.window build causal and "
                                     "windowed layouts)", param="block_mask")
            self.block_mask.check(self.Nq, self.Nkv)

    # ------------------------------------------------------------------ construction
    @classmethod
    def make(cls, N: int | None = None, d: int | None = None, *, Nq: int | None = None,
             Nkv: int | None = None, batch: int = 1, heads: int = 1,
             kv_heads: int | None = None, causal: object = False,
             window: int | None = None, block_mask: BlockMask | None = None) -> Shape:
        """A Shape from the public functions' arguments: ``N`` (square) or ``Nq``/``Nkv``, and
        ``causal`` as False, True (bottom-right) or an alignment name."""
        if d is None:
            raise ParameterError("d (the head dimension) is required", param="d")
        if Nq is None and N is not None:
            N = check_int("N", N, maximum=MAX_SIZE)  # named as the caller named it
        Nq = N if Nq is None else Nq
        if Nq is None:
            raise ParameterError("give N (or Nq and Nkv)", param="N")
        Nkv = Nq if Nkv is None else Nkv
        masked, align = parse_causal(causal)
        return cls(Nq, Nkv, d, batch=batch, heads=heads, kv_heads=kv_heads, causal=masked,
                   causal_align=align or "bottom_right", window=window, block_mask=block_mask)

    @classmethod
    def coerce(cls, shape: Any) -> Shape:
        """A Shape from a Shape, ``(N, d)``, ``(Nq, Nkv, d)`` or a mapping of its fields."""
        if isinstance(shape, Shape):
            return shape
        if isinstance(shape, Mapping):
            names = {f.name for f in dataclasses.fields(cls)} - {"_"}
            unknown = set(shape) - names
            if unknown:
                raise ParameterError(f"shape has unknown field(s) {sorted(unknown)}; its fields "
                                     f"are {sorted(names)}", param="shape")
            missing = {"Nq", "Nkv", "d"} - set(shape)
            if missing:
                raise ParameterError(f"shape is missing field(s) {sorted(missing)}",
                                     param="shape")
            rest = {k: v for k, v in shape.items() if k not in ("Nq", "Nkv", "d")}
            return cls(shape["Nq"], shape["Nkv"], shape["d"], **rest)
        try:
            parts = tuple(shape)
        except TypeError:
            raise ParameterError(f"shape must be (N, d), (Nq, Nkv, d) or a Shape, got {shape!r}",
                                 param="shape") from None
        if len(parts) == 2:
            return cls(parts[0], parts[0], parts[1])
        if len(parts) == 3:
            return cls(*parts)
        raise ParameterError(f"shape must be (N, d), (Nq, Nkv, d) or a Shape, got {shape!r}",
                             param="shape")

    def with_mask(self, causal: object = None, window: int | None = None,
                  block_mask: BlockMask | None = None) -> Shape:
        """This shape with the mask of ``causal``/``window``/``block_mask`` merged in (None: keep
        the shape's).

        ``causal`` is False, True (the shape's alignment, bottom-right by default) or an
        alignment name; it must not contradict a mask the shape already has, nor ``window`` the
        shape's window, nor ``block_mask`` the shape's layout.
        """
        if block_mask is not None and block_mask != self.block_mask:
            if self.block_mask is not None:
                raise ParameterError("block_mask conflicts with the shape's block_mask",
                                     param="block_mask")
            return dataclasses.replace(self, block_mask=block_mask).with_mask(causal, window)
        masked, align, win = self.causal, self.causal_align, self.window
        if causal is not None:
            c_masked, c_align = parse_causal(causal)
            if self.causal and not c_masked:
                raise ParameterError(f"causal={causal!r} conflicts with the shape's causal mask",
                                     param="causal")
            if self.causal and causal is not True and c_align != self.causal_align:
                raise ParameterError(f"causal={causal!r} conflicts with the shape's "
                                     f"causal_align={self.causal_align!r}", param="causal")
            if c_masked and not self.causal:
                masked = True
                align = self.causal_align if causal is True else (c_align or "bottom_right")
        if window is not None:
            if win is not None and win != window:
                raise ParameterError(f"window={window} conflicts with the shape's window={win}",
                                     param="window")
            win = window
        if (masked, align, win) == (self.causal, self.causal_align, self.window):
            return self
        return dataclasses.replace(self, causal=masked, causal_align=align, window=win)

    # ------------------------------------------------------------------ derived sizes
    @property
    def N(self) -> int:
        return self.Nq

    @property
    def masked(self) -> bool:
        """Whether any score is masked (the causal mask, with or without a window)."""
        return self.causal

    @property
    def sparse(self) -> bool:
        """Whether the attention is block-sparse (a :class:`BlockMask` gives the mask)."""
        return self.block_mask is not None

    @property
    def mask(self) -> str | bool:
        """The mask as the public functions take it: False, 'bottom_right' or 'top_left'."""
        return self.causal_align if self.causal else False

    @property
    def offset(self) -> int:
        """Causal diagonal offset: query r sees keys c <= r + offset."""
        return self.Nkv - self.Nq if self.causal_align == "bottom_right" else 0

    @property
    def group(self) -> int:
        """Query heads per key/value head (1 without grouped-query attention)."""
        assert self.kv_heads is not None
        return self.heads // self.kv_heads

    @property
    def n_heads(self) -> int:
        """Independent query heads: batch x heads."""
        return self.batch * self.heads

    @property
    def n_kv_heads(self) -> int:
        """Key/value heads in all: batch x kv_heads."""
        assert self.kv_heads is not None
        return self.batch * self.kv_heads

    def head(self) -> Shape:
        """The single-head problem every head of this shape solves."""
        return dataclasses.replace(self, batch=1, heads=1, kv_heads=1)

    def unmasked(self) -> Shape:
        """The same sizes and heads without a mask."""
        return dataclasses.replace(self, causal=False, window=None, block_mask=None)

    def describe(self) -> str:
        """A short human-readable form: ``N=1024 d=64 heads=32 kv_heads=8 causal=bottom_right``."""
        size = f"N={self.Nq}" if self.Nq == self.Nkv else f"Nq={self.Nq} Nkv={self.Nkv}"
        out = f"{size} d={self.d}"
        if self.batch > 1:
            out += f" batch={self.batch}"
        if self.heads > 1:
            out += f" heads={self.heads}"
        if self.kv_heads != self.heads:
            out += f" kv_heads={self.kv_heads}"
        if self.causal:
            out += f" causal={self.causal_align}"
        if self.window is not None:
            out += f" window={self.window}"
        if self.block_mask is not None:
            out += " " + self.block_mask.describe()
        return out


@dataclass(frozen=True)
class FastMemory:
    """The fast memory of a workload: ``M`` words, and the word size (``dtype_bytes``, None: not
    given) and device preset it came from (None: given in words).  The one description the
    planner and the command line share (``attnio.planner.fast_memory`` builds one from words,
    bytes or a device)."""

    M: int
    dtype_bytes: int | None = None
    device: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "M", check_int("M", self.M, minimum=1, maximum=MAX_M))
        if self.dtype_bytes is not None:
            object.__setattr__(self, "dtype_bytes",
                               check_int("dtype_bytes", self.dtype_bytes, minimum=1, maximum=64))

    def bytes(self, words: int) -> int | None:
        """``words`` in bytes (None when the word size was not given)."""
        return None if self.dtype_bytes is None else words * self.dtype_bytes


# ---------------------------------------------------------------------- mask geometry
def kv_visible_hi(shape: Shape, row_stop: int) -> int:
    """Keys ``[.., hi)`` are visible to some query row in ``[.., row_stop)``."""
    if not shape.causal:
        return shape.Nkv
    return max(0, min(shape.Nkv, row_stop + shape.offset))


def kv_visible_lo(shape: Shape, col_start: int) -> int:
    """Queries ``[lo, ..)`` see key ``col_start`` or a later key."""
    if not shape.causal:
        return 0
    return max(0, min(shape.Nq, col_start - shape.offset))


def kv_range(shape: Shape, r0: int, r1: int) -> tuple[int, int]:
    """Keys ``[lo, hi)`` that some query row in ``[r0, r1)`` sees (causal and window masks)."""
    hi = kv_visible_hi(shape, r1)
    lo = 0
    if shape.causal and shape.window is not None:
        lo = max(0, min(shape.Nkv, r0 + shape.offset - shape.window + 1))
    return lo, max(lo, hi)


def q_range(shape: Shape, c0: int, c1: int) -> tuple[int, int]:
    """Query rows ``[lo, hi)`` that see some key in ``[c0, c1)`` (causal and window masks)."""
    lo = kv_visible_lo(shape, c0)
    hi = shape.Nq
    if shape.causal and shape.window is not None:
        hi = max(0, min(shape.Nq, c1 - 1 + shape.window - shape.offset))
    return lo, max(lo, hi)
