"""The tabulated segment parameters of the explicit bounds (Theorems A-E, docs/bounds.md §12).

The tables live in the package data file ``params.json`` beside this module, written by
``python benchmarks/bound_params.py --write`` (do not edit it by hand).  For x = d²/M on the grid
:func:`grid` (log2 x), each table holds the (K/M, multiplier) that maximise the leading constant
of a theorem: A and D (potential μ / max(√M, M/d)), B and E (root-piece multiplier ν / √M); C is
matmul's single (K/M, μ/√M).  Any values give a valid bound: the table only sets how tight it is.
The file's third column, the leading constant at each node, is informational and not read here.

The file is read once, on the first bound evaluated (not at ``import attnio``).

>>> lookup(table("A"), 2.0 ** grid()[0]) == table("A")[0]
True
"""

from __future__ import annotations

import functools
import math
from typing import Any

__all__ = ["Table", "grid", "lookup", "matmul", "table"]

#: (K/M, multiplier) per node of the grid.
Table = tuple[tuple[float, float], ...]


@functools.cache
def _load() -> dict[str, Any]:
    import json
    from importlib import resources

    data = json.loads(resources.files(__name__.rpartition(".")[0]).joinpath("params.json")
                      .read_text(encoding="utf-8"))
    tables = {name: tuple((row[0], row[1]) for row in data[name]) for name in "ABDE"}
    return {"grid": tuple(data["grid_log2_x"]), "C": (data["C"][0], data["C"][1]), **tables}


def grid() -> tuple[float, ...]:
    """The nodes log2(d²/M) of the tables (from -16 to 10 in steps of 1/4)."""
    return _load()["grid"]


def table(name: str) -> Table:
    """Theorem ``name``'s table ("A", "B", "D" or "E"): (K/M, multiplier) at each node."""
    return _load()[name]


def matmul() -> tuple[float, float]:
    """Theorem C's (K/M, μ/√M): one pair, matmul's optimum does not depend on the sizes."""
    return _load()["C"]


def lookup(tab: Table, x: float) -> tuple[float, float]:
    """The tabulated (K/M, multiplier) at ``x = d²/M``: linear in log2 x between the grid's
    nodes, the end values outside it."""
    nodes = grid()
    t = math.log2(x)
    if t <= nodes[0]:
        return tab[0]
    if t >= nodes[-1]:
        return tab[-1]
    step = nodes[1] - nodes[0]
    i = min(int((t - nodes[0]) / step), len(nodes) - 2)
    w = (t - nodes[i]) / step
    (k0, m0), (k1, m1) = tab[i], tab[i + 1]
    return k0 + w * (k1 - k0), m0 + w * (m1 - m0)
