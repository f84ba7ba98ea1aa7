"""Block-sparse attention: a boolean layout over blocks of queries and keys.

A :class:`BlockMask` cuts the queries into blocks of ``bq`` rows and the keys into blocks of
``bk`` keys; query block i sees key block j exactly when ``layout[i, j]`` is True (every pair of
the block, no finer mask inside it).  A masked-out block's scores are -inf: its keys add nothing
to its rows, and a row whose blocks are all masked outputs 0 (as a fully masked row does under
a causal mask).  This is the block-sparse attention of FlashAttention (Dao et al. 2022, §3.3 and
Proposition 4: Θ(Nd + N²d²s/M) words, ``s`` the fraction of kept blocks): the schedules that
support it skip the masked blocks, neither loading nor counting them.

A layout is validated once, when it is built: a 2-D boolean array (integers 0/1 are accepted),
at least one kept block, positive block sizes.  It is immutable and hashable (by its block
sizes and a digest of its bits), so a :class:`~attnio.core.workload.Shape` that carries one can
key caches.  A Shape checks that the layout covers its sizes: ``ceil(Nq/bq)`` query blocks and
``ceil(Nkv/bk)`` key blocks (the last block of each axis may be short).

>>> bm = BlockMask.causal(256, 256, 64)
>>> bm.layout.astype(int).tolist()
[[1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 1, 1]]
>>> bm.density
0.625
>>> BlockMask.random(256, 256, 64, density=0.5, seed=1).kept
8
>>> BlockMask([[1.5]], 4)
Traceback (most recent call last):
...
attnio.core.errors.ParameterError: block_mask must be a boolean array (integers 0/1 are accepted), got dtype float64
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from .checks import check_int, check_real
from .errors import ParameterError
from .paths import check_input_file

__all__ = ["MAX_LAYOUT_BLOCKS", "BlockMask", "LayoutRequest", "default_block_size"]

_ALIGNMENTS = ("bottom_right", "top_left")
_MAX_BLOCK = 1 << 40  # a block side beyond any sequence length (counts stay in int64)


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


class BlockMask:
    """A block-sparse layout: ``layout[i, j]`` says whether query block i sees key block j.

    ``bq`` query rows and ``bk`` keys per block (``bk`` defaults to ``bq``).  Build one from a
    boolean array, or with :meth:`causal`, :meth:`window`, :meth:`random` or :meth:`load`.
    """

    __slots__ = ("_digest", "_hash", "bk", "bq", "layout")

    def __init__(self, layout: Any, bq: int, bk: int | None = None):
        bq = check_int("block_mask.bq", bq, minimum=1, maximum=_MAX_BLOCK)
        bk = bq if bk is None else check_int("block_mask.bk", bk, minimum=1, maximum=_MAX_BLOCK)
        try:
            a = np.asarray(layout)
        except (TypeError, ValueError) as e:  # ragged nested lists
            raise ParameterError(f"block_mask must be a 2-D boolean array: {e}",
                                 param="block_mask") from None
        if a.ndim != 2 or a.shape[0] < 1 or a.shape[1] < 1:
            raise ParameterError(f"block_mask must be a 2-D boolean array (query blocks x key "
                                 f"blocks), got an array of dimensions {a.shape}", param="block_mask")
        if a.dtype != np.bool_:
            if not np.issubdtype(a.dtype, np.integer) or not np.isin(a, (0, 1)).all():
                raise ParameterError(f"block_mask must be a boolean array (integers 0/1 are "
                                     f"accepted), got dtype {a.dtype}", param="block_mask")
            a = a.astype(bool)
        a = np.ascontiguousarray(a, dtype=bool).copy()
        a.setflags(write=False)
        if not a.any():
            raise ParameterError("block_mask keeps no block: at least one entry must be True",
                                 param="block_mask")
        self.layout = a
        self.bq, self.bk = bq, bk
        import hashlib  # (OpenSSL's module: on the first block mask, not at import attnio)

        h = hashlib.sha256(np.packbits(a).tobytes())
        h.update(f"{a.shape}".encode())
        self._digest = h.hexdigest()[:16]
        self._hash = hash((bq, bk, a.shape, self._digest))

    # ------------------------------------------------------------------ constructors
    @classmethod
    def from_mask(cls, Nq: int, Nkv: int, bq: int, bk: int | None = None, *,
                  causal: object = True, window: int | None = None) -> BlockMask:
        """The blocks of a causal (and windowed) mask: block (i, j) is kept when the mask leaves
        any pair of it visible.  ``causal`` is True / "bottom_right" or "top_left"."""
        Nq, Nkv = check_int("Nq", Nq), check_int("Nkv", Nkv)
        bq = check_int("block_mask.bq", bq)
        bk = bq if bk is None else check_int("block_mask.bk", bk)
        if causal is True:
            causal = "bottom_right"
        if causal not in _ALIGNMENTS:
            raise ParameterError(f"causal must be True, 'bottom_right' or 'top_left', got "
                                 f"{causal!r}", param="causal")
        off = Nkv - Nq if causal == "bottom_right" else 0
        if window is not None:
            window = check_int("window", window)
        Tq, Tk = _cdiv(Nq, bq), _cdiv(Nkv, bk)
        out = np.zeros((Tq, Tk), dtype=bool)
        for i in range(Tq):
            r0, r1 = i * bq, min(Nq, (i + 1) * bq)
            hi = max(0, min(Nkv, r1 + off))  # keys [lo, hi) some row of the block sees
            lo = 0 if window is None else max(0, min(Nkv, r0 + off - window + 1))
            if hi > lo:
                out[i, lo // bk:(hi - 1) // bk + 1] = True
        if not out.any():
            raise ParameterError(f"the causal mask of Nq={Nq}, Nkv={Nkv} leaves no pair visible",
                                 param="block_mask")
        return cls(out, bq, bk)

    @classmethod
    def causal(cls, Nq: int, Nkv: int, bq: int, bk: int | None = None,
               align: str = "bottom_right") -> BlockMask:
        """Causal attention as a block layout: the blocks on and below the (aligned) diagonal."""
        return cls.from_mask(Nq, Nkv, bq, bk, causal=align)

    @classmethod
    def window(cls, Nq: int, Nkv: int, window: int, bq: int, bk: int | None = None,
               align: str = "bottom_right") -> BlockMask:
        """Sliding-window attention (each query's ``window`` most recent keys) as a block layout."""
        return cls.from_mask(Nq, Nkv, bq, bk, causal=align, window=window)

    @classmethod
    def random(cls, Nq: int, Nkv: int, bq: int, bk: int | None = None, *, density: float,
               seed: int = 0) -> BlockMask:
        """A uniformly random layout keeping ``max(1, round(density·Tq·Tk))`` blocks, density in
        (0, 1]; the same seed gives the same layout."""
        density = check_real("density", density, lo=0, hi=1, lo_open=True,
                             what="the fraction of kept blocks")
        Nq, Nkv = check_int("Nq", Nq), check_int("Nkv", Nkv)
        bq = check_int("block_mask.bq", bq)
        bk = bq if bk is None else check_int("block_mask.bk", bk)
        seed = check_int("seed", seed, minimum=0)
        Tq, Tk = _cdiv(Nq, bq), _cdiv(Nkv, bk)
        n = max(1, min(Tq * Tk, round(density * Tq * Tk)))
        flat = np.zeros(Tq * Tk, dtype=bool)
        flat[np.random.default_rng(seed).choice(Tq * Tk, size=n, replace=False)] = True
        return cls(flat.reshape(Tq, Tk), bq, bk)

    @classmethod
    def load(cls, path: str | os.PathLike[str], Nq: int, Nkv: int, bq: int | None = None,
             bk: int | None = None) -> BlockMask:
        """A layout saved with ``numpy.save`` (a boolean ``.npy`` array of Tq x Tk blocks) for
        ``Nq`` queries and ``Nkv`` keys; the block sizes default to ``ceil(Nq/Tq)`` and
        ``ceil(Nkv/Tk)``."""
        try:
            # memory-mapped: the header is checked before the bits are read
            a = np.load(path, allow_pickle=False, mmap_mode="r")
        except FileNotFoundError:
            raise ParameterError(f"block_mask file {os.fspath(path)!r} does not exist",
                                 param="block_mask") from None
        except (OSError, ValueError, EOFError) as e:
            msg = str(e).splitlines()[0] if str(e) else type(e).__name__
            raise ParameterError(f"block_mask file {os.fspath(path)!r} is not a .npy array "
                                 f"({msg[:80]})", param="block_mask") from None
        if not isinstance(a, np.ndarray):  # an .npz archive
            a.close()
            raise ParameterError(f"block_mask file {os.fspath(path)!r} is an .npz archive; save "
                                 "one boolean array with numpy.save", param="block_mask")
        if a.ndim != 2 or a.size == 0:
            raise ParameterError(f"block_mask must be a 2-D boolean array (query blocks x key "
                                 f"blocks), got an array of dimensions {a.shape}", param="block_mask")
        Nq, Nkv = check_int("Nq", Nq), check_int("Nkv", Nkv)
        if a.shape[0] > Nq or a.shape[1] > Nkv:
            raise ParameterError(f"block_mask has {a.shape[0]}x{a.shape[1]} blocks, more than "
                                 f"the Nq x Nkv = {Nq}x{Nkv} entries it masks",
                                 param="block_mask")
        bq = _cdiv(Nq, a.shape[0]) if bq is None else bq
        bk = _cdiv(Nkv, a.shape[1]) if bk is None else bk
        out = cls(a, bq, bk)
        out.check(Nq, Nkv)
        return out

    # ------------------------------------------------------------------ properties
    @property
    def Tq(self) -> int:
        """Query blocks."""
        return int(self.layout.shape[0])

    @property
    def Tk(self) -> int:
        """Key blocks."""
        return int(self.layout.shape[1])

    @property
    def kept(self) -> int:
        """Blocks kept (True in the layout)."""
        return int(self.layout.sum())

    @property
    def density(self) -> float:
        """The fraction of kept blocks, s in (0, 1]."""
        return self.kept / (self.Tq * self.Tk)

    @property
    def digest(self) -> str:
        """A short hex digest of the layout's bits and shape (with bq, bk: its identity)."""
        return self._digest

    def check(self, Nq: int, Nkv: int) -> None:
        """ParameterError unless the layout covers Nq queries and Nkv keys exactly."""
        tq, tk = _cdiv(Nq, self.bq), _cdiv(Nkv, self.bk)
        if (tq, tk) != (self.Tq, self.Tk):
            raise ParameterError(
                f"block_mask has {self.Tq}x{self.Tk} blocks of {self.bq}x{self.bk}, but Nq={Nq}, "
                f"Nkv={Nkv} need ceil(Nq/{self.bq}) x ceil(Nkv/{self.bk}) = {tq}x{tk} blocks",
                param="block_mask")

    def describe(self) -> str:
        """``block_mask=4x4/64x64 s=0.625``: blocks, block sizes and density."""
        return f"block_mask={self.Tq}x{self.Tk}/{self.bq}x{self.bk} s={self.density:.4g}"

    # ------------------------------------------------------------------ geometry
    def tiles(self, Nq: int, Nkv: int, Br: int, Bc: int) -> np.ndarray:
        """Boolean (ceil(Nq/Br), ceil(Nkv/Bc)) array: tile (i, j) of Br x Bc meets a kept block.

        A schedule that tiles the scores in Br x Bc tiles must visit exactly these tiles; when
        Br is a multiple of bq and Bc of bk (or equal), a tile is a union of whole blocks."""
        return _tiles(self, Nq, Nkv, Br, Bc)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, BlockMask):
            return NotImplemented
        return ((self.bq, self.bk, self.layout.shape, self._digest)
                == (other.bq, other.bk, other.layout.shape, other._digest)
                and bool(np.array_equal(self.layout, other.layout)))

    def __hash__(self) -> int:
        return self._hash

    def __repr__(self) -> str:
        return f"BlockMask({self.Tq}x{self.Tk} blocks of {self.bq}x{self.bk}, " \
               f"density {self.density:.4g}, digest {self._digest})"

    def __reduce__(self) -> tuple[Any, ...]:  # pickling (process pools) rebuilds and revalidates
        return (BlockMask, (np.array(self.layout), self.bq, self.bk))


@functools.lru_cache(maxsize=256)
def _tiles(bm: BlockMask, Nq: int, Nkv: int, Br: int, Bc: int) -> np.ndarray:
    bm.check(Nq, Nkv)
    S = np.zeros((bm.Tq + 1, bm.Tk + 1), dtype=np.int64)  # 2-D prefix sums of the layout
    S[1:, 1:] = np.cumsum(np.cumsum(bm.layout, axis=0, dtype=np.int64), axis=1)
    r0 = np.arange(0, Nq, Br)
    r1 = np.minimum(Nq, r0 + Br)
    c0 = np.arange(0, Nkv, Bc)
    c1 = np.minimum(Nkv, c0 + Bc)
    a, b = r0 // bm.bq, (r1 - 1) // bm.bq + 1  # layout rows [a, b) a query tile meets
    c, e = c0 // bm.bk, (c1 - 1) // bm.bk + 1
    kept = S[b][:, e] - S[a][:, e] - S[b][:, c] + S[a][:, c]
    out: np.ndarray = kept > 0
    out.setflags(write=False)
    return out


# ---------------------------------------------------------------------- a layout asked for

#: A layout of more blocks than this is refused before it is drawn: the closed forms work on
#: the layout (about 4x its size per candidate tiling), so a plan stays well under a second.
MAX_LAYOUT_BLOCKS = 1 << 20


def default_block_size(Nq: int, Nkv: int, d: int, M: int) -> int:
    """The block side of a random layout given no block size: the largest power of two
    <= max(1, M // (4d)), and at most max(Nq, Nkv) — flash2's tile side Br = Bc ≈ M/(4d), so its
    tiles hold whole blocks and the skipped fraction is the layout's — raised to the least power
    of two that keeps the layout within :data:`MAX_LAYOUT_BLOCKS` blocks.

    >>> default_block_size(4096, 4096, 64, 65536)
    256
    >>> default_block_size(65536, 65536, 64, 4096)  # 16 would make 4096 x 4096 blocks
    64
    """
    side = max(1, M // (4 * d))
    b = 1 << (side.bit_length() - 1)
    b = max(1, min(b, 1 << (max(Nq, Nkv) - 1).bit_length()))
    while -(-Nq // b) * -(-Nkv // b) > MAX_LAYOUT_BLOCKS:
        b *= 2
    return b


def _lit(text: object) -> str:
    """``text`` as literal text of a :meth:`ParameterError.worded` template."""
    return str(text).replace("{", "{{").replace("}", "}}")


@dataclass(frozen=True)
class LayoutRequest:
    """A block layout as asked for: a boolean ``.npy`` file (``path``: query blocks x key
    blocks, saved with ``numpy.save``) or a random layout keeping a fraction ``density`` in
    (0, 1] of the blocks, drawn with ``layout_seed`` (default 0); blocks of ``block_size``
    queries x keys (default: :func:`default_block_size` for a random layout, the file's rows for
    a file).  :meth:`block_mask` checks it against the workload and builds the layout.

    >>> LayoutRequest(density=0.5).block_mask(256, 256, d=16, M=1024).describe()
    'block_mask=16x16/16x16 s=0.5'
    >>> LayoutRequest(block_size=64).block_mask(256, 256, d=16, M=1024)
    Traceback (most recent call last):
    ...
    attnio.core.errors.ParameterError: block_size applies to a block layout: add density S or block_mask FILE.npy
    """

    path: str | os.PathLike[str] | None = None
    density: float | None = None
    block_size: int | None = None
    layout_seed: int | None = None

    def block_mask(self, Nq: int, Nkv: int, *, d: int, M: int,
                   masked: bool = False) -> BlockMask | None:
        """The layout for ``Nq`` queries and ``Nkv`` keys of head dimension ``d`` with ``M``
        words of fast memory (None: no layout asked for); ``masked``: the workload has a causal
        mask or a window already (refused beside a layout).

        Refused in one line naming the parameter, before anything large is allocated: a file
        and a density, a mask beside them, a density outside (0, 1], a block size < 1, a file
        that is not a 2-D boolean .npy array or does not cover the sizes, a layout of more than
        :data:`MAX_LAYOUT_BLOCKS` blocks."""
        path, density, bs, seed = self.path, self.density, self.block_size, self.layout_seed
        if path is None and density is None:
            for name, v in (("block_size", bs), ("layout_seed", seed)):
                if v is not None:
                    raise ParameterError.worded(
                        f"{{{name}}} applies to a block layout: add {{density}} S or "
                        "{block_mask} FILE.npy", param=name)
            return None
        if path is not None and density is not None:
            raise ParameterError.worded("give {block_mask} FILE.npy or {density} S, not both",
                                        param="block_mask")
        name = "block_mask" if path is not None else "density"
        if masked:
            raise ParameterError.worded(f"{{{name}}} cannot be combined with {{causal}}/"
                                        "{window}: the block layout is the mask", param=name)
        if density is not None:
            density = check_real("density", density, lo=0, hi=1, lo_open=True,
                                 what="the fraction of kept blocks")
        if bs is not None:
            bs = check_int("block_size", bs, minimum=1, maximum=max(Nq, Nkv))
        if seed is not None:
            if path is not None:
                raise ParameterError.worded("{layout_seed} applies to a {density} layout",
                                            param="layout_seed")
            seed = check_int("layout_seed", seed, minimum=0)
        if path is not None:
            check_input_file(path, "block_mask", required=False)  # a FIFO is never opened
            bm = BlockMask.load(path, Nq, Nkv, bs, bs)
            if bm.bq != bm.bk:  # blocks are square: the file's rows give the side
                need = -(-Nkv // bm.bq)
                raise ParameterError.worded(
                    "{block_mask} " + _lit(f"{path}: a {bm.Tq}x{bm.Tk} layout for Nq={Nq}, "
                                           f"Nkv={Nkv} has blocks of {bm.bq}x{bm.bk}; blocks are "
                                           f"square, so it needs {bm.Tq}x{need} blocks (or give ")
                    + "{block_size})", param="block_mask")
            if bm.Tq * bm.Tk > MAX_LAYOUT_BLOCKS:
                raise ParameterError.worded(
                    "{block_mask} " + _lit(f"{path}: a layout of {bm.Tq}x{bm.Tk} blocks is more "
                                           f"than {MAX_LAYOUT_BLOCKS:,}; use larger blocks"),
                    param="block_mask")
            return bm
        b = default_block_size(Nq, Nkv, d, M) if bs is None else bs
        blocks = -(-Nq // b) * -(-Nkv // b)
        if blocks > MAX_LAYOUT_BLOCKS:
            raise ParameterError.worded(
                "{density}" + _lit(f": a layout of {blocks:,} blocks of {b}x{b} is more than "
                                   f"{MAX_LAYOUT_BLOCKS:,}; raise ") + "{block_size}",
                param="block_size")
        assert density is not None
        return BlockMask.random(Nq, Nkv, b, b, density=density, seed=seed or 0)
