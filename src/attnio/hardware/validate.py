"""``attnio gpu validate``: the model against measured kernel times, one row at a time.

A measurements file has the columns of the calibration set (``shared/data/gpu-published/
train.csv``): ``device, kernel, pass, dtype, d, causal, N, batch, heads`` and ``tflops`` or
``time_s`` (other columns, such as ``source``, are ignored; ``kv_heads`` is optional).  FLOPs are
counted as flash-attn's benchmark counts them (:func:`~.predict.flash_flops`), so a row's
measured time is ``FLOPs / (tflops·10^12)`` when it gives TFLOPs.  Each row is predicted with
the kernel's shipped config (:mod:`.predict`); errors are fractions of the measured time.

Bad input is refused before anything is predicted, in one line naming the file, the row and the
column (:class:`~attnio.core.errors.ParameterError`).
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..core.errors import ParameterError, UnknownNameError
from ..core.workload import Shape
from . import devices as _devices
from .predict import KERNELS, PASSES, Row, flash_flops, prepare_row, row_time

__all__ = ["REQUIRED", "Measurement", "load_rows", "prepare_rows", "validate"]

REQUIRED = ("device", "kernel", "pass", "dtype", "d", "causal", "N", "batch", "heads")
_MAX_ROWS = 100_000


@dataclass(frozen=True)
class Measurement:
    line: int
    device: str
    kernel: str
    pass_: str
    dtype: str
    shape: Shape
    time_s: float

    def describe(self) -> str:
        s = self.shape
        return (f"{self.device} {self.kernel} {self.pass_} {self.dtype} d={s.d} "
                f"{'causal' if s.causal else 'full'} N={s.Nq} b={s.batch} h={s.heads}")


def _bad(path: Path, line: int, col: str, what: str) -> ParameterError:
    return ParameterError(f"{path}: row {line - 1} (line {line}), column {col!r}: {what}",
                          param="measurements")


def _int(path, line, col, text, lo, hi) -> int:
    try:
        v = int(str(text).strip())
    except ValueError:
        raise _bad(path, line, col, f"{text!r} is not an integer") from None
    if not lo <= v <= hi:
        raise _bad(path, line, col, f"{v} outside [{lo}, {hi}]")
    return v


def _parse(path: Path, line: int, rec: dict[str, str]) -> Measurement:
    dev = (rec.get("device") or "").strip()
    try:
        _devices.get(dev).require_model()
    except (UnknownNameError, ParameterError):
        ok = ", ".join(_devices.gpu_names(scorable=True))
        raise _bad(path, line, "device", f"unknown or unscorable device {dev!r} (scorable: "
                   f"{ok})") from None
    kernel = (rec.get("kernel") or "").strip()
    if kernel not in KERNELS:
        raise _bad(path, line, "kernel", f"unknown kernel {kernel!r} (one of "
                   f"{', '.join(KERNELS)})")
    pass_ = (rec.get("pass") or "").strip()
    if pass_ not in PASSES:
        raise _bad(path, line, "pass", f"{pass_!r} is not one of {', '.join(PASSES)}")
    try:
        dtype = _devices.dtype_name((rec.get("dtype") or "").strip())
    except ParameterError:
        raise _bad(path, line, "dtype", f"{rec.get('dtype')!r} is not fp16, bf16 or fp8") \
            from None
    d = _int(path, line, "d", rec.get("d"), 1, 256)
    causal = _int(path, line, "causal", rec.get("causal"), 0, 1)
    N = _int(path, line, "N", rec.get("N"), 1, 1 << 20)
    batch = _int(path, line, "batch", rec.get("batch"), 1, 1 << 16)
    heads = _int(path, line, "heads", rec.get("heads"), 1, 4096)
    kvh = rec.get("kv_heads")
    kv_heads = heads if not (kvh or "").strip() else _int(path, line, "kv_heads", kvh, 1, heads)
    if heads % kv_heads:
        raise _bad(path, line, "kv_heads", f"{kv_heads} does not divide heads={heads}")
    if batch * heads * N * d > 1 << 36:
        raise _bad(path, line, "N", f"batch x heads x N x d = {batch * heads * N * d:,} is "
                   "over 2^36 (the model replays every CTA)")
    shape = Shape(N, N, d, causal=bool(causal), batch=batch, heads=heads, kv_heads=kv_heads)
    tf, ts = (rec.get("tflops") or "").strip(), (rec.get("time_s") or "").strip()
    if not tf and not ts:
        raise _bad(path, line, "tflops", "the row gives neither tflops nor time_s")
    col, text = ("time_s", ts) if ts else ("tflops", tf)
    try:
        v = float(text)
    except ValueError:
        raise _bad(path, line, col, f"{text!r} is not a number") from None
    if not math.isfinite(v) or v <= 0:
        raise _bad(path, line, col, f"{v} must be a positive number")
    t = v if col == "time_s" else flash_flops(shape, pass_) / (v * 1e12)
    return Measurement(line, dev, kernel, pass_, dtype, shape, t)


def load_rows(path: str | Path) -> list[Measurement]:
    """The rows of a measurements file, checked (ParameterError names file, row and column)."""
    p = Path(path)
    if not p.is_file():
        raise ParameterError(f"--measurements {p}: no such file", param="measurements")
    out = []
    with p.open(newline="") as fh:
        reader = csv.DictReader(fh)
        cols = reader.fieldnames or []
        for c in REQUIRED:
            if c not in cols:
                raise ParameterError(f"{p}: row 0 (line 1, the header), column {c!r}: missing "
                                     f"(needed: {', '.join(REQUIRED)}, and tflops or time_s)",
                                     param="measurements")
        if "tflops" not in cols and "time_s" not in cols:
            raise ParameterError(f"{p}: row 0 (line 1, the header), column 'tflops': missing, "
                                 "and no 'time_s' either", param="measurements")
        for i, rec in enumerate(reader):
            if i >= _MAX_ROWS:
                raise _bad(p, i + 2, "device", f"more than {_MAX_ROWS:,} rows")
            out.append(_parse(p, i + 2, rec))
    if not out:
        raise ParameterError(f"{p}: no rows after the header", param="measurements")
    return out


def prepare_rows(rows: list[Measurement]) -> list[Row]:
    """Prepared predictions (shared between rows of the same kernel, pass and shape)."""
    cache: dict[tuple, Row] = {}
    out = []
    for m in rows:
        key = (m.device, m.kernel, m.pass_, m.dtype, m.shape)
        if key not in cache:
            cache[key] = prepare_row(m.device, m.shape, m.kernel, m.pass_, m.dtype)
        out.append(cache[key])
    return out


def validate(path: str | Path) -> dict[str, Any]:
    """``{"rows": [...], "mean_abs_err", "median_abs_err", "max_abs_err"}`` (errors as
    fractions of the measured time; each row: its description, measured and predicted
    seconds, the error)."""
    rows = load_rows(path)
    preds = [row_time(r) for r in prepare_rows(rows)]
    out: list[dict[str, Any]] = []
    errs = []
    for m, t in zip(rows, preds):
        errs.append(t / m.time_s - 1.0)
        out.append({"line": m.line, "device": m.device, "kernel": m.kernel, "pass": m.pass_,
                    "dtype": m.dtype, "d": m.shape.d, "causal": m.shape.causal, "N": m.shape.Nq,
                    "batch": m.shape.batch, "heads": m.shape.heads,
                    "kv_heads": m.shape.kv_heads, "measured_s": m.time_s, "predicted_s": t,
                    "error": t / m.time_s - 1.0})
    ae = np.abs(np.array(errs))
    return {"rows": out, "mean_abs_err": float(ae.mean()),
            "median_abs_err": float(np.median(ae)), "max_abs_err": float(ae.max())}
