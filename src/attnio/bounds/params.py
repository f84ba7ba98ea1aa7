"""The tabulated segment parameters of the explicit bounds (Theorems A-E, docs/bounds.md §12).

The tables live in the package data file ``params.json`` beside this module, written by
``python benchmarks/bound_params.py --write`` (do not edit it by hand).  For x = d²/M on the grid
:func:`grid` (log2 x), each table holds the (K/M, multiplier) that maximise the leading constant
of a theorem: A and D (potential μ / max(√M, M/d)), B and E (root-piece multiplier ν / √M); C is
matmul's single (K/M, μ/√M).  Any values give a valid bound: the table only sets how tight it is.
The file's third column, the leading constant at each node, is informational and not read here.

The file is read once, on the first bound evaluated (not at ``import attnio``), from its packed
copy ``params.f64`` (:func:`read_packed`: the same numbers as float64 bytes, written with the JSON
by the same command, :func:`write_packed`; parsing the JSON's decimal text took most of a cold
plan's millisecond of table loading).  ``tests/bounds/test_params_packed.py`` checks that each
packed copy holds exactly its JSON's numbers.

>>> lookup(table("A"), 2.0 ** grid()[0]) == table("A")[0]
True
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable
from typing import Any

__all__ = ["PACKED", "Table", "grid", "interpolate", "interpolate_many", "lookup", "lookup_parts",
           "matmul", "pack_json", "read_packed", "table", "write_packed"]

#: (K/M, multiplier) per node of the grid.
Table = tuple[tuple[float, float], ...]


#: The first bytes of a packed table file (then a JSON header line, then the numbers).
MAGIC = b"attnio-f64\n"

#: The packed copies beside their JSON tables: file -> (JSON file, {key: columns kept}) (0
#: columns: a flat list).
PACKED: dict[str, tuple[str, dict[str, int]]] = {
    "params.f64": ("params.json", {"grid_log2_x": 0, "A": 2, "B": 2, "D": 2, "E": 2, "C": 0}),
    "levelled.f64": ("levelled.json", {"nodes": 8, "alternates": 8}),
}


def read_packed(data: bytes) -> dict[str, Any]:
    """The arrays of a packed table file's bytes: ``MAGIC``, one line of JSON ``[[key, rows,
    columns], ...]`` (columns 0: a flat list), then every array's float64 numbers, little-endian,
    row by row, in the header's order; each as nested lists of floats."""
    import numpy as np

    if not data.startswith(MAGIC):
        raise ValueError("not a packed table file (attnio-f64)")
    import json

    end = data.index(b"\n", len(MAGIC))
    header = json.loads(data[len(MAGIC):end])
    flat = np.frombuffer(data, dtype="<f8", offset=end + 1)
    out: dict[str, Any] = {}
    i = 0
    for key, rows, cols in header:
        n = rows * max(cols, 1)
        part = flat[i:i + n]
        out[key] = (part if cols == 0 else part.reshape(rows, cols)).tolist()
        i += n
    if i != len(flat):
        raise ValueError("packed table file: the header does not account for every number")
    return out


def write_packed(path: str, arrays: dict[str, list[Any]]) -> None:
    """Write ``arrays`` (key -> a flat list of numbers, or rows of one length) as
    :func:`read_packed` reads them."""
    import json

    import numpy as np

    header, chunks = [], []
    for key, rows in arrays.items():
        a = np.asarray(rows, dtype="<f8")
        header.append([key, int(a.shape[0]), int(a.shape[1]) if a.ndim == 2 else 0])
        chunks.append(a.tobytes())
    with open(path, "wb") as f:
        f.write(MAGIC + json.dumps(header, separators=(",", ":")).encode() + b"\n")
        f.write(b"".join(chunks))


def pack_json(folder: str, packed: str) -> None:
    """(Re)write the packed copy ``packed`` (a key of :data:`PACKED`) in ``folder`` from its JSON
    table there: the table scripts call it after writing the JSON."""
    import json
    import os

    source, keys = PACKED[packed]
    with open(os.path.join(folder, source), encoding="utf-8") as f:
        data = json.load(f)
    write_packed(os.path.join(folder, packed), {
        k: [float(v) for v in data.get(k, [])] if cols == 0 else
        [[float(v) for v in row[:cols]] for row in data.get(k, [])]
        for k, cols in keys.items()})


def packed_bytes(name: str) -> bytes:
    """The bytes of the packed table file ``name`` of this package."""
    import os

    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), name)
    if os.path.isfile(path):  # (a plain install: read it directly, much cheaper)
        with open(path, "rb") as f:
            return f.read()
    from importlib import resources

    return resources.files(__name__.rpartition(".")[0]).joinpath(name).read_bytes()


def _read_flat(data: bytes) -> dict[str, tuple[float, ...]]:
    """:func:`read_packed`'s arrays as flat tuples (rows concatenated): every number made a
    Python float once (one ``tolist``) and sliced (the same floats, cheaper for a cold call)."""
    import json

    import numpy as np

    if not data.startswith(MAGIC):
        raise ValueError("not a packed table file (attnio-f64)")
    end = data.index(b"\n", len(MAGIC))
    flat = np.frombuffer(data, dtype="<f8", offset=end + 1).tolist()
    out: dict[str, tuple[float, ...]] = {}
    i = 0
    for key, rows, cols in json.loads(data[len(MAGIC):end]):
        n = rows * max(cols, 1)
        out[key] = tuple(flat[i:i + n])
        i += n
    if i != len(flat):
        raise ValueError("packed table file: the header does not account for every number")
    return out


@functools.cache
def _load() -> dict[str, Any]:
    data = _read_flat(packed_bytes("params.f64"))
    # (two columns each: the pairs of a flat row-major tuple)
    tables = {name: tuple(zip(data[name][::2], data[name][1::2])) for name in "ABDE"}
    nodes = data["grid_log2_x"]
    parts = {name: (nodes, nodes[1] - nodes[0], len(nodes) - 2, tab)
             for name, tab in tables.items()}
    return {"grid": nodes, "C": (data["C"][0], data["C"][1]), "parts": parts, **tables}


def grid() -> tuple[float, ...]:
    """The nodes log2(d²/M) of the tables (from -16 to 10 in steps of 1/4)."""
    return _load()["grid"]


def table(name: str) -> Table:
    """Theorem ``name``'s table ("A", "B", "D" or "E"): (K/M, multiplier) at each node."""
    return _load()[name]


def matmul() -> tuple[float, float]:
    """Theorem C's (K/M, μ/√M): one pair, matmul's optimum does not depend on the sizes."""
    return _load()["C"]


def lookup_parts(name: str) -> tuple[tuple[float, ...], float, int, Table]:
    """What :func:`interpolate` reads for table ``name``: the nodes, their step, the last
    interval's index and the table, computed once when the tables are read."""
    return _load()["parts"][name]


def interpolate(parts: tuple[tuple[float, ...], float, int, Table], x: float
                ) -> tuple[float, float]:
    """The tabulated (K/M, multiplier) at ``x = d²/M`` from a table's :func:`lookup_parts`:
    linear in log2 x between the grid's nodes, the end values outside it."""
    return interpolate_many(parts, (x,))[0]


def interpolate_many(parts: tuple[tuple[float, ...], float, int, Table], xs: Iterable[float]
                     ) -> list[tuple[float, float]]:
    """:func:`interpolate` at each x of ``xs`` (one loop: the same floats)."""
    nodes, step, last, tab = parts
    lo, hi = nodes[0], nodes[-1]
    first, end = tab[0], tab[-1]
    log2 = math.log2
    out = []
    for x in xs:
        t = log2(x)
        if t <= lo:
            out.append(first)
        elif t >= hi:
            out.append(end)
        else:
            i = min(int((t - lo) / step), last)
            w = (t - nodes[i]) / step
            (k0, m0), (k1, m1) = tab[i], tab[i + 1]
            out.append((k0 + w * (k1 - k0), m0 + w * (m1 - m0)))
    return out


def lookup(tab: Table, x: float) -> tuple[float, float]:
    """The tabulated (K/M, multiplier) at ``x = d²/M`` of any table on the grid's nodes
    (:func:`interpolate`)."""
    nodes = grid()
    return interpolate((nodes, nodes[1] - nodes[0], len(nodes) - 2, tab), x)
