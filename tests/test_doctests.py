"""Every module's docstring examples run (they must not drift from the program)."""

from __future__ import annotations

import doctest
import importlib
from pathlib import Path

import pytest

import attnio
from conftest import need

# the entry point (importing it would run the CLI)
_SKIP = {"attnio.__main__"}


def _module_names() -> list[str]:
    """Every module and subpackage under attnio, from its files (``pkgutil.walk_packages``
    imports each package to find its modules: torch with ``attnio.torch_ops``, in every xdist
    worker's collection; each test imports its own module)."""
    root = Path(attnio.__file__).parent
    names = set()
    for f in root.rglob("*.py"):
        parts = f.relative_to(root.parent).with_suffix("").parts
        names.add(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return sorted(names - {"attnio"} - _SKIP)


MODULES = _module_names()
# modules whose examples use an optional package: skipped, naming the extra, without it
_EXAMPLES_NEED = {"attnio.torch_ops": "torch"}


@pytest.mark.parametrize("name", MODULES)
def test_module_docstring_examples_run(name):
    if name in _EXAMPLES_NEED:
        need(_EXAMPLES_NEED[name])
    mod = importlib.import_module(name)
    result = doctest.testmod(mod, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0, f"{result.failed} failing example(s) in {name}"
