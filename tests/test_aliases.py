"""The first layout's module paths still work for one release: each is a deprecated alias that
warns, naming the new path, at the line of the code that uses it, and re-exports the new module's
objects (the very same objects, not copies).

Each alias warns once per process (when first imported), and the suite turns these warnings into
errors, so the imports run in fresh interpreters.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

import attnio

#: old module path -> the module it moved to
MOVED = {
    "attnio.cache": "attnio.cachesim.caches",
    "attnio.dag": "attnio.pebble.dag",
    "attnio.devices": "attnio.hardware.devices",
    "attnio.errors": "attnio.core.errors",
    "attnio.memory": "attnio.core.memory",
    "attnio.reference": "attnio.core.reference",
    "attnio.report": "attnio.experiments.report",
    "attnio.store": "attnio.experiments.store",
    "attnio.sweep": "attnio.experiments.sweep",
    "attnio.verify": "attnio.cachesim.validation",
    "attnio.algorithms.matmul": "attnio.blocks.matmul",
    "attnio.approx.bounds": "attnio.bounds.approximate",
}

#: names an alias keeps although the new module does not define them (the old module had them)
EXTRA_NAMES = {"attnio.errors": {"check_int"}, "attnio.algorithms.matmul": {"Matmul"}}

# For each old path, in a fresh interpreter running a script (as a user's code would): the
# warnings it raised (category, message, the file they point at) and whether every public name of
# the new module is the same object in the alias.
HEAD = textwrap.dedent('''
    import importlib, json, sys, warnings

    out = {}

    def record(old, new, use):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            alias = use()
        target = importlib.import_module(new)
        public = getattr(target, "__all__", None) or [n for n in vars(target) if n[0] != "_"]
        out[old] = {
            "warnings": [[w.category.__name__, str(w.message), w.filename] for w in caught],
            "module": alias.__name__,
            "same": sorted(n for n in public if getattr(alias, n, None) is getattr(target, n)),
            "public": sorted(public),
            "has": sorted(n for n in vars(alias) if n[0] != "_"),
        }
''')


def _use(form: str, old: str) -> str:
    """The body of a function that reaches the module ``old`` the way user code would."""
    parent, _, leaf = old.rpartition(".")
    if form == "import":
        return f"    import {old}\n    return sys.modules[{old!r}]\n"
    if form == "from":
        return f"    from {parent} import {leaf}\n    return {leaf}\n"
    # attribute access on the package, as in `attnio.sweep.run_sweep(...)`
    return f"    import {parent}\n    return {old}\n"


def _run(tmp_path, form: str, moved: dict[str, str]) -> tuple[dict, str]:
    script = tmp_path / f"user_{form}.py"
    body = [HEAD]
    for i, (old, new) in enumerate(moved.items()):
        body.append(f"def use_{i}():\n{_use(form, old)}\nrecord({old!r}, {new!r}, use_{i})\n")
    body.append("print(json.dumps(out))\n")
    script.write_text("\n".join(body))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    proc = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout), str(script)


def _check(got: dict, script: str, moved: dict[str, str]) -> None:
    assert set(got) == set(moved)
    for old, new in moved.items():
        r = got[old]
        deprecations = [w for w in r["warnings"] if w[0] == "DeprecationWarning" and old in w[1]]
        assert len(deprecations) == 1, (old, r["warnings"])
        _, msg, filename = deprecations[0]
        assert f"{old} moved to {new}" in msg and "0.3" in msg, msg
        # the warning points at the user's line, so Python's default filters show it there
        assert filename == script, (old, filename)
        assert r["same"] == r["public"], (old, set(r["public"]) - set(r["same"]))
        assert EXTRA_NAMES.get(old, set()) <= set(r["has"]), old


def test_importing_an_old_path_warns_naming_the_new_one_and_re_exports_it(tmp_path):
    got, script = _run(tmp_path, "import", MOVED)
    _check(got, script, MOVED)
    assert all(got[old]["module"] == old for old in MOVED)


# `attnio.reference` the attribute (and so `from attnio import reference`) is the new module
# itself, public API without a warning; only the module path `import attnio.reference` is an alias
NOT_REFERENCE = {old: new for old, new in MOVED.items() if old != "attnio.reference"}


def test_from_import_of_an_old_path_warns_at_the_callers_line(tmp_path):
    got, script = _run(tmp_path, "from", NOT_REFERENCE)
    _check(got, script, NOT_REFERENCE)


def test_old_top_level_module_as_an_attribute_warns_at_the_callers_line(tmp_path):
    top = {old: new for old, new in NOT_REFERENCE.items() if old.count(".") == 1}
    got, script = _run(tmp_path, "attribute", top)
    _check(got, script, top)


def test_reference_attribute_is_the_new_module_without_a_warning():
    from attnio.core import reference

    assert attnio.reference is reference


def test_names_of_kind_matmul_warns_that_the_matmul_left_the_registry():
    with pytest.warns(DeprecationWarning, match="attnio.blocks.matmul"):
        assert attnio.algorithms.names("matmul") == []
    with pytest.warns(DeprecationWarning, match="attnio.blocks.matmul"):
        assert attnio.algorithms.all_algorithms("matmul") == []
    with pytest.warns(DeprecationWarning, match="kind argument"):
        assert attnio.algorithms.names("attention") == attnio.algorithms.names()
