"""Named sweeps and grids from TOML: :data:`PRESETS`, :func:`grids_from_toml`,
:func:`grid_from_mapping`.

A TOML file holds one grid as top-level keys and/or several as ``[[grid]]`` tables, with the keys
``N Nq Nkv d M algo causal mode seed eps entry_bound batch heads kv_heads window verify
backward`` (values as on the command line, or TOML lists).  Tables are how a sweep combines
settings that a product of flags would not mean (unmasked attention without a window beside
causal attention with windows): ``attnio sweep --help`` shows an example, and a test parses it.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from typing import Any

from ..core.checks import check_real
from ..core.errors import ParameterError
from ..core.paths import kind_of
from .grid import Grid, parse_eps
from .values import parse_causal, parse_values, parse_window

try:  # Python 3.11+
    import tomllib  # novermin (guarded: the tomli backport below on 3.10)
except ModuleNotFoundError:  # pragma: no cover - Python 3.10: the tomli backport
    import tomli as tomllib

__all__ = ["MAX_CONFIG_BYTES", "PRESETS", "grid_from_mapping", "grids_from_toml", "override_grid"]

#: A grid file larger than this is refused before it is parsed (``--config /dev/zero``).
MAX_CONFIG_BYTES = 1 << 20


def _g(**kw) -> Grid:
    conv = {"N": "N", "d": "d", "M": "M", "Nq": "Nq", "Nkv": "Nkv", "batch": "batch",
            "heads": "heads", "kv_heads": "kv_heads"}
    for k in conv:
        if k in kw:
            kw[k] = parse_values(k, kw[k])
    if "causal" in kw:
        kw["causal"] = parse_causal(kw["causal"])
    if "window" in kw:
        kw["window"] = parse_window(kw["window"])
    if "algorithms" in kw:
        kw["algorithms"] = tuple(kw["algorithms"].split(","))
    return Grid(**kw)


#: Named sweeps.  ``paper`` is the default reproduction sweep of the seed papers (count mode):
#: N-scaling at fixed d, M (both masks); M-scaling across the M = d^2 crossover for three head
#: dimensions; approximate attention on a small head dimension when an approximate algorithm is
#: registered.  ``smoke`` is a seconds-long subset for trying the pipeline.
PRESETS: dict[str, list[Grid]] = {
    "paper": [
        _g(N="1024:65536:x2", d="64", M="4096,16384", causal="false"),
        _g(N="1024:16384:x2", d="64", M="4096", causal="true"),
        _g(N="16384", d="32,64,128", M="64:1048576:x2", causal="false"),
        _g(N="1024:65536:x2", d="8", M="65536,262144", eps=1e-2, causal="false"),
        _g(N="256:1024:x2", d="8", M="65536,262144", eps=(1e-1, 1e-2, 1e-3), causal="false",
           mode="compute", algorithms="approx_poly,flash2"),
    ],
    "smoke": [
        _g(N="256:2048:x2", d="16", M="1024", causal="both"),
        _g(N="1024", d="16", M="64:16384:x2", causal="false"),
    ],
}


def grids_from_toml(path: str | os.PathLike) -> list[Grid]:
    """Grids from a TOML file: top-level keys (one grid) and/or ``[[grid]]`` tables, keys
    ``N Nq Nkv d M algo causal mode seed eps entry_bound batch heads kv_heads window verify
    backward`` (values as on the command line or TOML lists).  Every problem with the file (missing,
    unreadable, larger than :data:`MAX_CONFIG_BYTES`, not UTF-8, not TOML, a bad key or value) is
    one ParameterError naming ``config`` and the file."""
    where = f"config {os.fspath(path)!r}"
    try:
        mode = os.stat(path).st_mode
    except OSError:
        mode = None  # missing or unreadable: open() below says which
    if mode is not None and not stat.S_ISREG(mode):  # a named pipe would block the read
        raise ParameterError(f"{where} is {kind_of(mode)}, not a regular file: not a grid file",
                             param="config")
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_CONFIG_BYTES + 1)  # bounded: a device or a huge file is refused
    except FileNotFoundError:
        raise ParameterError(f"config: no such file {os.fspath(path)!r}", param="config") from None
    except OSError as e:
        raise ParameterError(f"{where}: cannot be read ({e.strerror or e})",
                             param="config") from None
    if len(data) > MAX_CONFIG_BYTES:
        raise ParameterError(f"{where}: larger than {MAX_CONFIG_BYTES:,} bytes: not a grid file",
                             param="config")
    try:
        doc = tomllib.loads(data.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise ParameterError(f"{where}: not UTF-8 text (byte {e.start}): not a grid file",
                             param="config") from None
    except tomllib.TOMLDecodeError as e:
        raise ParameterError(f"{where}: is not valid TOML ({e})", param="config") from None
    except RecursionError:  # arrays or tables nested thousands deep
        raise ParameterError(f"{where}: nested too deeply: not a grid file",
                             param="config") from None
    tables = doc.pop("grid", [])
    if not isinstance(tables, list) or not all(isinstance(t, dict) for t in tables):
        raise ParameterError(f"{where}: grid must be [[grid]] tables of keys, got "
                             f"{_short(tables)}", param="config")
    if doc:
        tables.insert(0, doc)
    out = []
    for t in tables:
        try:
            out.append(grid_from_mapping(t, where=where))
        except ParameterError as e:  # a key's own error: name the file too
            if str(e).startswith(where):
                raise
            raise ParameterError(f"{where}: {e}", param=e.param) from None
    return out


def _short(v: Any) -> str:
    r = repr(v)
    return r if len(r) <= 60 else r[:57] + "..."


_GRID_KEYS = {"N", "Nq", "Nkv", "d", "M", "algo", "algorithms", "causal", "mode", "seed", "eps",
              "entry_bound", "batch", "heads", "kv_heads", "window", "verify", "backward"}


def grid_from_mapping(t: Mapping[str, Any], *, where: str = "grid") -> Grid:
    unknown = set(t) - _GRID_KEYS
    if unknown:
        raise ParameterError(f"{where}: unknown key(s) {sorted(map(str, unknown))}; known: "
                             f"{sorted(_GRID_KEYS)}", param="config")
    kw: dict[str, Any] = {}
    for k in ("N", "Nq", "Nkv", "d", "M", "batch", "heads", "kv_heads"):
        if k in t:
            kw[k] = parse_values(k, t[k])
    if "window" in t:
        kw["window"] = parse_window(t["window"])
    if "verify" in t:
        if not isinstance(t["verify"], bool):
            raise ParameterError(f"{where}: verify must be true or false, got {t['verify']!r}")
        kw["verify"] = t["verify"]
    if "backward" in t:
        if not isinstance(t["backward"], bool):
            raise ParameterError(f"{where}: backward must be true or false, got "
                                 f"{t['backward']!r}")
        kw["backward"] = t["backward"]
    algo = t.get("algo", t.get("algorithms", "all"))
    if isinstance(algo, str):
        kw["algorithms"] = tuple(algo.split(","))
    elif isinstance(algo, (list, tuple)) and all(isinstance(a, str) for a in algo):
        kw["algorithms"] = tuple(algo)
    else:
        raise ParameterError(f"{where}: algo must be a name, a comma list or a list of names, "
                             f"got {algo!r}", param="algo")
    if "causal" in t:
        kw["causal"] = parse_causal(t["causal"])
    if "mode" in t:
        if t["mode"] not in ("count", "compute"):
            raise ParameterError(f"{where}: mode must be 'count' or 'compute', got "
                                 f"{t['mode']!r}", param="mode")
        kw["mode"] = t["mode"]
    if "seed" in t:
        seed = t["seed"]
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise ParameterError(f"{where}: seed must be an integer, got {seed!r}", param="seed")
        kw["seed"] = seed
    if "eps" in t:  # a number, a list of numbers or a comma list
        vals = parse_eps(t["eps"])
        kw["eps"] = vals[0] if len(vals) == 1 else vals
    if "entry_bound" in t:
        kw["entry_bound"] = check_real("entry_bound", t["entry_bound"], lo=0, lo_open=True)
    return Grid(**kw)



def override_grid(grid: Grid, values: Mapping[str, Any]) -> Grid:
    """``grid`` with the axes of ``values`` replaced (``attnio sweep`` flags over a preset or a
    --config file): sizes as value lists (:func:`parse_values`), ``window`` and ``causal`` as
    :func:`parse_window`/:func:`parse_causal` read them, ``algo`` a comma-separated list of
    algorithms; any other key (``mode``, ``seed``, ``eps``, ...) as it is."""
    import dataclasses

    kw: dict[str, Any] = {}
    for k, v in values.items():
        if k in ("N", "Nq", "Nkv", "d", "M", "batch", "heads", "kv_heads"):
            kw[k] = parse_values(k, v)
        elif k == "window":
            kw[k] = parse_window(v)
        elif k == "algo":
            kw["algorithms"] = tuple(v.split(","))
        elif k == "causal":
            kw["causal"] = parse_causal(v)
        else:
            kw[k] = v
    return dataclasses.replace(grid, **kw)
