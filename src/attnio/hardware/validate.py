"""``attnio gpu validate``: the model against measured kernel times, one row at a time.

A measurements file has the columns of the calibration set (``shared/data/gpu-published/
train.csv``): ``device, kernel, pass, dtype, d, causal, N, batch, heads`` and ``tflops`` or
``time_s``; other columns, such as ``source``, are ignored.  Optional columns, for the rows a
kernel engineer has (:data:`OPTIONAL`):

* ``Nq``, ``Nkv``: queries and keys per head when they differ (decode: ``Nq = 1``); each
  defaults to ``N``, and ``N`` may be left empty when both are given;
* ``window``: a sliding window (keys per query; causal rows only);
* ``kv_heads``: K/V heads (GQA/MQA; divides ``heads``; default ``heads``);
* ``page_size``: the K/V page size of a paged cache, in tokens (forward rows of ``fa2`` and
  ``fa3``): the row is predicted with the config flash-attn runs on a paged cache (FA3's
  non-TMA tile where ``get_pagedkv_tma`` says so, FA2's split-KV kernel, which needs pages
  of a multiple of 256) and the HBM efficiency of paged K/V (docs/hardware.md, section 6);
  with ``config``, the given config reads paged K/V;
* ``config``: the kernel config the row ran, ``"Br=128,Bc=64,warps=4,stages=2"`` (quoted, or
  with ``;`` between items; the keys of ``attnio gpu score --config``); default: the config
  flash-attn ships for the row (:mod:`.kernels`).  A config row times one kernel: pass ``fwd``
  or ``bwd`` (``algorithm=fa2_bwd|fa3_bwd``, default from the kernel), not ``fwd+bwd``.

FLOPs are counted as flash-attn's benchmark counts them (:func:`~.predict.flash_flops`), so a
row's measured time is ``FLOPs / (tflops·10^12)`` when it gives TFLOPs.  Each row's output names
the config it was predicted with; errors are fractions of the measured time.

Bad input is refused before anything is predicted, in one line naming the file, the row and the
column (:class:`~attnio.core.errors.ParameterError`): a binary or non-UTF-8 file, a field over
:data:`MAX_FIELD` characters, a value out of range (``tflops`` in (0, 10^5], a time in
[10^-7, 10^6] s, so that no error is infinite).  A UTF-8 byte-order mark is accepted.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..core.errors import ParameterError, UnknownNameError
from ..core.workload import Shape
from . import devices as _devices
from .devices import Device
from .kernels import KernelConfig, parse_config
from .predict import KERNELS, PASSES, Row, flash_flops, prepare_row, row_time

__all__ = ["MAX_BYTES", "MAX_FIELD", "OPTIONAL", "REQUIRED", "Measurement", "load_rows",
           "prepare_rows", "validate"]

REQUIRED = ("device", "kernel", "pass", "dtype", "d", "causal", "N", "batch", "heads")
#: Optional columns (module docstring).
OPTIONAL = ("Nq", "Nkv", "window", "kv_heads", "page_size", "config")
_MAX_ROWS = 100_000
MAX_BYTES = 64 << 20
MAX_FIELD = 4096
_TFLOPS_MAX = 1e5
_TIME = (1e-7, 1e6)


@dataclass(frozen=True)
class Measurement:
    line: int
    device: str
    kernel: str
    pass_: str
    dtype: str
    shape: Shape
    time_s: float
    device_obj: Device | None = None
    config: KernelConfig | None = None
    page_size: int | None = None
    source: str = ""        # the file the row came from (for error messages)

    def describe(self) -> str:
        s = self.shape
        n = f"N={s.Nq}" if s.Nq == s.Nkv else f"Nq={s.Nq} Nkv={s.Nkv}"
        return (f"{self.device} {self.kernel} {self.pass_} {self.dtype} d={s.d} "
                f"{'causal' if s.causal else 'full'} {n} b={s.batch} h={s.heads}"
                + (f" kvh={s.kv_heads}" if s.kv_heads != s.heads else "")
                + (f" win={s.window}" if s.window else "")
                + (f" page={self.page_size}" if self.page_size else ""))


def _bad(path: Path, line: int, col: str, what: str) -> ParameterError:
    return ParameterError(f"{path}: row {line - 1} (line {line}), column {col!r}: {what}",
                          param="measurements")


def _int(path, line, col, text, lo, hi) -> int:
    try:
        v = int(str(text).strip())
    except ValueError:
        raise _bad(path, line, col, f"{_cut(text)!r} is not an integer") from None
    if not lo <= v <= hi:
        raise _bad(path, line, col, f"{v} outside [{lo}, {hi}]")
    return v


def _cut(text: Any) -> str:
    t = str(text)
    return t if len(t) <= 40 else t[:37] + "..."


def _opt(rec: Mapping[str, Any], col: str) -> str:
    return (rec.get(col) or "").strip()


def _device(path: Path, line: int, name: str, extra: Mapping[str, Device]) -> Device:
    if name in extra:
        return extra[name]
    try:
        return _devices.get(name).require_model()
    except (UnknownNameError, ParameterError):
        ok = ", ".join([*_devices.gpu_names(scorable=True), *extra])
        raise _bad(path, line, "device", f"unknown or unscorable device {_cut(name)!r} "
                   f"(scorable: {ok}; or describe it with --device-file)") from None


def _config(path, line, text, kernel, pass_, dtype, d) -> KernelConfig:
    if kernel == "standard" or kernel == "fa1":
        raise _bad(path, line, "config", f"kernel {kernel} has no tile config; leave config "
                   "empty (or give kernel fa2, fa3 or sdpa)")
    if pass_ == "fwd+bwd":
        raise _bad(path, line, "config", "a config times one kernel: give pass fwd or bwd")
    alg = {"fa3": "fa3"}.get(kernel, "fa2") + ("_bwd" if pass_ == "bwd" else "")
    try:
        cfg = parse_config(text.replace(";", ","), algorithm=alg, dtype=dtype).validate(d)
    except (ParameterError, TypeError) as e:
        raise _bad(path, line, "config", " ".join(str(e).split())) from None
    if cfg.dtype != dtype:
        raise _bad(path, line, "config", f"dtype={cfg.dtype} conflicts with the row's dtype "
                   f"{dtype}; give it once")
    if cfg.forward != (pass_ == "fwd"):
        raise _bad(path, line, "config", f"algorithm={cfg.algorithm} is a "
                   f"{'forward' if cfg.forward else 'backward'} kernel but pass is {pass_}")
    return cfg


def _parse(path: Path, line: int, rec: dict[str, Any], extra: Mapping[str, Device]
           ) -> Measurement:
    if rec.get(None):   # type: ignore[call-overload]
        raise _bad(path, line, "(extra)", f"{len(rec[None])} more field(s) than the header's "  # type: ignore[index]
                   "columns")
    for col, v in rec.items():
        if v is None and col in (*REQUIRED, "tflops", "time_s"):
            raise _bad(path, line, col, "missing (the row has fewer fields than the header)")
    dev_name = _opt(rec, "device")
    dev = _device(path, line, dev_name, extra)
    kernel = _opt(rec, "kernel")
    if kernel not in KERNELS:
        raise _bad(path, line, "kernel", f"unknown kernel {_cut(kernel)!r} (one of "
                   f"{', '.join(KERNELS)})")
    pass_ = _opt(rec, "pass")
    if pass_ not in PASSES:
        raise _bad(path, line, "pass", f"{_cut(pass_)!r} is not one of {', '.join(PASSES)}")
    try:
        dtype = _devices.dtype_name(_opt(rec, "dtype"))
    except ParameterError:
        raise _bad(path, line, "dtype", f"{_cut(rec.get('dtype'))!r} is not fp16, bf16 or fp8")             from None
    d = _int(path, line, "d", rec.get("d"), 1, 256)
    causal = _int(path, line, "causal", rec.get("causal"), 0, 1)
    N = _opt(rec, "N")
    if not N and not (_opt(rec, "Nq") and _opt(rec, "Nkv")):
        raise _bad(path, line, "N", "empty: give N, or both Nq and Nkv")
    Nq = _int(path, line, "Nq" if _opt(rec, "Nq") else "N", _opt(rec, "Nq") or N, 1, 1 << 20)
    Nkv = _int(path, line, "Nkv" if _opt(rec, "Nkv") else "N", _opt(rec, "Nkv") or N, 1,
               1 << 20)
    batch = _int(path, line, "batch", rec.get("batch"), 1, 1 << 16)
    heads = _int(path, line, "heads", rec.get("heads"), 1, 4096)
    kvh = _opt(rec, "kv_heads")
    kv_heads = heads if not kvh else _int(path, line, "kv_heads", kvh, 1, heads)
    if heads % kv_heads:
        raise _bad(path, line, "kv_heads", f"{kv_heads} does not divide heads={heads}")
    win = _opt(rec, "window")
    window = None if not win else _int(path, line, "window", win, 1, Nkv)
    if window is not None and not causal:
        raise _bad(path, line, "window", "a sliding window needs causal = 1")
    ps = _opt(rec, "page_size")
    page_size = None if not ps else _int(path, line, "page_size", ps, 1, 1 << 20)
    if batch * heads * max(Nq, Nkv) * d > 1 << 36:
        raise _bad(path, line, "N", f"batch x heads x N x d = {batch * heads * max(Nq, Nkv) * d:,}"
                   " is over 2^36 (the model replays every CTA)")
    try:
        shape = Shape(Nq, Nkv, d, causal=bool(causal), batch=batch, heads=heads,
                      kv_heads=kv_heads, window=window)
    except ParameterError as e:
        raise _bad(path, line, e.param or "N", " ".join(str(e).split())) from None
    cfg_text = _opt(rec, "config")
    cfg = None if not cfg_text else _config(path, line, cfg_text, kernel, pass_, dtype, d)
    if cfg is not None and page_size:
        if cfg.page_size and cfg.page_size != page_size:
            raise _bad(path, line, "config", f"page={cfg.page_size} conflicts with the row's "
                       f"page_size {page_size}; give it once")
        if not cfg.forward:
            raise _bad(path, line, "page_size", "a paged K/V cache is modelled for forward "
                       "kernels only (flash-attn's backward takes contiguous K/V)")
        cfg = dataclasses.replace(cfg, page_size=page_size)
    tf, ts = _opt(rec, "tflops"), _opt(rec, "time_s")
    if not tf and not ts:
        raise _bad(path, line, "tflops", "the row gives neither tflops nor time_s")
    col, text = ("time_s", ts) if ts else ("tflops", tf)
    try:
        v = float(text)
    except ValueError:
        raise _bad(path, line, col, f"{_cut(text)!r} is not a number") from None
    if col == "tflops" and not (0 < v <= _TFLOPS_MAX):
        raise _bad(path, line, col, f"{v:g} outside (0, {_TFLOPS_MAX:g}] TFLOP/s")
    t = v if col == "time_s" else flash_flops(shape, pass_) / (v * 1e12)
    if not (math.isfinite(t) and _TIME[0] <= t <= _TIME[1]):
        what = f"{v:g} s" if col == "time_s" else f"{v:g} TFLOP/s is {t:.3g} s"
        raise _bad(path, line, col, f"{what}: a kernel time must lie in "
                   f"[{_TIME[0]:g}, {_TIME[1]:g}] s")
    return Measurement(line, dev_name, kernel, pass_, dtype, shape, t, dev, cfg, page_size,
                       str(path))


def _text(p: Path) -> str:
    try:
        size = p.stat().st_size
        with p.open("rb") as fh:
            data = fh.read(MAX_BYTES + 1)
    except OSError as e:
        raise ParameterError(f"--measurements {p}: cannot be read ({e.strerror or e})",
                             param="measurements") from None
    if len(data) > MAX_BYTES or size > MAX_BYTES:
        raise ParameterError(f"{p}: larger than {MAX_BYTES:,} bytes: not a measurements file",
                             param="measurements")
    if b"\0" in data:
        nul = data.index(0)
        line = data.count(b"\n", 0, nul) + 1
        raise _bad(p, line, "(any)", f"a binary file (NUL byte at offset {nul}): not CSV text")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise _bad(p, line, "(any)", f"not UTF-8 text (byte {e.start}): not a CSV file") \
            from None


def load_rows(path: str | Path, *, devices: Iterable[Device] = ()) -> list[Measurement]:
    """The rows of a measurements file, checked (ParameterError names file, row and column).
    ``devices``: devices from device files that rows may name (by their ``name``)."""
    p = Path(path)
    if not p.is_file():
        what = "is a folder" if p.is_dir() else "no such file" if not p.exists() else \
            "not a regular file"
        raise ParameterError(f"--measurements {p}: {what}", param="measurements")
    extra = {d.name: d for d in devices}
    text = _text(p)
    out = []
    reader = csv.DictReader(io.StringIO(text, newline=""))
    limit = csv.field_size_limit(MAX_BYTES)   # long fields reach the check that names them
    try:
        cols = reader.fieldnames or []
        for c in cols:
            if c is not None and len(c) > MAX_FIELD:
                raise _bad(p, 1, _cut(c), f"a header field of {len(c):,} characters (at most "
                           f"{MAX_FIELD:,})")
        for c in REQUIRED:
            if c not in cols:
                raise ParameterError(f"{p}: row 0 (line 1, the header), column {c!r}: missing "
                                     f"(needed: {', '.join(REQUIRED)}, and tflops or time_s; "
                                     f"optional: {', '.join(OPTIONAL)})", param="measurements")
        if "tflops" not in cols and "time_s" not in cols:
            raise ParameterError(f"{p}: row 0 (line 1, the header), column 'tflops': missing, "
                                 "and no 'time_s' either", param="measurements")
        for i, rec in enumerate(reader):
            line = reader.line_num
            if i >= _MAX_ROWS:
                raise _bad(p, line, "device", f"more than {_MAX_ROWS:,} rows")
            for c, v in rec.items():
                if isinstance(v, str) and len(v) > MAX_FIELD:
                    raise _bad(p, line, str(c), f"a field of {len(v):,} characters (at most "
                               f"{MAX_FIELD:,})")
            out.append(_parse(p, line, rec, extra))
    except csv.Error as e:
        raise _bad(p, max(reader.line_num, 1), "(any)", f"not valid CSV ({e})") from None
    finally:
        csv.field_size_limit(limit)
    if not out:
        raise ParameterError(f"{p}: no rows after the header", param="measurements")
    return out


def _config_row(m: Measurement) -> Row:
    """A row that times the config it names (one kernel of one pass)."""
    from .model import prepared

    assert m.config is not None and m.device_obj is not None
    try:
        pr = prepared(m.device_obj, m.shape, m.config)
    except ParameterError as e:
        raise ParameterError(f"{m.source}: row {m.line - 1} (line {m.line}), column 'config': "
                             f"{' '.join(str(e).split())}", param="measurements") from None
    if pr is None:
        from .feasibility import check

        why = check(m.device_obj, m.config, m.shape).why
        raise ParameterError(f"{m.source}: row {m.line - 1} (line {m.line}), column 'config': "
                             f"{m.config.short()} is infeasible on {m.device}: {why}",
                             param="measurements")
    return Row(m.kernel, m.device_obj, m.dtype, [pr], [], [m.config])


def prepare_rows(rows: list[Measurement]) -> list[Row]:
    """Prepared predictions (shared between rows of the same kernel, pass, shape and config)."""
    cache: dict[tuple, Row] = {}
    out = []
    for m in rows:
        key = (m.device, m.kernel, m.pass_, m.dtype, m.shape, m.config, m.page_size)
        if key not in cache:
            if m.config is not None:
                cache[key] = _config_row(m)
            else:
                try:
                    cache[key] = prepare_row(m.device_obj or m.device, m.shape, m.kernel,
                                             m.pass_, m.dtype, m.page_size or 0)
                except ParameterError as e:
                    col = ("kernel" if e.param in ("kernel", "dtype", "device") else
                           "page_size" if e.param == "page_size" else "d")
                    raise ParameterError(f"{m.source}: row {m.line - 1} (line {m.line}), "
                                         f"column {col!r}: "
                                         f"{' '.join(str(e).split())}",
                                         param="measurements") from None
        out.append(cache[key])
    return out


def assumed(m: Measurement, row: Row) -> str:
    """The config a row was predicted with, in words (``attnio gpu validate``'s column)."""
    if row.standard:
        return "unfused (PyTorch: GEMM, softmax, GEMM)"
    text = " + ".join(c.short() for c in row.configs)
    text += " (given)" if m.config is not None else " (shipped)"
    return text


def validate(path: str | Path, *, devices: Iterable[Device] = ()) -> dict[str, Any]:
    """``{"rows": [...], "mean_abs_err", "median_abs_err", "max_abs_err"}`` (errors as
    fractions of the measured time; each row: its description, the config it was predicted
    with, measured and predicted seconds, the error).  ``devices``: devices from device files
    the rows may name."""
    rows = load_rows(path, devices=devices)
    prepped = prepare_rows(rows)
    preds = [row_time(r) for r in prepped]
    out: list[dict[str, Any]] = []
    errs = []
    for m, r, t in zip(rows, prepped, preds):
        if not (math.isfinite(t) and t > 0):
            raise ParameterError(f"{path}: row {m.line - 1} (line {m.line}): the model gave no "
                                 f"finite time ({t!r})", param="measurements")
        errs.append(t / m.time_s - 1.0)
        out.append({"line": m.line, "device": m.device, "kernel": m.kernel, "pass": m.pass_,
                    "dtype": m.dtype, "d": m.shape.d, "causal": m.shape.causal,
                    "N": m.shape.Nq if m.shape.Nq == m.shape.Nkv else None,
                    "Nq": m.shape.Nq, "Nkv": m.shape.Nkv, "window": m.shape.window,
                    "page_size": m.page_size,
                    "batch": m.shape.batch, "heads": m.shape.heads,
                    "kv_heads": m.shape.kv_heads, "config": assumed(m, r),
                    "configs": [c.as_dict() for c in r.configs],
                    "measured_s": m.time_s, "predicted_s": t, "error": t / m.time_s - 1.0})
    ae = np.abs(np.array(errs))
    return {"rows": out, "mean_abs_err": float(ae.mean()),
            "median_abs_err": float(np.median(ae)), "max_abs_err": float(ae.max())}
