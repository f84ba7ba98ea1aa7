"""Where a run's data comes from, checked before it is allocated, and its check against the
float64 reference.

A compute-mode run takes its inputs as arrays (``Q, K, V``), as an ``.npz`` file
(:class:`NpzInputs`: its array headers give the sizes and dtypes before anything is read) or
drawn at random (:class:`RandomInputs`, after the run's estimate has been accepted).  Errors name
the argument, or the file and the array in it.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ..core import reference
from ..core.errors import ParameterError
from ..core.workload import Shape

if TYPE_CHECKING:  # (zipfile, with pathlib and urllib, loads on first use: not at import attnio)
    import zipfile

__all__ = ["NpzInputs", "RandomInputs", "as_array", "check_inputs", "check_logits",
           "reference_errors"]

Arrays = tuple[np.ndarray, np.ndarray, np.ndarray]


# ---------------------------------------------------------------------- arrays
def _to_numpy(x: Any) -> np.ndarray:
    """numpy arrays pass; torch tensors are converted (bfloat16 upcast exactly to float32)."""
    if type(x).__module__.startswith("torch"):
        import torch

        if getattr(x, "is_meta", False):
            raise ValueError("a tensor on the meta device has no data")
        t = x.detach().cpu()
        if t.dtype == torch.bfloat16:
            t = t.to(torch.float32)
        return t.numpy()
    return np.asarray(x)


def as_array(name: str, x: Any, allow_nonfinite: bool = False) -> np.ndarray:
    """``x`` as a 2-D (N, d) or 4-D (batch, heads, N, d) floating array with finite entries."""
    try:
        a = _to_numpy(x)
    except (ValueError, TypeError, RuntimeError) as e:
        raise ParameterError(f"{name} must be an array of numbers (N, d), got {type(x).__name__}: "
                             f"{str(e).splitlines()[0]}", param=name) from None
    if a.ndim not in (2, 4):
        raise ParameterError(
            f"{name} must be 2-D (N, d) or 4-D (batch, heads, N, d), got {a.ndim}-D with shape "
            f"{a.shape}", param=name)
    if not np.issubdtype(a.dtype, np.floating):
        raise ParameterError(
            f"{name} must have a floating dtype (float16, bfloat16, float32 or float64), got "
            f"{a.dtype}", param=name)
    if a.shape[-1] == 0:
        raise ParameterError(f"{name} must have head dimension d >= 1, got shape {a.shape}",
                             param=name)
    if a.size == 0:
        raise ParameterError(f"{name} must have every dimension >= 1 (N >= 1), got shape {a.shape}",
                             param=name)
    if not allow_nonfinite:
        bad = ~np.isfinite(a)
        if bad.any():
            pos = tuple(int(i) for i in np.argwhere(bad)[0])
            raise ParameterError.worded(
                f"{name} has a non-finite entry {a[pos]} at index {pos}; entries must be finite "
                "({allow_nonfinite} propagates them as the reference does)", param=name,
                allow_nonfinite="allow_nonfinite=True")
    return a


def _shape_of(q: tuple[int, ...], kv: tuple[int, ...], v: tuple[int, ...],
              where: str = "") -> Shape:
    """The Shape that arrays of these shapes give (K and V alike, one head dimension)."""
    if kv != v:
        raise ParameterError(f"{where}K and V must have the same shape, got K {kv} and V {v}",
                             param="V")
    if len(q) != len(kv):
        raise ParameterError(f"{where}Q and K must both be 2-D or both 4-D, got Q {q} and K {kv}",
                             param="K")
    if q[-1] != kv[-1]:
        raise ParameterError(f"{where}Q and K must have the same head dimension d, got Q {q} and "
                             f"K {kv}", param="K")
    if len(q) == 2:
        return Shape(q[0], kv[0], q[1])
    if q[0] != kv[0]:
        raise ParameterError(f"{where}Q and K must have the same batch size, got Q {q} and K {kv}",
                             param="K")
    return Shape(q[2], kv[2], q[3], batch=q[0], heads=q[1], kv_heads=kv[1])


def check_inputs(Q: Any, K: Any, V: Any, allow_nonfinite: bool = False
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray, Shape]:
    """Validate Q (Nq x d or B x H x Nq x d), K and V; return them and their Shape."""
    Q, K, V = (as_array(n, x, allow_nonfinite) for n, x in (("Q", Q), ("K", K), ("V", V)))
    return Q, K, V, _shape_of(Q.shape, K.shape, V.shape)


def check_logits(data: tuple[np.ndarray, ...], scale: float, dtype: Any) -> None:
    """Refuse inputs whose logits ``scale · q·k`` could overflow the accumulation dtype.

    |q·k| <= ||q||·||k|| bounds every logit; the online softmax subtracts two of them, so the
    bound must stay below an eighth of the dtype's largest value.
    """
    def largest_norm(x: np.ndarray) -> float:  # over rows without a NaN/inf (allow_nonfinite)
        rows = x[np.isfinite(x).all(axis=-1)]
        if rows.size == 0:
            return 0.0
        with np.errstate(over="ignore", invalid="ignore"):
            return float(np.sqrt(np.max(np.sum(np.square(rows, dtype=np.float64), axis=-1))))

    with np.errstate(over="ignore", invalid="ignore"):
        bound = abs(scale) * largest_norm(data[0]) * largest_norm(data[1])
    top = float(np.finfo(np.dtype(dtype)).max) / 8
    if not bound <= top:  # also catches inf and NaN
        raise ParameterError(
            f"scale={scale:g} makes the logits overflow {np.dtype(dtype)}: |scale|·max|q|·max|k| "
            f"= {bound:.3g} > {top:.3g}; use a smaller scale or smaller inputs", param="scale")


# ---------------------------------------------------------------------- drawn at random
@dataclass(frozen=True)
class RandomInputs:
    """Inputs the run draws itself once its estimate is accepted: Q, K, V (and dO for a backward
    pass) standard normal from ``numpy.random.default_rng(seed)``; for an approximate algorithm
    Q and K uniform in [-B, B] with B = ``entry_bound`` (default 1), inside its precondition.
    One head: (N, d) matrices; several: (batch, heads, N, d) and (batch, kv_heads, Nkv, d)."""

    seed: int | Sequence[int] = 0
    entry_bound: float | None = None

    def __post_init__(self) -> None:
        from ..core.checks import check_int, check_real

        seeds = self.seed if isinstance(self.seed, Sequence) else (self.seed,)
        for s in seeds:
            check_int("seed", s, minimum=0)
        if self.entry_bound is not None:
            object.__setattr__(self, "entry_bound", check_real(
                "entry_bound", self.entry_bound, lo=0, lo_open=True))

    def draw(self, shape: Shape, exact: bool, backward: bool
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
        rng = np.random.default_rng(self.seed)
        four = shape.n_heads > 1
        qs = (shape.batch, shape.heads, shape.Nq, shape.d) if four else (shape.Nq, shape.d)
        ks = (shape.batch, shape.n_kv_heads // shape.batch, shape.Nkv, shape.d) if four else \
            (shape.Nkv, shape.d)
        Q, K, V = rng.standard_normal(qs), rng.standard_normal(ks), rng.standard_normal(ks)
        if not exact:
            eb = 1.0 if self.entry_bound is None else self.entry_bound
            Q, K = rng.uniform(-eb, eb, qs), rng.uniform(-eb, eb, ks)
        dO = rng.standard_normal(qs) if backward else None
        return Q, K, V, dO


# ---------------------------------------------------------------------- an .npz file
_KEYS = ("Q", "K", "V", "dO")
#: Arrays of an --inputs file: Q, K, V and, for a backward pass, dO (the gradient of O).
ARRAY_NAMES = {"Q": "Q", "K": "K", "V": "V", "dO": "grad_output"}


@dataclass(frozen=True)
class NpzInputs:
    """Q, K, V (and ``dO`` for a backward pass) from an ``.npz`` file (``np.savez(FILE, Q=Q,
    K=K, V=V)``).  :meth:`header` reads the arrays' shapes and dtypes from their headers (a
    regular file is required: ``/dev/zero`` is refused before a byte of data is read), so the run
    is estimated before :meth:`load` allocates anything."""

    path: str

    def _error(self, what: str) -> ParameterError:
        return ParameterError(f"inputs file {self.path}: {what}", param="inputs")

    def header(self, need_grad: bool) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
        import zipfile

        want = _KEYS if need_grad else _KEYS[:3]
        try:
            st = os.stat(self.path)
            if not stat.S_ISREG(st.st_mode):
                raise self._error("not a regular file (a device, folder or pipe); save the arrays "
                                  "with np.savez(FILE, Q=Q, K=K, V=V)")
            with open(self.path, "rb") as f:
                magic = f.read(6)
            if magic == b"\x93NUMPY":
                raise self._error("a single .npy array; save Q, K and V together: "
                                  "np.savez(FILE, Q=Q, K=K, V=V)")
            with zipfile.ZipFile(self.path) as z:
                members = {n[:-4]: n for n in z.namelist() if n.endswith(".npy")}
                missing = [k for k in want if k not in members]
                if missing:
                    raise self._error(f"missing array(s) {missing}; it holds {sorted(members)}")
                return {k: self._array_header(z, members[k], k) for k in want}
        except ParameterError:
            raise
        except (zipfile.BadZipFile, EOFError) as e:
            raise self._error(f"not an .npz file ({e or 'empty file'}); write one with "
                              "np.savez(FILE, Q=Q, K=K, V=V)") from None
        except OSError as e:
            raise self._error(f"cannot read it ({e.strerror or e})") from None

    def _array_header(self, z: zipfile.ZipFile, member: str, key: str
                      ) -> tuple[tuple[int, ...], np.dtype]:
        import zipfile

        try:
            with z.open(member) as f:
                version = np.lib.format.read_magic(f)
                read = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                        else np.lib.format.read_array_header_2_0)
                shape, _, dtype = read(f)
        except (ValueError, EOFError, zipfile.BadZipFile) as e:
            raise self._error(f"array {key} cannot be read ({e})") from None
        return tuple(int(s) for s in shape), np.dtype(dtype)

    def shape(self, header: dict[str, tuple[tuple[int, ...], np.dtype]]) -> Shape:
        """The sizes the file's arrays give (each array checked: floating, 2-D or 4-D, alike)."""
        for k, (shp, dt) in header.items():
            if len(shp) not in (2, 4) or 0 in shp:
                raise self._error(f"array {k} has shape {shp}; it must be (N, d) or (batch, "
                                  "heads, N, d) with every size >= 1")
            if not np.issubdtype(dt, np.floating):
                raise self._error(f"array {k} has dtype {dt}; it must be floating (float16, "
                                  "float32 or float64)")
        try:
            shape = _shape_of(header["Q"][0], header["K"][0], header["V"][0])
        except ParameterError as e:
            raise self._error(str(e)) from None
        if "dO" in header and header["dO"][0] != header["Q"][0]:
            raise self._error(f"array dO has shape {header['dO'][0]}; it must have Q's shape "
                              f"{header['Q'][0]}")
        return shape

    def load(self, need_grad: bool) -> tuple[Any, Any, Any, Any]:
        import zipfile

        try:
            with np.load(self.path, allow_pickle=False) as f:
                return f["Q"], f["K"], f["V"], (f["dO"] if need_grad else None)
        except (OSError, ValueError, EOFError, zipfile.BadZipFile) as e:
            raise self._error(f"cannot read it ({e})") from None

    def checked(self, err: ParameterError) -> ParameterError:
        """An error about an array of this file, naming the file and the array."""
        name = {v: k for k, v in ARRAY_NAMES.items()}.get(err.param or "", err.param)
        return err.prefixed(f"inputs file {self.path}: array {name}: ", param="inputs")


# ---------------------------------------------------------------------- the reference
def reference_errors(Q: Any, K: Any, V: Any, dO: Any, out: np.ndarray,
                     grads: dict[str, np.ndarray] | None, shape: Shape, scale: float | None
                     ) -> tuple[float, float | None]:
    """(max |O - reference|, max |grad - reference| or None) against the float64 reference;
    NaN where the outputs are non-finite wherever the reference is (allow_nonfinite)."""
    causal, window, bm = shape.mask, shape.window, shape.block_mask
    ref = reference.attention(Q, K, V, causal=causal, scale=scale, window=window, block_mask=bm)
    with np.errstate(invalid="ignore"):
        diff = np.abs(out - ref)
    err = float(np.nanmax(diff)) if np.isfinite(diff).any() else float("nan")
    if grads is None:
        return err, None
    refg = reference.attention_backward(Q, K, V, dO, causal=causal, scale=scale, window=window,
                                        block_mask=bm)
    return err, max(float(np.abs(grads[k] - g).max()) for k, g in zip(("dQ", "dK", "dV"), refg))
