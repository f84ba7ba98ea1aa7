"""Optional dependencies: imported where they are used, with one message when one is missing.

>>> np = require("numpy", "core", "this example")
>>> require("no_such_module_xyz", "plot", "a report's figures")
Traceback (most recent call last):
...
attnio.core.errors.MissingExtraError: a report's figures needs no_such_module_xyz, which is not installed: pip install 'attnio[plot]'
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

from .errors import MissingExtraError

__all__ = ["EXTRAS", "available", "figure", "require"]

#: The package each extra installs, by import name (what ``pip install 'attnio[extra]'`` adds).
EXTRAS = {
    "matplotlib": "plot",
    "torch": "torch",
    "ortools": "pebble",
    "cachesim": "validate",
    "distributed": "dask",
    "pandas": "parquet",
    "pyarrow": "parquet",
    "scipy": "calibrate",
}


def require(module: str, extra: str | None = None, purpose: str = "this feature") -> ModuleType:
    """Import ``module`` (a dotted name), or raise :class:`MissingExtraError` naming the extra.

    ``extra`` defaults to the extra that installs the module's top-level package.
    """
    top = module.split(".")[0]
    try:
        return importlib.import_module(module)
    except ImportError as e:
        if e.name is not None and e.name.split(".")[0] != top:  # the module itself is broken
            raise
        raise MissingExtraError(top, extra or EXTRAS.get(top, f"{top}_extra"), purpose) from None


def available(module: str) -> bool:
    """Whether ``module`` can be imported (without importing it when it is already loaded)."""
    import importlib.util

    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def figure(figsize: tuple[float, float] = (6.4, 4.8), purpose: str = "drawing a figure") -> Any:
    """A new :class:`matplotlib.figure.Figure`, drawn without pyplot.

    No backend is chosen and no global state is touched: the figure renders itself when saved
    (``fig.savefig(path)``), so a user's own matplotlib session is left as it was.
    """
    mpl_figure = require("matplotlib.figure", "plot", purpose)
    return mpl_figure.Figure(figsize=figsize)
