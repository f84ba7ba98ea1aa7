"""``attnio.run``: run a registered algorithm on the simulated two-level memory.

>>> import numpy as np, attnio
>>> rng = np.random.default_rng(0)
>>> Q, K, V = (rng.standard_normal((100, 8)) for _ in range(3))
>>> r = attnio.run("flash2", Q, K, V, M=512)
>>> bool(np.abs(r.output - attnio.reference.attention(Q, K, V)).max() < 1e-12)
True
>>> c = attnio.run("flash2", shape=(100, 8), M=512, mode="count")
>>> (c.io.reads, c.io.writes) == (r.io.reads, r.io.writes)
True
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from . import algorithms as _alg
from .algorithms.base import Shape, default_scale
from .errors import ParameterError, check_int
from .memory import IOStats, TwoLevelMemory

__all__ = ["Result", "check_inputs", "run"]


@dataclass(frozen=True)
class Result:
    """What a run returns: the output (None in count mode), the counts and the tiling used."""

    algorithm: str
    shape: Shape
    M: int
    causal: bool
    tiling: Any
    io: IOStats
    output: np.ndarray | None = None
    mode: str = "compute"


def _as_matrix(name: str, x: Any) -> np.ndarray:
    a = np.asarray(x)
    if a.ndim != 2:
        raise ParameterError(f"{name} must be a 2-D array (N, d), got {a.ndim}-D with shape {a.shape}")
    if not np.issubdtype(a.dtype, np.floating):
        raise ParameterError(f"{name} must have a floating dtype (float16/32/64), got {a.dtype}")
    if a.shape[0] < 1 or a.shape[1] < 1:
        raise ParameterError(f"{name} must have N >= 1 rows and d >= 1 columns, got shape {a.shape}")
    bad = ~np.isfinite(a)
    if bad.any():
        pos = tuple(int(i) for i in np.argwhere(bad)[0])
        raise ParameterError(f"{name} has a non-finite entry {a[pos]} at index {pos}; entries must be finite")
    return a


def check_inputs(Q, K, V) -> tuple[np.ndarray, np.ndarray, np.ndarray, Shape]:
    """Validate Q (Nq x d), K and V (Nkv x d); return them and their Shape."""
    Q, K, V = _as_matrix("Q", Q), _as_matrix("K", K), _as_matrix("V", V)
    if K.shape != V.shape:
        raise ParameterError(f"K and V must have the same shape, got K {K.shape} and V {V.shape}")
    if Q.shape[1] != K.shape[1]:
        raise ParameterError(
            f"Q and K must have the same head dimension d, got Q {Q.shape} and K {K.shape}"
        )
    return Q, K, V, Shape(Q.shape[0], K.shape[0], Q.shape[1])


def run(
    name: str,
    Q=None,
    K=None,
    V=None,
    *,
    M: int,
    shape=None,
    mode: str | None = None,
    causal: bool = False,
    scale: float | None = None,
    tiling: Any = None,
    bulk: bool = True,
) -> Result:
    """Run algorithm ``name`` with a fast memory of ``M`` words.

    Either pass ``Q, K, V`` (compute mode: the output is returned) or ``shape=(N, d)`` /
    ``(Nq, Nkv, d)`` / :class:`Shape` with ``mode="count"`` (shapes only, same counts).
    ``tiling`` is the algorithm's Tiling (or a mapping of its fields); None picks the default.
    """
    alg = _alg.get(name)
    M = check_int("M", M, minimum=1)
    if not isinstance(causal, bool):
        raise ParameterError(f"causal must be True or False, got {causal!r}")
    if Q is None and K is None and V is None:
        if shape is None:
            raise ParameterError("give Q, K, V (compute mode) or shape=(N, d) with mode='count'")
        mode = mode or "count"
        if mode != "count":
            raise ParameterError(f"mode={mode!r} needs Q, K, V; without data only mode='count' runs")
        shp = Shape.coerce(shape)
        data = None
    else:
        if Q is None or K is None or V is None:
            raise ParameterError("give all three of Q, K, V (or none, with shape= and mode='count')")
        Qa, Ka, Va, shp = check_inputs(Q, K, V)
        if shape is not None and Shape.coerce(shape) != shp:
            raise ParameterError(f"shape={shape!r} does not match the inputs' shape {shp}")
        mode = mode or "compute"
        if mode not in ("compute", "count"):
            raise ParameterError(f"mode must be 'compute' or 'count', got {mode!r}")
        data = (Qa, Ka, Va)
    s = default_scale(shp.d, scale)
    t = alg.coerce_tiling(shp, M, tiling, causal, inputs=data)
    mem, out_handle = _execute(alg, shp, M, t, causal, s, mode, data, bulk)
    output = mem._peek(out_handle) if mode == "compute" else None
    return Result(alg.name, shp, M, causal, t, mem.stats(), output, mode)


def _execute(alg, shp: Shape, M: int, tiling, causal: bool, scale: float, mode: str, data, bulk):
    dtype = np.float64
    if data is not None:
        dtype = np.result_type(np.float32, *(a.dtype for a in data))
    mem = TwoLevelMemory(M, mode=mode, bulk=bulk, dtype=dtype)
    if data is not None and mode == "compute":
        Qh = mem.slow("Q", data[0].shape, data[0])
        Kh = mem.slow("K", data[1].shape, data[1])
        Vh = mem.slow("V", data[2].shape, data[2])
    else:
        Qh = mem.slow("Q", (shp.Nq, shp.d))
        Kh = mem.slow("K", (shp.Nkv, shp.d))
        Vh = mem.slow("V", (shp.Nkv, shp.d))
    Oh = mem.slow("O", (shp.Nq, shp.d))
    alg.schedule(mem, Qh, Kh, Vh, Oh, shape=shp, tiling=tiling, causal=causal, scale=scale)
    return mem, Oh
