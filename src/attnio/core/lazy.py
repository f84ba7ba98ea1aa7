"""Names a package loads on first use (PEP 562): one ``__getattr__`` for every package that
keeps a heavy module (torch, matplotlib, the GPU model) off ``import attnio``.

>>> ns = {"__name__": "json"}
>>> get = lazy_names("json", {"loads": ("decoder", "JSONDecoder")}, ns)
>>> get("loads").__name__, "loads" in ns
('JSONDecoder', True)
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_names"]


def lazy_names(package: str, table: Mapping[str, tuple[str, str]],
               namespace: dict[str, Any]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``package``: a name of ``table`` (name -> (submodule, its
    name there)) is imported on first use and kept in ``namespace`` (the package's globals),
    any other name an AttributeError as Python words it."""

    def __getattr__(name: str) -> Any:
        if name in table:
            mod, attr = table[name]
            value = getattr(importlib.import_module(f"{package}.{mod}"), attr)
            namespace[name] = value
            return value
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__
