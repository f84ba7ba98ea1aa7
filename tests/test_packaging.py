"""Packaging and hygiene: the version in one place, the optional extras lazy and named alike.

* pyproject's version is the library's ``__version__``; every extra that
  :data:`attnio.core.extras.EXTRAS` names exists in pyproject's optional dependencies;
* ``import attnio`` loads no heavy or optional package (matplotlib, torch, Dask, OR-Tools,
  pycachesim, pandas, pyarrow; nor rich or sqlite3, which only the CLI and the store use);
* with every optional package blocked, every module of attnio still imports, and each feature
  that needs one raises :class:`MissingExtraError` with the one message (the extra, the pip
  command);
* no module imports a ``_private`` name (or module) of another package: the part of the layer
  contract that import-linter (pyproject.toml, checked by ``.ci/run``) cannot express;
* every data file inside the package (not Python: the bounds' ``params.json``) is listed in
  pyproject's ``[tool.setuptools.package-data]``, so a wheel ships it.

How long ``import attnio`` takes is measured by ``benchmarks/bench_import.py``, not asserted here.
"""

from __future__ import annotations

import ast
import fnmatch
import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import attnio
from attnio.core.errors import MissingExtraError
from attnio.core.extras import EXTRAS, require
from conftest import load_script

ROOT = Path(__file__).resolve().parent.parent

try:
    import tomllib  # novermin (guarded: the tomli backport below on 3.10)
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

#: import names of the optional packages (each installed by an extra) and of the standard or
#: required modules that only some commands use
OPTIONAL = ("matplotlib", "torch", "distributed", "dask", "ortools", "cachesim", "pandas",
            "pyarrow")
NOT_AT_IMPORT = OPTIONAL + ("rich", "sqlite3")


def _pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def _python(code: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          timeout=300)


def test_pyproject_version_is_the_library_version():
    assert _pyproject()["project"]["version"] == attnio.__version__


def test_license_is_an_spdx_expression():
    assert _pyproject()["project"]["license"] == "MIT"


def test_license_file_is_the_mit_license_of_pyproject():
    text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert text.startswith("MIT License\n") and "Copyright (c) 2026 the attnio developers" in text
    assert "Permission is hereby granted, free of charge" in text


def test_citation_file_is_cff_1_2_0_with_pyproject_version_and_the_papers():
    """CITATION.cff: the keys CFF 1.2.0 requires, pyproject's version and license, and a
    reference (type, title, authors, year and a link) for each paper whose results attnio
    implements (the arXiv numbers the README and the docs cite)."""
    yaml = pytest.importorskip("yaml")  # a dependency of the dask extra
    cff = yaml.safe_load((ROOT / "CITATION.cff").read_text(encoding="utf-8"))
    assert cff["cff-version"] == "1.2.0" and cff["type"] == "software"
    assert cff["message"] and cff["title"].startswith("attnio") and cff["authors"]
    assert cff["version"] == _pyproject()["project"]["version"] == attnio.__version__
    assert cff["license"] == _pyproject()["project"]["license"]
    links = set()
    for ref in cff["references"]:
        assert ref["type"] in ("article", "conference-paper") and ref["title"], ref
        assert all(a["family-names"] and a["given-names"] for a in ref["authors"]), ref
        assert isinstance(ref["year"], int) and (ref.get("url") or ref.get("doi")), ref
        links.add(ref.get("url") or ref["doi"])
    for arxiv in ("2402.07443", "2205.14135", "2307.08691", "2410.09397", "2302.13214",
                  "1908.09606", "1702.02017"):
        assert f"https://arxiv.org/abs/{arxiv}" in links, arxiv


def test_every_extra_named_by_the_library_exists_in_pyproject():
    extras = _pyproject()["project"]["optional-dependencies"]
    for module, extra in EXTRAS.items():
        assert extra in extras, (module, extra)
        # and the dev extra (what the README installs) includes it, so the tests that need it run
        assert set(extras[extra]) <= set(extras["dev"]), extra


def test_missing_extra_message_names_the_extra_and_the_pip_command():
    with pytest.raises(MissingExtraError) as e:
        require("no_such_module_xyz.sub", "plot", "drawing the figures")
    assert str(e.value) == ("drawing the figures needs no_such_module_xyz, which is not "
                            "installed: pip install 'attnio[plot]'")
    assert isinstance(e.value, ImportError) and e.value.extra == "plot"


def test_a_bare_import_attnio_loads_no_optional_package_and_reaches_every_subpackage():
    """One fresh interpreter (no other import has loaded anything first; one process for both
    checks, an interpreter start costs more than they do): ``import attnio`` loads no optional
    package; then ``attnio.X`` for each name of ``__all__`` (the lazy ones load on first
    access) and a name deep inside one of them."""
    r = _python("import sys, attnio\n"
                "print(' '.join(sorted(sys.modules)))\n"
                "for n in attnio.__all__:\n"
                "    getattr(attnio, n)\n"
                "print(attnio.blocks.matmul.run_matmul.__name__)")
    assert r.returncode == 0, r.stderr
    modules, reached = r.stdout.splitlines()
    loaded = {m.split(".")[0] for m in modules.split()}
    assert "attnio" in loaded and "numpy" in loaded
    assert loaded.isdisjoint(NOT_AT_IMPORT), sorted(loaded & set(NOT_AT_IMPORT))
    assert reached.split() == ["run_matmul"]


# Runs in a fresh interpreter in which every optional package fails to import as if it were not
# installed.  It imports every module of attnio, then calls each feature that needs an extra.
BLOCKED = textwrap.dedent('''
    import importlib, json, pkgutil, sys, tempfile

    BLOCKED = set(sys.argv[1].split(","))

    class NotInstalled:
        def find_spec(self, name, path=None, target=None):
            if name.partition(".")[0] in BLOCKED:
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None

    sys.meta_path.insert(0, NotInstalled())
    import attnio
    from attnio.core.errors import MissingExtraError

    out = {"import_errors": {}, "features": {}}
    for info in pkgutil.walk_packages(attnio.__path__, "attnio."):
        if info.name == "attnio.__main__":  # runs the CLI
            continue
        try:
            importlib.import_module(info.name)
        except Exception as e:
            out["import_errors"][info.name] = repr(e)
    out["leaked"] = sorted(m for m in sys.modules if m.partition(".")[0] in BLOCKED)

    def feature(name, call):
        try:
            call()
            out["features"][name] = "no error"
        except MissingExtraError as e:
            out["features"][name] = str(e)
        except Exception as e:
            out["features"][name] = "wrong error: " + repr(e)

    def store_parquet():
        from attnio.experiments.store import ResultsStore
        from attnio.experiments.sweep import Grid, run_sweep
        with tempfile.TemporaryDirectory() as tmp:
            run_sweep(Grid(N=(64,), d=(8,), M=(256,), algorithms=("flash2",)), tmp + "/r.sqlite",
                      jobs=1, progress=False)
            with ResultsStore(tmp + "/r.sqlite", readonly=True) as st:
                st.export(tmp + "/r.parquet")

    def sweep_dask():
        from attnio.experiments.sweep import Grid, run_sweep
        with tempfile.TemporaryDirectory() as tmp:
            run_sweep(Grid(N=(64,), d=(8,), M=(256,), algorithms=("flash2",)), tmp + "/r.sqlite",
                      jobs=1, dask=True, progress=False)

    def pebble_cpsat():
        from attnio.pebble import cpsat, dag
        cpsat(dag.chain(3), 2, time_limit=1.0)

    def figure():
        from attnio.core.extras import figure
        figure()

    import numpy as np
    feature("torch", lambda: attnio.torch_ops.poly_attention(np.ones((4, 2)), np.ones((4, 2)),
                                                           np.ones((4, 2))))
    feature("pycachesim", lambda: attnio.cachesim.validation.pycachesim_replay(
        ([0, 1], [0, 0]), 2))
    feature("ortools", pebble_cpsat)
    feature("matplotlib", figure)
    feature("dask", sweep_dask)
    feature("parquet", store_parquet)
    print(json.dumps(out))
''')

#: what each feature must say when its extra is missing (the one message of MissingExtraError)
EXPECTED = {
    "torch": ("torch", "torch"),
    "pycachesim": ("cachesim", "validate"),
    "ortools": ("ortools", "pebble"),
    "matplotlib": ("matplotlib", "plot"),
    "dask": ("distributed", "dask"),
    "parquet": ("pandas", "parquet"),
}


def test_every_module_imports_and_every_feature_names_its_extra_without_the_extras():
    proc = subprocess.run([sys.executable, "-c", BLOCKED, ",".join(OPTIONAL)],
                          env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["import_errors"] == {}
    assert out["leaked"] == []
    assert set(out["features"]) == set(EXPECTED)
    for feature, (module, extra) in EXPECTED.items():
        msg = out["features"][feature]
        assert msg.endswith(f"needs {module}, which is not installed: "
                            f"pip install 'attnio[{extra}]'"), (feature, msg)


def _private_imports_across_packages() -> list[tuple[str, str]]:
    """(importer, imported name) for each ``from X import _y`` (or ``X._y`` a module) in src/
    whose private part belongs to another package than the importer's (``attnio.core`` and
    ``attnio.runner`` count as packages)."""
    src = ROOT / "src"
    found = []
    for path in sorted((src / "attnio").rglob("*.py")):
        parts = list(path.relative_to(src).with_suffix("").parts)
        is_pkg = parts[-1] == "__init__"
        module = ".".join(parts[:-1] if is_pkg else parts)
        package = module if is_pkg else module.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.ImportFrom):
                continue
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if not target.startswith("attnio"):
                continue
            for alias in node.names:
                name = f"{target}.{alias.name}".split(".")
                private = [i for i, p in enumerate(name) if p.startswith("_")
                           and not p.startswith("__")]
                if not private:
                    continue
                owner = name[:private[0]]
                if owner[:2] != module.split(".")[:2]:
                    found.append((module, ".".join(name)))
    return found


def test_no_private_name_is_imported_across_packages():
    assert _private_imports_across_packages() == []


def test_every_data_file_in_the_package_is_listed_in_package_data():
    package_data = _pyproject()["tool"]["setuptools"]["package-data"]
    src = ROOT / "src"
    data = [path for path in (src / "attnio").rglob("*")
            if path.is_file() and path.suffix not in (".py", ".pyc")
            and "__pycache__" not in path.parts]
    assert data, "the package holds data files (at least attnio/bounds/params.json)"
    for path in data:
        package = ".".join(path.parent.relative_to(src).parts)
        globs = package_data.get(package, [])
        assert any(fnmatch.fnmatch(path.name, g) for g in globs), (
            f"{path.relative_to(ROOT)}: add it to [tool.setuptools.package-data] {package!r}")


def _requirement_name(spec: str) -> str:
    return re.split(r"[\s<>=!~;\[(]", spec.strip(), maxsplit=1)[0].lower().replace("_", "-")


def _closure(names: set[str]) -> set[str]:
    """``names`` and every distribution they require, recursively (installed ones only)."""
    from importlib import metadata

    seen: set[str] = set()
    todo = list(names)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        try:
            reqs = metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            continue
        for req in reqs:
            if "extra ==" in req:
                continue
            todo.append(_requirement_name(req))
    return seen


def test_every_package_the_tests_import_is_installed_by_the_dev_extra():
    """A fresh environment made by the README's install command (``pip install -e '.[dev]'``)
    has every third-party package that tests/ imports: each top-level import of a test file is
    the standard library, attnio, a local test helper, or a distribution that the project's
    dependencies or its dev extra require (directly or through another).  The scipy a test
    imported without the extra naming it is the case this guards (CI's fresh venv is the other
    guard)."""
    from importlib import metadata

    meta = _pyproject()["project"]
    declared = {_requirement_name(s) for s in meta["dependencies"]}
    declared |= {_requirement_name(s) for s in meta["optional-dependencies"]["dev"]}
    allowed = _closure(declared)
    providers = metadata.packages_distributions()
    local = {p.stem for p in (ROOT / "tests").rglob("*.py")}  # scripts load by path (load_script)
    missing = []
    for path in sorted((ROOT / "tests").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                mods = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                mods = [node.module]
            else:
                continue
            for mod in mods:
                top = mod.split(".")[0]
                if top in sys.stdlib_module_names or top in local or top == "attnio":
                    continue
                dists = {d.lower().replace("_", "-") for d in providers.get(top, [])}
                if not dists & allowed:
                    missing.append(f"{path.name}: {top} (distributions {sorted(dists)})")
    assert not missing, "imported by tests, not installed by '.[dev]': " + "; ".join(missing)


def test_readme_starts_with_the_two_setup_commands_ci_runs():
    """The README's first code block is two lines, the ones .ci/run runs verbatim: an install
    that ends by running attnio on its default, and the test command."""
    readme_commands = load_script(".ci/readme_commands.py")
    install, test = readme_commands.commands((ROOT / "README.md").read_text(encoding="utf-8"))
    assert "pip install torch==2.13.0" in install and "'.[dev]'" in install
    assert " attnio run " in f" {install} "
    assert test == "python -m pytest -q"
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert "readme_commands.py install" in ci and "readme_commands.py test" in ci
