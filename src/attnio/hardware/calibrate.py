"""Fit the time model's parameters to measurements: the published calibration set
(``benchmarks/calibrate_gpu.py``) or a user's own GPU (``attnio gpu calibrate``).

:func:`fit` is the fit itself: ``scipy.optimize.least_squares`` on the log of predicted over
measured time, each parameter inside its :data:`~.timing.BOUNDS` (scaled to [0, 1]).  Every row
is prepared once (traffic, L2 replay, per-CTA unit amounts do not depend on the parameters).
:func:`calibrate` reads a measurements file (:mod:`.validate`'s format), fits each architecture
generation its rows cover separately, starting from that generation's stored fit and fitting
only the parameters the rows constrain (:func:`sensitive`: the others keep their stored
values), and returns a table of the layout
of ``calibration.json`` with each fit's provenance; :func:`write` stores it (refusing an output
that is an input, a device, a FIFO or a folder; written whole through a temporary file), and
:func:`load` reads it back for ``--calibration`` (checked: the parameters and their bounds).

Needs scipy (``pip install 'attnio[calibrate]'``).
"""

from __future__ import annotations

import datetime
import hashlib
import json
import math
import os
import stat
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..core.errors import ParameterError
from . import devices as _devices
from .devices import Device
from .timing import BOUNDS, PARAMS, Params, generation, load_params
from .validate import load_rows, prepare_rows

__all__ = ["MAX_BYTES", "START", "calibrate", "calibrate_into", "check_out", "errors", "fit",
           "load", "sensitive", "write"]

#: Where the published fit starts (the benchmark script's starting point).
START = {"mma_sync_eff": 0.45, "wgmma_eff": 0.8, "hbm_eff": 0.85, "softmax_ops": 4.0,
         "fa2_exposed": 0.2, "fa3_exposed": 0.3, "cta_cycles": 2000.0, "launch_us": 3.0,
         "step_cycles": 100.0, "wgmma_n0": 8.0, "call_us": 10.0}

MAX_BYTES = 1 << 20


def fit(prepped, measured: np.ndarray, start: dict[str, float] | None = None,
        free: Sequence[str] | None = None):
    """(Params, scipy's result): the bounded least-squares fit of ``prepped`` rows
    (:func:`~.validate.prepare_rows`) to ``measured`` seconds, from ``start`` (default
    :data:`START`); ``free``: the parameters to fit (default all), the others stay at ``start``."""
    from ..core.extras import require

    least_squares = require("scipy.optimize", "calibrate",
                            "fitting the GPU model (gpu calibrate)").least_squares
    from .predict import row_time

    s = dict(START if start is None else start)
    names = list(PARAMS if free is None else free)
    lo = np.array([BOUNDS[k][0] for k in names])
    hi = np.array([BOUNDS[k][1] for k in names])
    scale = hi - lo

    def params(z) -> Params:
        return Params(**{**s, **{k: float(v) for k, v in zip(names, lo + z * scale)}})

    def resid(z):
        p = params(z)
        pred = np.array([row_time(r, p) for r in prepped])
        return np.log(pred / measured)

    z0 = np.clip(np.array([(s[k] - BOUNDS[k][0]) / (BOUNDS[k][1] - BOUNDS[k][0])
                           for k in names]), 0.0, 1.0)
    res = least_squares(resid, z0, bounds=(0.0, 1.0), diff_step=1e-3, x_scale=1.0)
    return params(res.x), res


def sensitive(prepped, start: dict[str, float], rel: float = 0.05) -> list[str]:
    """The parameters that change some row's predicted time when moved by ``rel`` of their
    range (the others the rows cannot constrain)."""
    from .predict import row_time

    base = np.array([row_time(r, Params(**start)) for r in prepped])
    out = []
    for k in PARAMS:
        lo, hi = BOUNDS[k][:2]
        v = start[k] + rel * (hi - lo) * (1 if start[k] + rel * (hi - lo) <= hi else -1)
        t = np.array([row_time(r, Params(**{**start, k: v})) for r in prepped])
        if np.max(np.abs(np.log(t / base))) > 1e-9:
            out.append(k)
    return out


def errors(prepped, measured: np.ndarray, p: Params) -> np.ndarray:
    """Predicted over measured time, minus one, per row."""
    from .predict import row_time

    pred = np.array([row_time(r, p) for r in prepped])
    return pred / measured - 1.0


def _summary(err: np.ndarray) -> dict[str, float]:
    ae = np.abs(err)
    return {"mean_abs_err": float(ae.mean()), "median_abs_err": float(np.median(ae)),
            "max_abs_err": float(ae.max())}


def calibrate(measurements: str | os.PathLike, *, devices: Iterable[Device] = ()
              ) -> dict[str, Any]:
    """Fit every generation the rows of ``measurements`` cover (``devices``: the devices of
    device files the rows may name).  Returns ``{"generations": {gen: {"params", "before",
    "provenance"}}, "bounds"}``; ``before``: the errors of the fit it started from."""
    from ..core.extras import require

    scipy = require("scipy", "calibrate", "fitting the GPU model (gpu calibrate)")
    path = Path(measurements)
    rows = load_rows(path, devices=devices)
    groups: dict[str, list[int]] = {}
    for i, m in enumerate(rows):
        assert m.device_obj is not None   # load_rows resolves every row's device
        groups.setdefault(generation(m.device_obj), []).append(i)
    sha = hashlib.sha256(path.read_bytes()).hexdigest()
    out: dict[str, Any] = {}
    for gen, idx in sorted(groups.items()):
        sub = [rows[i] for i in idx]
        prepped = prepare_rows(sub)
        measured = np.array([m.time_s for m in sub])
        import warnings

        from .fits import FitWarning

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FitWarning)   # the start: stored or borrowed fit
            p0 = load_params(gen)
        before = _summary(errors(prepped, measured, p0))
        free = sensitive(prepped, dict(vars(p0)))
        p, res = fit(prepped, measured, start=dict(vars(p0)), free=free)
        after = _summary(errors(prepped, measured, p))
        out[gen] = {
            "params": {k: round(float(getattr(p, k)), 6) for k in PARAMS},
            "before": before,
            "provenance": {
                "fitted_to": str(path), "sha256": sha, "rows": len(sub),
                "devices": sorted({m.device for m in sub}),
                "script": "attnio gpu calibrate (attnio.hardware.calibrate)",
                "method": "scipy.optimize.least_squares on log(predicted/measured time), "
                          "bounds of attnio.hardware.timing.BOUNDS, started from the stored "
                          f"fit of {gen} (or the one it borrows)",
                "fitted": free,
                "kept": [k for k in PARAMS if k not in free],
                "underdetermined": len(sub) < len(free),
                "scipy": scipy.__version__, "date": datetime.date.today().isoformat(),
                "evaluations": int(res.nfev), **after}}
    return {"generations": out, "bounds": {k: list(v[:3]) for k, v in BOUNDS.items()}}


# ---------------------------------------------------------------------- files
def _refuse(flag: str, path: str, why: str) -> ParameterError:
    return ParameterError(f"{flag} {path}: {why}; nothing was written", param=flag.lstrip("-"))


def check_out(path: str | os.PathLike, inputs: Sequence[str | os.PathLike],
              flag: str = "--out") -> None:
    """Refuse an output path that is one of ``inputs`` (or a link to one), a device, a FIFO, a
    socket or a folder, or whose folder is missing or read-only, before anything is written."""
    p = os.fspath(path)
    if not p:
        raise _refuse(flag, repr(p), "an empty path")
    if os.path.lexists(p):
        try:
            st = os.stat(p)
        except OSError:
            st = None          # a dangling link: replaced by the file
        if st is not None:
            if stat.S_ISDIR(st.st_mode):
                raise _refuse(flag, p, "is a folder; give a file name")
            if not stat.S_ISREG(st.st_mode):
                kind = ("a FIFO" if stat.S_ISFIFO(st.st_mode) else "a device"
                        if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode)
                        else "a socket" if stat.S_ISSOCK(st.st_mode) else "not a regular file")
                raise _refuse(flag, p, f"is {kind}; give a regular file")
            for q in inputs:
                try:
                    same = os.path.samefile(p, q)
                except OSError:
                    same = False
                if same:
                    link = " (a link to it)" if os.path.islink(p) else ""
                    raise _refuse(flag, p, f"is the input {os.fspath(q)}{link}; give another "
                                           "file")
    folder = os.path.dirname(os.path.abspath(p))
    if not os.path.isdir(folder) or not os.access(folder, os.W_OK):
        raise _refuse(flag, p, f"its folder {folder} does not exist or is not writable")


def write(table: dict[str, Any], path: str | os.PathLike,
          inputs: Sequence[str | os.PathLike] = (), flag: str = "--out") -> None:
    """Write ``table`` as JSON to ``path`` (checked by :func:`check_out`), whole: a temporary
    file in the same folder, renamed over ``path``."""
    check_out(path, inputs, flag)
    p = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(p))
    try:
        text = json.dumps(table, indent=1, sort_keys=True, allow_nan=False) + "\n"
    except ValueError as e:   # an infinite or NaN figure: never written
        raise _refuse(flag, p, f"the fit holds a non-finite number ({e})") from None
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(p)}.", suffix=".partial",
                               dir=folder)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, p)
    except OSError as e:
        raise _refuse(flag, p, f"cannot write it ({e.strerror or e})") from None
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def load(path: str | os.PathLike, flag: str = "--calibration") -> dict[str, Any]:
    """The generations of a calibration file (:func:`calibrate`'s output, or
    ``calibration.json``), checked: JSON, known generations, every parameter of
    :data:`~.timing.PARAMS` within its bounds."""
    p = os.fspath(path)
    param = flag.lstrip("-")

    def bad(what: str) -> ParameterError:
        return ParameterError(f"{flag} {p}: {what}", param=param)

    try:
        with open(p, "rb") as f:
            data = f.read(MAX_BYTES + 1)
    except FileNotFoundError:
        raise bad("no such file") from None
    except IsADirectoryError:
        raise bad("is a folder, not a calibration file") from None
    except OSError as e:
        raise bad(f"cannot be read ({e.strerror or e})") from None
    if len(data) > MAX_BYTES:
        raise bad(f"larger than {MAX_BYTES:,} bytes: not a calibration file")
    try:
        doc = json.loads(data.decode("utf-8-sig"),
                         parse_constant=lambda c: (_ for _ in ()).throw(ValueError(c)))
    except (UnicodeDecodeError, ValueError) as e:
        raise bad(f"not a calibration file (JSON written by `attnio gpu calibrate`): "
                  f"{' '.join(str(e).split())[:120]}") from None
    gens = doc.get("generations") if isinstance(doc, dict) else None
    if not isinstance(gens, dict) or not gens:
        raise bad("key 'generations': missing or empty (not a file `attnio gpu calibrate` "
                  "wrote)")
    out = {}
    for gen, entry in gens.items():
        if gen not in _devices.GENERATIONS:
            raise bad(f"key 'generations.{gen}': unknown generation (one of "
                      f"{', '.join(_devices.GENERATIONS)})")
        params = entry.get("params") if isinstance(entry, dict) else None
        if not isinstance(params, dict):
            raise bad(f"key 'generations.{gen}.params': missing")
        for k in PARAMS:
            lo, hi = BOUNDS[k][:2]
            v = params.get(k)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or \
                    not math.isfinite(v) or not lo <= v <= hi:
                raise bad(f"key 'generations.{gen}.params.{k}': must be a number in "
                          f"[{lo:g}, {hi:g}], got {v!r}")
        extra = sorted(set(params) - set(PARAMS))
        if extra:
            raise bad(f"key 'generations.{gen}.params.{extra[0]}': unknown parameter (the "
                      f"model's: {', '.join(PARAMS)}); refit with this version")
        out[gen] = {"params": {k: float(params[k]) for k in PARAMS},
                    "provenance": entry.get("provenance", {})}
    return out


def calibrate_into(measurements: str | os.PathLike, out: str | os.PathLike, *,
                   device_file: str | os.PathLike | None = None) -> dict[str, Any]:
    """:func:`calibrate` the rows of ``measurements`` (``device_file``: a GPU described in TOML
    that the rows may name) and :func:`write` the fit to ``out`` (``attnio gpu calibrate``);
    ``out`` is checked (:func:`check_out`: never an input) before the fit.  Returns the fit."""
    from .device_file import load as load_device

    inputs = [measurements] + ([device_file] if device_file else [])
    check_out(out, inputs)     # before the (slow) fit
    devices = [load_device(device_file)] if device_file else []
    table = calibrate(measurements, devices=devices)
    write(table, out, inputs)
    return table
