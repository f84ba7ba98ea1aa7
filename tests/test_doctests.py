"""Every module's docstring examples run (they must not drift from the program)."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import attnio
from conftest import need

# the entry point (importing it would run the CLI)
_SKIP = {"attnio.__main__"}
MODULES = sorted(m.name for m in pkgutil.walk_packages(attnio.__path__, "attnio.")
                 if m.name not in _SKIP)
# modules whose examples use an optional package: skipped, naming the extra, without it
_EXAMPLES_NEED = {"attnio.torch_ops": "torch"}


@pytest.mark.parametrize("name", MODULES)
def test_module_docstring_examples_run(name):
    if name in _EXAMPLES_NEED:
        need(_EXAMPLES_NEED[name])
    mod = importlib.import_module(name)
    result = doctest.testmod(mod, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0, f"{result.failed} failing example(s) in {name}"
